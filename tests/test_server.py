"""Sub-agents on a real OpenAI-compatible HTTP server (llm-katan's echo backend) on 127.0.0.1.

The orchestrator is scripted (it writes a fixed spec); the sub-agents are ``vllm:<model>@<url>`` /
``openai:<model>`` chat models talking HTTP to ``llm-katan --backend echo``, with the server's
failure injection (HTTP 500s, latency, overload 503s), a dead port and a socket that drops every
connection. The echo backend replies with the last user message, which ends with the sub-agent format
block's worked example (``<answer>24</answer>`` last), so every echoed reply parses to that answer (the thinking
it pairs with is the instruction's prose, not the example's, so it is not read as a copy of the example).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mas_orchestra import RunSettings
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel

pytest.importorskip("langchain_openai")
pytestmark = pytest.mark.server

MODEL = "echo-model"
ECHO_ANSWER = "24"  # the format block's worked-example answer, echoed back by the server
DIAMOND = (Path(__file__).resolve().parents[1] / "graphs" / "specs" / "diamond.xml").read_text("utf-8")
DIAMOND_CALLS = 1 + 5 + 11


def fan_in_xml(width: int = 3) -> str:
    nodes = [{"id": f"P{i}", "agent": "cot", "input": f"part {i}"} for i in range(width)]
    refs = " ".join(f"${{P{i}}}" for i in range(width))
    nodes.append({"id": "J", "agent": "cot", "input": f"combine {refs}"})
    edges = [{"source": f"P{i}", "target": "J"} for i in range(width)]
    return spec_from_data({"nodes": nodes, "edges": edges}).to_xml()


FOUR_NODES = fan_in_xml(3)


def orchestrator(text: str = FOUR_NODES) -> ScriptedChatModel:
    return ScriptedChatModel(replies=[text], model_name="scripted-orchestrator")


def report(capsys, line: str) -> None:
    with capsys.disabled():
        print(f"\n[server] {line}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _katan_executable() -> str | None:
    beside = Path(sys.executable).with_name("llm-katan")
    if beside.is_file():
        return str(beside)
    return shutil.which("llm-katan")


class Katan:
    def __init__(self, url: str, process: subprocess.Popen, log: Path) -> None:
        self.url, self.process, self.log = url, process, log

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def model(self) -> str:
        return f"vllm:{MODEL}@{self.base_url}"


@contextlib.contextmanager
def start_katan(tmp: Path, *args: str, ready_within: float = 30.0) -> Iterator[Katan]:
    executable = _katan_executable()
    if executable is None:
        pytest.skip("llm-katan is not installed (pip install llm-katan); it provides the local test server")
    port = free_port()
    log = tmp / f"katan-{port}.log"
    command = [
        executable, "--backend", "echo", "-m", MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--providers", "openai", "--max-concurrent", "32", "--disable-dashboard",
        "--stats-file", str(tmp / f"katan-{port}-stats.json"), "--log-level", "warning", *args,
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llm-katan exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llm-katan not ready within {ready_within} s: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield Katan(url, process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture(scope="module")
def katan(tmp_path_factory) -> Iterator[Katan]:
    with start_katan(tmp_path_factory.mktemp("katan")) as server:
        yield server


@pytest.fixture
def katan_with(tmp_path) -> Iterator[Callable[..., Katan]]:
    """Start a server with extra failure-injection flags; stopped at teardown."""
    with contextlib.ExitStack() as stack:
        yield lambda *args: stack.enter_context(start_katan(tmp_path, *args))


# -- the happy paths -------------------------------------------------------------------------------


async def test_vllm_model_string_runs_a_four_node_spec(katan):
    outcome = await Orchestra(orchestrator(), katan.model,
                              settings=RunSettings(max_retries=2, retry_initial_delay=0.01)).arun("What is 3+4?")
    assert outcome.status is Status.OK, outcome.error
    assert outcome.answer == ECHO_ANSWER
    assert sorted(outcome.finished_nodes) == ["J", "P0", "P1", "P2"]
    usage = outcome.usage
    assert usage.subagent_calls == 4 and usage.orchestrator_calls == 1 and usage.failed_calls == 0
    served = usage.by_model[MODEL]  # the model name the server reported
    assert served.calls == 4 and served.input_tokens > 0 and served.output_tokens > 0
    assert usage.input_tokens >= served.input_tokens > 0 and usage.total_tokens > 0
    assert sum(r.usage.input_tokens for r in outcome.node_results.values()) == served.input_tokens


async def test_openai_model_string_with_base_url_from_the_environment(katan, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OPENAI_BASE_URL", katan.base_url)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    outcome = await Orchestra(orchestrator(), f"openai:{MODEL}",
                              settings=RunSettings(max_retries=1, retry_initial_delay=0.01)).arun("q")
    assert outcome.status is Status.OK, outcome.error
    assert outcome.answer == ECHO_ANSWER
    assert outcome.usage.by_model[MODEL].calls == 4 and outcome.usage.by_model[MODEL].input_tokens > 0


# -- failure injection -----------------------------------------------------------------------------


async def test_every_run_succeeds_against_a_server_failing_30_percent(katan_with, capsys):
    server = katan_with("--error-rate", "0.3")
    # The server's faults are not seeded: with 80 requests, max_retries=6 would lose a run with
    # probability 80 * 0.3**7 ≈ 2 %; 10 retries make that ≈ 1e-4.
    orchestra = Orchestra(orchestrator(), server.model, settings=RunSettings(max_retries=10, retry_initial_delay=0.01))
    runs = 20
    outcomes = [await orchestra.arun(f"question {i}") for i in range(runs)]
    ok = sum(o.ok for o in outcomes)
    faults = sum(o.usage.failed_calls for o in outcomes)
    calls = sum(o.usage.subagent_calls + o.usage.failed_calls for o in outcomes)
    lost = sum(4 - len(o.node_results) for o in outcomes)
    report(capsys, f"--error-rate 0.3: {faults} HTTP 500s of {calls} requests retried; runs ok {ok}/{runs}; "
                   f"results lost {lost}")
    assert ok == runs, [o.error for o in outcomes if not o.ok]
    assert lost == 0
    assert faults > 0  # the server really failed requests (≈ 30 % of them)
    assert sum(o.usage.subagent_calls for o in outcomes) == 4 * runs


async def test_slow_server_is_bounded_by_call_timeout_and_run_timeout(katan_with, capsys):
    server = katan_with("--latency-ms", "2000")
    start = time.perf_counter()
    by_call = await Orchestra(orchestrator(), server.model,
                              settings=RunSettings(call_timeout=0.5, max_retries=0)).arun("q")
    call_s = time.perf_counter() - start
    assert by_call.status is Status.EXEC_ERROR and by_call.failed_node in {"P0", "P1", "P2"}
    assert "Timeout" in by_call.error
    start = time.perf_counter()
    by_run = await Orchestra(orchestrator(), server.model, settings=RunSettings(timeout=1.0, max_retries=0)).arun("q")
    run_s = time.perf_counter() - start
    report(capsys, f"--latency-ms 2000: call_timeout=0.5 -> {by_call.status.value} after {call_s:.2f} s; "
                   f"timeout=1.0 -> {by_run.status.value} after {run_s:.2f} s")
    assert by_run.status is Status.TIMEOUT and by_run.finished_nodes == []
    assert call_s < 3.0 and run_s < 1.0 + 1.0


async def test_dead_port_is_exec_error_in_bounded_time(capsys):
    port = free_port()  # nothing listens there any more
    dead = f"vllm:{MODEL}@http://127.0.0.1:{port}/v1"
    start = time.perf_counter()
    outcome = await Orchestra(orchestrator(), dead,
                              settings=RunSettings(max_retries=2, retry_initial_delay=0.01)).arun("q")
    elapsed = time.perf_counter() - start
    report(capsys, f"dead port: {outcome.status.value} after {elapsed:.2f} s "
                   f"({outcome.usage.failed_calls} failed calls, max_retries=2)")
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node in {"P0", "P1", "P2"}
    assert "Connection" in outcome.error
    assert outcome.usage.failed_calls >= 3  # 1 + 2 retries of the node that failed
    assert elapsed < 10.0


async def test_max_inflight_server_sees_no_overload_with_matching_max_concurrency(katan_with, capsys):
    server = katan_with("--max-inflight", "4", "--latency-ms", "100")
    bounded = await Orchestra(orchestrator(DIAMOND), server.model,
                              settings=RunSettings(max_concurrency=4, max_retries=0)).arun("q")
    assert bounded.status is Status.OK, bounded.error
    assert bounded.usage.failed_calls == 0 and bounded.usage.subagent_calls == DIAMOND_CALLS
    # control: without the bound the same server does answer 503 (retried, so the run still ends)
    unbounded = await Orchestra(orchestrator(DIAMOND), server.model,
                                settings=RunSettings(max_concurrency=32, max_retries=6, retry_initial_delay=0.01)).arun("q")
    report(capsys, f"--max-inflight 4: max_concurrency=4 -> {bounded.usage.failed_calls} 503s; "
                   f"max_concurrency=32 -> {unbounded.usage.failed_calls} 503s, {unbounded.status.value}")
    assert unbounded.usage.failed_calls > 0


class DroppingServer:
    """Accepts TCP connections on 127.0.0.1 and closes each at once, without a byte of reply."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + 60  # bounded even if nobody stops it
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


async def test_dropped_connections_are_exec_error_never_a_hang(capsys):
    server = DroppingServer()
    try:
        model = f"vllm:{MODEL}@http://127.0.0.1:{server.port}/v1"
        start = time.perf_counter()
        outcome = await Orchestra(orchestrator(), model,
                                  settings=RunSettings(max_retries=2, retry_initial_delay=0.01)).arun("q")
        elapsed = time.perf_counter() - start
    finally:
        server.close()
    report(capsys, f"dropped connections: {outcome.status.value} after {elapsed:.2f} s "
                   f"({server.accepted} connections accepted and closed)")
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node in {"P0", "P1", "P2"}
    assert server.accepted >= 3
    assert elapsed < 10.0
