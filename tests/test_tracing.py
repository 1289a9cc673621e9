"""LangSmith tracing of an Orchestra run, recorded by a local HTTP endpoint on 127.0.0.1.

The LangSmith client posts runs to ``LANGSMITH_ENDPOINT``; a tiny recording server stands in for
LangSmith, so the trace tree (root run, orchestrator, one run per spec node, chat-model calls under
the nodes, node metadata) can be checked without any network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.testing import ScriptedChatModel, cot_reply

langsmith = pytest.importorskip("langsmith")
from langchain_core.tracers.langchain import wait_for_all_tracers  # noqa: E402
from langsmith import run_trees as ls_run_trees  # noqa: E402
from langsmith import utils as ls_utils  # noqa: E402

DIAMOND = (Path(__file__).resolve().parents[1] / "graphs" / "specs" / "diamond.xml").read_text("utf-8")
NODE_RUNS = {"P1": "P1 · CoTAgent", "P2": "P2 · SCAgent", "FINAL": "FINAL · DebateAgent"}
CALLS_PER_NODE = {"P1": 1, "P2": 5, "FINAL": 11}

TRACING_VARS = [
    f"{prefix}_{name}"
    for prefix in ("LANGSMITH", "LANGCHAIN")
    for name in ("TRACING", "TRACING_V2", "ENDPOINT", "API_KEY", "PROJECT", "RUNS_ENDPOINTS", "WORKSPACE_ID",
                 "DISABLE_RUN_COMPRESSION", "OTEL_ENABLED")
]


# -- the recording endpoint ------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()

    def add(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        with self.lock:
            self.requests.append((method, path, headers, body))

    def snapshot(self) -> list[tuple[str, str, dict[str, str], bytes]]:
        with self.lock:
            return list(self.requests)


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _reply(self, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            recorder.add("GET", self.path, dict(self.headers), b"")
            self._reply({"version": "0.0-test"} if self.path.startswith("/info") else {})

        def do_POST(self) -> None:
            recorder.add("POST", self.path, dict(self.headers), self._body())
            self._reply({})

        def do_PATCH(self) -> None:
            recorder.add("PATCH", self.path, dict(self.headers), self._body())
            self._reply({})

    return Handler


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    rec = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield rec, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _clear_langsmith_caches() -> None:
    """LangSmith reads its environment once and caches it; make it read ours (and forget it after)."""
    ls_utils.get_env_var.cache_clear()
    ls_utils.get_tracer_project.cache_clear()


@contextlib.contextmanager
def tracing_env(env: dict[str, str]) -> Iterator[None]:
    previous_client = ls_run_trees._CLIENT
    with pytest.MonkeyPatch.context() as mp:
        for var in TRACING_VARS:
            mp.delenv(var, raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        _clear_langsmith_caches()
        ls_run_trees._CLIENT = None  # a fresh client reads the endpoint from the environment
        try:
            yield
        finally:
            client = ls_run_trees._CLIENT
            if client is not None:
                with contextlib.suppress(Exception):
                    client.cleanup(timeout=5)
            ls_run_trees._CLIENT = previous_client
    _clear_langsmith_caches()


def flush_traces(timeout: float = 20.0) -> None:
    """``wait_for_all_tracers()``, bounded in time."""
    done = threading.Event()

    def flush() -> None:
        try:
            wait_for_all_tracers()
        finally:
            done.set()

    threading.Thread(target=flush, daemon=True).start()
    assert done.wait(timeout), f"traces were not flushed within {timeout} s"


# -- decoding what LangSmith sent ------------------------------------------------------------------


def _decode_body(headers: dict[str, str], body: bytes) -> bytes:
    encoding = {k.lower(): v for k, v in headers.items()}.get("content-encoding", "")
    if "zstd" in encoding:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    if "gzip" in encoding:
        import gzip

        return gzip.decompress(body)
    return body


def _multipart_parts(content_type: str, body: bytes) -> Iterator[tuple[str, Any]]:
    match = re.search(r"boundary=([^;]+)", content_type)
    assert match, content_type
    delimiter = b"--" + match.group(1).strip().strip('"').encode()
    for chunk in body.split(delimiter):
        head, sep, payload = chunk.partition(b"\r\n\r\n")
        if not sep:
            continue
        name = re.search(rb'name="([^"]+)"', head)
        if name is None:
            continue
        payload = payload.removesuffix(b"\r\n")
        try:
            value = json.loads(payload)
        except ValueError:
            value = payload
        yield name.group(1).decode(), value


def recorded_runs(requests: list[tuple[str, str, dict[str, str], bytes]]) -> dict[str, dict[str, Any]]:
    """Every run the client sent, posts and patches merged, by run id."""
    runs: dict[str, dict[str, Any]] = {}

    def merge(run_id: str, fields: dict[str, Any]) -> None:
        entry = runs.setdefault(str(run_id), {})
        for key, value in fields.items():
            if value is not None or key not in entry:
                entry[key] = value

    for method, path, headers, raw in requests:
        if method == "GET":
            continue
        body = _decode_body(headers, raw)
        content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if path.startswith("/runs/multipart"):
            for name, value in _multipart_parts(content_type, body):
                op, _, rest = name.partition(".")
                if op not in ("post", "patch"):
                    continue
                run_id, _, field = rest.partition(".")
                merge(run_id, {field: value} if field else value)
        elif path.startswith("/runs/batch"):
            data = json.loads(body)
            for run in [*(data.get("post") or []), *(data.get("patch") or [])]:
                merge(run["id"], run)
        elif path.rstrip("/") == "/runs" and method == "POST":
            run = json.loads(body)
            merge(run["id"], run)
        elif path.startswith("/runs/") and method == "PATCH":
            merge(path.rsplit("/", 1)[-1], json.loads(body))
    return runs


def metadata_of(run: dict[str, Any]) -> dict[str, Any]:
    extra = run.get("extra") or {}
    return extra.get("metadata") or {}


def ancestors(runs: dict[str, dict[str, Any]], run_id: str) -> list[str]:
    chain, seen = [], set()
    parent = runs[run_id].get("parent_run_id")
    while parent is not None and str(parent) in runs and str(parent) not in seen:
        seen.add(str(parent))
        chain.append(str(parent))
        parent = runs[str(parent)].get("parent_run_id")
    return chain


# -- tests -----------------------------------------------------------------------------------------


def test_an_orchestra_run_is_one_trace_with_a_run_per_node(recorder):
    rec, url = recorder
    env = {
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_ENDPOINT": url,
        "LANGSMITH_API_KEY": "test",
        "LANGSMITH_PROJECT": "mas-test",
        "LANGSMITH_DISABLE_RUN_COMPRESSION": "true",
    }
    with tracing_env(env):
        orchestra = Orchestra(ScriptedChatModel(replies=[DIAMOND]), ScriptedChatModel(replies=[cot_reply("7")]))
        outcome = orchestra.run("What is 3 + 4?")
        flush_traces()
    assert outcome.status is Status.OK, outcome.error
    requests = rec.snapshot()
    assert any(m == "POST" and p.startswith("/runs") for m, p, _, _ in requests), [p for _, p, _, _ in requests]
    runs = recorded_runs(requests)

    roots = [rid for rid, r in runs.items() if r.get("parent_run_id") is None]
    assert len(roots) == 1, [runs[r].get("name") for r in roots]
    root_id = roots[0]
    assert runs[root_id]["name"] == "MAS-Orchestra"
    assert {str(r.get("trace_id")) for r in runs.values()} == {root_id}
    assert all(r.get("session_name") in (None, "mas-test") for r in runs.values())
    assert (runs[root_id].get("outputs") or {}).get("status") == "ok"

    orchestrator_runs = [rid for rid, r in runs.items() if r.get("name") == "orchestrator"]
    assert len(orchestrator_runs) == 1
    assert str(runs[orchestrator_runs[0]]["parent_run_id"]) == root_id

    spec_hash = outcome.spec.spec_hash()
    node_run_ids: dict[str, str] = {}
    for node_id, name in NODE_RUNS.items():
        named = [rid for rid, r in runs.items() if r.get("name") == name]
        assert len(named) == 1, (name, sorted({r.get("name") for r in runs.values()}))
        meta = metadata_of(runs[named[0]])
        assert meta.get("node_id") == node_id
        assert meta.get("agent_kind") in ("cot", "sc", "debate")
        assert meta.get("spec_hash") == spec_hash
        assert root_id in ancestors(runs, named[0])
        node_run_ids[named[0]] = node_id

    llm_runs = [rid for rid, r in runs.items() if r.get("run_type") == "llm"]
    per_node = dict.fromkeys(NODE_RUNS, 0)
    under_orchestrator = 0
    for rid in llm_runs:
        chain = ancestors(runs, rid)
        assert chain and chain[-1] == root_id
        if orchestrator_runs[0] in chain:
            under_orchestrator += 1
            continue
        nodes = [node_run_ids[a] for a in chain if a in node_run_ids]
        assert len(nodes) == 1, f"chat-model run {runs[rid].get('name')} is not nested under a node run"
        per_node[nodes[0]] += 1
        assert metadata_of(runs[rid]).get("node_id") == nodes[0]
    assert under_orchestrator == 1
    assert per_node == CALLS_PER_NODE


def test_nothing_is_sent_without_tracing_enabled(recorder):
    rec, url = recorder
    # The endpoint and key are set, only the switch is off: nothing may reach the endpoint.
    with tracing_env({"LANGSMITH_ENDPOINT": url, "LANGSMITH_API_KEY": "test", "LANGSMITH_PROJECT": "mas-test"}):
        assert not ls_utils.tracing_is_enabled()
        outcome = Orchestra(ScriptedChatModel(replies=[DIAMOND]), ScriptedChatModel()).run("q")
        flush_traces()
    assert outcome.ok
    assert rec.snapshot() == []
    assert not any(os.environ.get(v) for v in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"))
