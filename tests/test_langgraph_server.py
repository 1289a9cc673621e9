"""``langgraph.json`` served by a real ``langgraph dev`` (in-memory LangGraph server) on 127.0.0.1.

A ``langgraph-sdk`` client creates threads, runs the end-to-end graph and a baseline, streams node updates
(the spec's nodes arrive as subgraph updates) and reads the final state. Sub-agents are the local
OpenAI-compatible echo server (llm-katan), chosen per run through the run's ``context`` (the end-to-end graph's
``context_schema``; baselines read it mirrored into ``configurable``); the
server's environment names a different sub-agent, so an answer from the echo server proves the run's
config was read. The orchestrator is ``python:tests.served_models:orchestrator`` from the server's env.
LangSmith tracing and CLI analytics are off; no key is set; the server is always stopped at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_server import ECHO_ANSWER, Katan, free_port, report, start_katan

pytest.importorskip("langgraph_sdk")
pytest.importorskip("langgraph_api")
pytest.importorskip("langchain_openai")
pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[1]
READY_WITHIN_S = 120.0
RUN_TIMEOUT_S = 60.0
STUDIO_TOKEN = "served-studio-token-for-tests"


class Served:
    def __init__(self, url: str, started: float, ready_s: float, log: Path) -> None:
        self.url, self.started, self.ready_s, self.log = url, started, ready_s, log


def _langgraph_executable() -> str | None:
    beside = Path(sys.executable).with_name("langgraph")
    return str(beside) if beside.is_file() else None


@contextlib.contextmanager
def start_langgraph_dev(workdir: Path, config: Path = REPO / "langgraph.json",
                        extra_env: dict[str, str] | None = None) -> Iterator[Served]:
    """Serve the repository's own langgraph.json (graph paths are relative to the repo, the server's cwd)."""
    executable = _langgraph_executable()
    if executable is None:
        pytest.skip("langgraph-cli is not installed: pip install 'mas-orchestra[serve]'")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update({
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",  # keep the in-memory server's state out of the repo
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "MAS_ORCHESTRATOR": "python:tests.served_models:orchestrator",
        "MAS_SUBAGENT": "scripted:from-the-server-environment",  # runs override it per run
        "MAS_STUDIO_DB": str(workdir / "studio.sqlite"),  # the studio (http.app) keeps its threads here
        "MAS_STUDIO_TOKEN": STUDIO_TOKEN,  # the mounted studio needs it as the standalone one does
        "MAS_SERVED_MODELS": "vllm:*",  # runs choose the local echo server (a loopback vllm: URL) per run
        **(extra_env or {}),
    })
    log = workdir / f"langgraph-dev-{port}.log"
    command = [executable, "dev", "--config", str(config), "--host", "127.0.0.1",
               "--port", str(port), "--no-browser", "--no-reload"]
    started = time.perf_counter()
    with log.open("wb") as sink:
        # its own process group, so teardown stops the server and any worker it spawned
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited with {process.returncode}: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.perf_counter() - started > READY_WITHIN_S:
                raise RuntimeError(f"langgraph dev not ready within {READY_WITHIN_S} s: {log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield Served(url, started, time.perf_counter() - started, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def katan(tmp_path_factory) -> Iterator[Katan]:
    with start_katan(tmp_path_factory.mktemp("katan")) as server:
        yield server


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    with start_langgraph_dev(tmp_path_factory.mktemp("langgraph-dev")) as server:
        yield server


@pytest.fixture
def client(served):
    from langgraph_sdk import get_client

    return get_client(url=served.url, timeout=RUN_TIMEOUT_S)


async def test_end_to_end_graph_served_streams_every_node_and_keeps_the_thread_state(katan, served, client, capsys):
    # katan is requested first so that it is up before the server starts: "after the server start" below
    # is then the server's start-up plus the first run, nothing else.
    thread = await client.threads.create()
    context = {"subagent": katan.model, "settings": {"max_retries": 1}}
    events: list[tuple[str, str]] = []
    first_event_s = None
    requested = time.perf_counter()
    async for part in client.runs.stream(thread["thread_id"], "mas_orchestra", input={"question": "What is 3+4?"},
                                         context=context, stream_mode="updates", stream_subgraphs=True):
        if part.event.startswith("updates") and isinstance(part.data, dict):
            first_event_s = first_event_s or time.perf_counter() - requested
            events.extend((part.event, step) for step in part.data)
    answered_s = time.perf_counter() - requested
    outer = [step for event, step in events if event == "updates"]
    inner = [step for event, step in events if event.startswith("updates|execute:")]
    assert outer == ["orchestrate", "validate", "approve", "execute"]
    assert sorted(inner) == ["J", "P0", "P1", "P2"] and inner[-1] == "J"
    state = await client.threads.get_state(thread["thread_id"])
    values = state["values"]
    assert values["status"] == "ok" and values["answer"] == ECHO_ANSWER, values.get("error")
    assert sorted(values["results"]) == ["J", "P0", "P1", "P2"]
    assert values["results"]["J"]["answer"] == ECHO_ANSWER and values["usage"]["calls"] == 4
    assert values["setup"]["subagent"] == "echo-model"  # from the run's context, not the server env
    assert [n["id"] for n in values["spec"]["nodes"]] == ["P0", "P1", "P2", "J"]
    history = await client.threads.get_history(thread["thread_id"], limit=20)
    assert len(history) >= 5 and history[0]["values"]["answer"] == ECHO_ANSWER
    per_node = Counter(step for _, step in events)
    report(capsys, f"langgraph dev: /ok {served.ready_s:.2f} s after start; first run (fresh thread): first "
                   f"streamed update {first_event_s:.2f} s, answer {answered_s:.2f} s after the request, "
                   f"{time.perf_counter() - served.started:.2f} s after the server start; streamed update "
                   f"events per node {dict(per_node)}")


async def test_baselines_served_use_the_runs_subagent(client, katan):
    for graph in ("cot", "sc"):
        thread = await client.threads.create()
        out = await client.runs.wait(thread["thread_id"], graph, input={"question": "What is 3+4?"},
                                     config={"configurable": {"subagent": katan.model}})
        assert out["final_answer"] == ECHO_ANSWER, out
        assert list(out["results"]) == [graph]


async def test_served_approval_interrupt_then_resume(client, katan):
    thread = await client.threads.create()
    context = {"subagent": katan.model, "config": {"interrupt_before_execute": True}}
    await client.runs.wait(thread["thread_id"], "mas_orchestra", input={"question": "q"}, context=context)
    state = await client.threads.get_state(thread["thread_id"])
    assert state["next"] == ["approve"] and not state["values"]["results"]  # nothing ran yet
    payload = state["tasks"][0]["interrupts"][0]["value"]
    assert "<agent_id>J</agent_id>" in payload["spec_text"]
    out = await client.runs.wait(thread["thread_id"], "mas_orchestra", command={"resume": "approve"},
                                 context=context)
    assert out["status"] == "ok" and out["review"] == "approved" and out["answer"] == ECHO_ANSWER


async def test_python_model_strings_are_refused_from_a_runs_config(client):
    for graph in ("cot", "mas_orchestra"):
        thread = await client.threads.create()
        with pytest.raises(Exception, match="'python:' model strings are not accepted"):  # the SDK re-raises it
            await client.runs.wait(thread["thread_id"], graph, input={"question": "q"},
                                   context={"subagent": "python:os:getcwd"})
    # A model the server's MAS_SERVED_MODELS does not name (it would spend the server's key) is refused too.
    thread = await client.threads.create()
    with pytest.raises(Exception, match="MAS_SERVED_MODELS"):
        await client.runs.wait(thread["thread_id"], "cot", input={"question": "q"},
                               config={"configurable": {"subagent": "openai:gpt-4o-mini"}})


def test_langgraph_dev_serves_the_studio_next_to_the_graphs(served):
    """``http.app`` in langgraph.json: the studio's page and API on the LangGraph server, a live run included."""
    import json

    auth = {"Authorization": f"Bearer {STUDIO_TOKEN}"}
    # Protected as the standalone studio is: no token, a foreign Host or a foreign Origin is refused.
    for url, headers in ((f"{served.url}/api/runs", {}), (f"{served.url}/api/runs", {"Host": "attacker.example"}),
                         (f"{served.url}/", {})):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
        assert refused.value.code in (401, 403)
    with urllib.request.urlopen(urllib.request.Request(f"{served.url}/", headers=auth), timeout=10) as page:
        assert "<title>mas-orchestra studio</title>" in page.read().decode()
        assert page.headers["X-Frame-Options"] == "DENY"
    # langgraph.json lets only LangSmith's Studio read the server cross-origin (LangGraph's default is every origin).
    preflight = urllib.request.Request(f"{served.url}/threads/search", method="OPTIONS", headers={
        "Origin": "https://attacker.example", "Access-Control-Request-Method": "POST"})
    with pytest.raises(urllib.error.HTTPError) as disallowed:  # Starlette answers a foreign preflight 400
        urllib.request.urlopen(preflight, timeout=10)
    assert disallowed.value.headers.get("Access-Control-Allow-Origin") is None
    studio_origin = urllib.request.Request(f"{served.url}/threads/search", method="OPTIONS", headers={
        "Origin": "https://smith.langchain.com", "Access-Control-Request-Method": "POST"})
    with urllib.request.urlopen(studio_origin, timeout=10) as answer:
        assert answer.headers["Access-Control-Allow-Origin"] == "https://smith.langchain.com"
    body = json.dumps({"question": "What is 2 + 3?", "orchestrator": "python:mas_orchestra.studio.demo:orchestrator",
                       "subagent": "scripted:5", "expected": "5"}).encode()
    request = urllib.request.Request(f"{served.url}/api/runs", data=body,
                                     headers={"Content-Type": "application/json", **auth})
    with urllib.request.urlopen(request, timeout=30) as response:
        thread = json.loads(response.read())["thread_id"]
    deadline = time.monotonic() + 60
    while True:
        events_url = urllib.request.Request(f"{served.url}/api/runs/{thread}/events?follow=0", headers=auth)
        with urllib.request.urlopen(events_url, timeout=30) as response:
            events = [json.loads(x[5:]) for x in response.read().decode().splitlines() if x.startswith("data:")]
        outcomes = [e for e in events if e["type"] == "outcome"]
        errors = [e["message"] for e in events if e["type"] == "error"]
        assert errors == []  # e.g. a blocking call flagged by the dev server
        if outcomes or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert outcomes and outcomes[0]["status"] == "ok" and outcomes[0]["match"] is True
