"""Tools of real MCP servers (tests/mcp_servers/calculator.py, the ``mcp`` package's FastMCP) over stdio and
streamable HTTP: listed into the prompt, called by tool agents, and every way a server misbehaves."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

pytest.importorskip("langchain_mcp_adapters")

from agents.base import CallSettings
from agents.tools import McpServerError, ToolAgent, ToolsetError, load_mcp_tools, mcp_connections
from mas_orchestra import RunSettings
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.testing import ScriptedChatModel, cot_reply

pytestmark = pytest.mark.mcp

SERVER = Path(__file__).resolve().parent / "mcp_servers" / "calculator.py"
STDIO = {"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}}


def call(name: str, **args: object) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


def spec(tools: list[str]) -> str:
    return (
        "<thinking>compute it</thinking><agent><agent_id>C</agent_id><agent_name>ToolAgent</agent_name>"
        "<agent_description>calculate</agent_description><required_arguments><agent_input>Compute it.</agent_input>"
        f"<tools>{json.dumps(tools)}</tools></required_arguments></agent>"
    )


@pytest.fixture(scope="module")
def calc_tools():
    return {tool.name: tool for tool in load_mcp_tools(STDIO, timeout=60)}


def test_stdio_server_tools_are_listed_with_descriptions(calc_tools):
    assert {"add", "multiply", "calculate", "divide", "hang", "crash", "garble"} <= set(calc_tools)
    assert "arithmetic expression" in calc_tools["calculate"].description


def test_orchestra_offers_mcp_tools_and_a_tool_agent_calls_them():
    sub = ScriptedChatModel(replies=[call("calculate", expression="(17 + 25) * 3"), cot_reply("126")])
    orchestra = Orchestra(ScriptedChatModel(replies=[spec(["calculate"])]), sub, settings=RunSettings(call_timeout=30),
                          mcp=STDIO)
    assert "- calculate: Evaluate an arithmetic expression" in orchestra.prompt("q")
    outcome = orchestra.run("What is (17 + 25) * 3?")
    assert outcome.status is Status.OK and outcome.answer == "126", outcome.error
    assert "Result of calculate:\n126" in sub.prompts[1]
    assert outcome.usage.tool_calls == 1 and outcome.usage.tool_errors == 0


async def test_a_tool_error_a_hang_a_crash_and_garbage_are_observations_and_the_server_recovers(calc_tools):
    model = ScriptedChatModel(replies=[
        call("divide", a=1, b=0), call("hang"), call("crash"), call("garble"), call("add", a=2, b=3), cot_reply("5"),
    ])
    agent = ToolAgent(model, list(calc_tools.values()), max_turns=6, settings=CallSettings(call_timeout=5))
    started = time.perf_counter()
    result = await agent.arun("task")
    elapsed = time.perf_counter() - started
    log = {entry["tool"]: entry for entry in result.details["tool_calls"]}
    assert result.answer == "5"
    assert "division by zero" in log["divide"]["error"] and "division by zero" in model.prompts[1]
    assert log["hang"]["error"] == "timed out after 5 s"
    assert log["crash"]["ok"] is False and log["garble"]["ok"] is False
    assert log["add"]["ok"] is True and "Result of add:\n5" in model.prompts[5]  # a fresh session works again
    assert elapsed < 5 * 3 + 20  # nothing waits past the call timeout (three bounded calls, plus start-ups)


def test_a_server_that_does_not_start_is_a_typed_error_naming_it():
    missing = {"mcpServers": {"ghost": {"command": "/nonexistent/mcp-server", "args": []}}}
    with pytest.raises(McpServerError, match="MCP server 'ghost': could not be started"):
        Orchestra(ScriptedChatModel(), ScriptedChatModel(), mcp=missing)
    exits = {"mcpServers": {"quitter": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}}}
    with pytest.raises(McpServerError, match="'quitter'"):
        load_mcp_tools(exits, timeout=20)


def test_a_server_that_never_answers_is_cut_at_the_listing_timeout():
    silent = {"mcpServers": {"mute": {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}}}
    started = time.perf_counter()
    with pytest.raises(McpServerError, match="'mute': did not start and list its tools within 2 s"):
        load_mcp_tools(silent, timeout=2)
    assert time.perf_counter() - started < 15


def test_configuration_errors(tmp_path):
    with pytest.raises(ToolsetError, match="no such file"):
        mcp_connections(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ToolsetError, match="not readable JSON"):
        mcp_connections(tmp_path / "bad.json")
    with pytest.raises(ToolsetError, match="'x': give 'command'"):
        mcp_connections({"mcpServers": {"x": {"cmd": "python"}}})
    (tmp_path / "ok.json").write_text(json.dumps({"mcpServers": {"h": {"url": "http://127.0.0.1:1/mcp"}}}))
    assert mcp_connections(tmp_path / "ok.json") == {"h": {"transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_server(tmp_path):
    port = _free_port()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"HTTP MCP server did not start: {(tmp_path / 'server.log').read_text()[-1000:]}")
                time.sleep(0.1)
        config = {"mcpServers": {"calc": {"url": f"http://127.0.0.1:{port}/mcp"}}}
        sub = ScriptedChatModel(replies=[call("multiply", a=6, b=7), cot_reply("42")])
        outcome = Orchestra(ScriptedChatModel(replies=[spec(["multiply"])]), sub,
                            settings=RunSettings(call_timeout=30), mcp=config).run("6*7?")
        assert outcome.status is Status.OK and outcome.answer == "42" and "Result of multiply:\n42" in sub.prompts[1]
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_served_graph_reads_mcp_servers_from_the_environment_only(tmp_path, monkeypatch):
    from graphs import end_to_end

    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps(STDIO))
    monkeypatch.setenv("MAS_MCP", str(servers))
    monkeypatch.setattr(end_to_end, "_cache", {})
    with pytest.raises(ValidationError, match="mcp"):  # a run's context cannot name MCP servers
        end_to_end.ServedContext.model_validate({"subagent": "scripted:1", "mcp": "ignored.json"})
    context = end_to_end.ServedContext(orchestrator="scripted:1", subagent="scripted:1")
    orchestra = end_to_end.orchestra_from_context(context)
    assert "tools" in orchestra.registry and "calculate" in {t.name for t in orchestra.tools}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _text(result: object) -> str:
    """A tool's answer as text (the adapters give a string or a list of content blocks)."""
    if isinstance(result, str):
        return result
    assert isinstance(result, list)
    return "".join(block["text"] for block in result if block.get("type") == "text")


def _pid_of(result: object) -> int:
    return int(_text(result))


async def test_a_run_keeps_one_session_per_stdio_server_and_stops_it_at_the_end(calc_tools):
    from agents.tools.mcp import mcp_run_sessions

    async with mcp_run_sessions() as sessions:
        first = _pid_of(await calc_tools["pid"].ainvoke({}))
        assert _pid_of(await calc_tools["pid"].ainvoke({})) == first  # the same process answered both
        assert _text(await calc_tools["add"].ainvoke({"a": 2, "b": 3})) == "5.0"
        assert sessions.started == 1 and _alive(first)
    assert not _alive(first)  # the run's end stopped the server
    outside = _pid_of(await calc_tools["pid"].ainvoke({}))  # outside a run: a session (process) per call
    assert outside != first and not _alive(outside)


async def test_a_cancelled_run_leaves_no_server_process_and_a_crash_restarts_the_server(calc_tools):
    import asyncio

    from agents.tools.mcp import mcp_run_sessions

    seen: list[int] = []

    async def run() -> None:
        async with mcp_run_sessions():
            seen.append(_pid_of(await calc_tools["pid"].ainvoke({})))
            await calc_tools["hang"].ainvoke({"seconds": 3600})

    task = asyncio.create_task(run())
    while not seen:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _alive(seen[0])
    async with mcp_run_sessions() as sessions:
        before = _pid_of(await calc_tools["pid"].ainvoke({}))
        with pytest.raises(Exception):  # noqa: B017 - whatever the transport raises when the process dies
            await calc_tools["crash"].ainvoke({})
        after = _pid_of(await calc_tools["pid"].ainvoke({}))
        assert after != before and sessions.started == 2
    assert not _alive(after)


def test_an_orchestra_run_shares_one_server_process_among_its_calls_and_stops_it():
    import re

    sub = ScriptedChatModel(replies=[call("pid"), call("pid"), cot_reply("done")])
    orchestra = Orchestra(ScriptedChatModel(replies=[spec(["pid"])]), sub, settings=RunSettings(call_timeout=30),
                          mcp=STDIO)
    outcome = orchestra.run("Which process answers?")
    assert outcome.status is Status.OK and outcome.usage.tool_calls == 2, outcome.error
    pids = re.findall(r"Result of pid:\n(\d+)", sub.prompts[-1])
    assert len(pids) == 2 and pids[0] == pids[1]  # the run's second call reused the first call's server
    assert not _alive(int(pids[0]))  # and the run's end stopped it
