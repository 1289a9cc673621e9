"""Threads on a real PostgreSQL server shared by several worker processes.

The server is the one named by ``MAS_TEST_POSTGRES_URL`` (``.ci/run`` starts Debian's PostgreSQL with
``scripts/start_postgres.sh`` and exports it); without the variable every test here is skipped with that reason.
Sub-agents are the local OpenAI-compatible echo server (llm-katan), whose own request counter says how many
model calls each worker made. Each test uses its own thread ids (a fresh uuid), so tests share one database.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.test_resume_kill import KILL_AFTER, NODES, command, kill_after_nodes, served_requests
from tests.test_server import report, start_katan

pytest.importorskip("langgraph.checkpoint.postgres")
psycopg = pytest.importorskip("psycopg")
pytestmark = [pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[1]
URL = os.environ.get("MAS_TEST_POSTGRES_URL")
needs_server = pytest.mark.skipif(
    not URL, reason="MAS_TEST_POSTGRES_URL is unset: run `export MAS_TEST_POSTGRES_URL=$(bash scripts/start_postgres.sh)`"
)
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def thread() -> str:
    return f"pg-{uuid.uuid4().hex[:10]}"


def finished(url: str, thread_id: str) -> dict:
    from mas_orchestra.runtime.postgres import open_postgres_checkpointer
    from mas_orchestra.runtime.threads import finished_nodes

    with open_postgres_checkpointer(url) as saver:
        return finished_nodes(saver, thread_id)


def cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mas_orchestra", "run", *args], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def run_json(katan, url: str, thread_id: str) -> dict:
    done = subprocess.run(command(katan, url, thread_id), capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture
def scratch_database():
    """A fresh database on the test server (dropped afterwards), for tests that damage its schema."""
    assert URL
    name = f"mas_scratch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@needs_server
@pytest.mark.server
@pytest.mark.slow
def test_kill_9_in_one_worker_then_another_worker_resumes_without_recalling_finished_nodes(tmp_path, capsys):
    assert URL
    with start_katan(tmp_path, "--latency-ms", "600") as katan:
        reference = run_json(katan, URL, thread())
        killed = thread()
        kill_after_nodes(command(katan, URL, killed), ENV, lambda: finished(URL, killed))
        done_at_kill = sorted(finished(URL, killed))
        at_kill = served_requests(katan)
        resumed = run_json(katan, URL, killed)  # a new worker process: nothing shared but the database
        resume_requests = served_requests(katan) - at_kill
        unfinished = NODES - len(done_at_kill)
        report(capsys, f"postgres: kill -9 after {len(done_at_kill)}/{NODES} nodes; the resuming worker made "
                       f"{resume_requests} requests for {unfinished} unfinished nodes -> "
                       f"{resume_requests - unfinished} for finished nodes")
        assert len(done_at_kill) >= KILL_AFTER and unfinished > 0
        assert resume_requests == unfinished
        assert resumed["usage"]["orchestrator_calls"] == 0 and resumed["usage"]["subagent_calls"] == unfinished
        assert resumed["status"] == "ok" and resumed["answer"] == reference["answer"]
        assert sorted(finished(URL, killed)) == [f"S{i}" for i in range(NODES)]


@needs_server
@pytest.mark.server
@pytest.mark.slow
def test_two_workers_run_different_threads_concurrently_on_one_database(tmp_path):
    assert URL
    with start_katan(tmp_path, "--latency-ms", "300") as katan:
        before = served_requests(katan)
        ids = [thread(), thread()]
        started = time.perf_counter()
        workers = [subprocess.Popen(command(katan, URL, t), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=ENV) for t in ids]
        outputs = [w.communicate(timeout=120) for w in workers]
        wall = time.perf_counter() - started
        for worker, (out, err) in zip(workers, outputs, strict=True):
            assert worker.returncode == 0, err[-3000:]
            assert json.loads(out)["status"] == "ok"
        assert served_requests(katan) - before == 2 * NODES
        # both threads are complete and separate in the shared database
        for t in ids:
            assert sorted(finished(URL, t)) == [f"S{i}" for i in range(NODES)]
        # a second run of a finished thread, by yet another process, returns the stored outcome: no requests
        again = run_json(katan, URL, ids[0])
        assert again["usage"]["subagent_calls"] == 0 and served_requests(katan) - before == 2 * NODES
        assert wall > 0


@needs_server
@pytest.mark.server
def test_approval_answered_by_another_process(tmp_path):
    assert URL
    with start_katan(tmp_path) as katan:
        t = thread()
        common = ["What is 3+4?", "--json", "--max-retries", "0", "--orchestrator",
                  "python:tests.served_models:chain_orchestrator", "--subagent", katan.model, "--thread", t,
                  "--db", URL]
        before = served_requests(katan)
        asked = cli([*common, "--approve"])
        assert asked.returncode == 3, asked.stderr[-3000:]  # paused for approval
        assert json.loads(asked.stdout)["status"] == "interrupted" and served_requests(katan) == before
        answered = cli([*common, "--resume", "approve"])
        assert answered.returncode == 0, answered.stderr[-3000:]
        outcome = json.loads(answered.stdout)
        assert outcome["status"] == "ok" and outcome["usage"]["orchestrator_calls"] == 0
        assert served_requests(katan) - before == NODES


@needs_server
def test_connection_lost_mid_run_is_a_clear_error_and_the_thread_resumes(monkeypatch):
    """The worker's database backend is terminated while node S2 runs: the run raises a connection error
    naming the database; a new run of the thread, once the database answers again, finishes it without
    calling a finished node again."""
    assert URL
    from mas_orchestra import RunSettings
    from mas_orchestra.runtime import Orchestra
    from mas_orchestra.runtime.postgres import CheckpointConnectionError
    from mas_orchestra.testing import ScriptedChatModel, cot_reply
    from tests.served_models import CHAIN6

    app = f"mas_loss_{uuid.uuid4().hex[:6]}"
    url = f"{URL}?application_name={app}"
    calls: list[str] = []
    killed = threading.Event()

    def reply(messages, _index):
        text = str(messages[-1].content) if messages else ""
        node = next((f"S{i}" for i in range(NODES) if f"step {i}" in text), "?")
        calls.append(node)
        if node == "S2" and not killed.is_set():
            with psycopg.connect(URL, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                              (app,))
            killed.set()
        return cot_reply(f"{node} done")

    orchestra = Orchestra(ScriptedChatModel(replies=[CHAIN6]), ScriptedChatModel(replies=reply),
                          settings=RunSettings(max_retries=0), checkpointer=url)
    t = thread()
    with pytest.raises(CheckpointConnectionError) as caught:
        asyncio.run(orchestra.arun("What is 3+4?", thread_id=t))
    message = str(caught.value)
    assert caught.value.host == "127.0.0.1" and caught.value.database in message
    assert ":mas@" not in message and "resumes" in message
    assert killed.is_set() and calls[:3] == ["S0", "S1", "S2"]
    stored = sorted(finished(URL, t))
    assert stored == ["S0", "S1"]  # committed before the loss; S2's result was lost with the connection
    calls.clear()
    outcome = asyncio.run(orchestra.arun("What is 3+4?", thread_id=t))
    assert outcome.status.value == "ok" and sorted(outcome.node_results) == [f"S{i}" for i in range(NODES)]
    assert calls == ["S2", "S3", "S4", "S5"]  # finished nodes S0, S1 were not called again


def _with_password(url: str, password: str, port: int | None = None) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{port or parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@needs_server
@pytest.mark.parametrize("case", ["wrong password", "unreachable"])
def test_bad_url_is_a_typed_error_naming_host_and_database_without_the_password(case):
    assert URL
    from mas_orchestra.runtime import Orchestra
    from mas_orchestra.runtime.postgres import CheckpointConnectionError
    from mas_orchestra.testing import ScriptedChatModel

    secret = "s3cret-Pw"
    url = _with_password(URL, secret, port=1 if case == "unreachable" else None)
    orchestra = Orchestra(ScriptedChatModel(), ScriptedChatModel(), checkpointer=url)
    with pytest.raises(CheckpointConnectionError) as caught:
        orchestra.run("What is 3+4?", thread_id=thread())
    message = str(caught.value)
    assert secret not in message and "***" in message
    assert "127.0.0.1" in message and caught.value.database in message
    assert ("password" in message) if case == "wrong password" else (":1" in message and "server runs" in message)
    # the CLI says the same in one line and exits 2
    done = cli(["What is 3+4?", "--orchestrator", "python:tests.served_models:chain_orchestrator",
                "--subagent", "scripted:4", "--thread", "x", "--db", url])
    assert done.returncode == 2 and secret not in done.stderr and "127.0.0.1" in done.stderr
    assert "Traceback" not in done.stderr


@needs_server
def test_database_of_a_newer_schema_version_is_refused_untouched(scratch_database):
    from mas_orchestra.errors import CheckpointError
    from mas_orchestra.runtime.postgres import open_postgres_checkpointer

    with open_postgres_checkpointer(scratch_database) as saver:
        known = len(saver.MIGRATIONS)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO checkpoint_migrations (v) VALUES (%s)", (known + 5,))
    with pytest.raises(CheckpointError, match=rf"schema is version {known + 5}, newer than the {known - 1}"), \
            open_postgres_checkpointer(scratch_database):
        pass
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        assert conn.execute("SELECT max(v) FROM checkpoint_migrations").fetchone()[0] == known + 5


@needs_server
def test_database_with_foreign_checkpoint_tables_is_a_checkpoint_error(scratch_database):
    from mas_orchestra.errors import CheckpointError
    from mas_orchestra.runtime.postgres import CheckpointConnectionError, open_postgres_checkpointer

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE checkpoints (id serial PRIMARY KEY, payload text)")
    with pytest.raises(CheckpointError, match="checkpoint tables cannot be used") as caught, \
            open_postgres_checkpointer(scratch_database):
        pass
    assert not isinstance(caught.value, CheckpointConnectionError)


def test_missing_postgres_extra_says_how_to_install(monkeypatch):
    import builtins

    from mas_orchestra.errors import MissingExtraError
    from mas_orchestra.runtime.postgres import open_postgres_checkpointer

    real = builtins.__import__

    def no_postgres(name, *args, **kwargs):
        if name.startswith("langgraph.checkpoint.postgres"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_postgres)
    with pytest.raises(MissingExtraError, match=r"pip install 'mas-orchestra\[postgres\]'"), \
            open_postgres_checkpointer("postgresql://u:p@127.0.0.1/db"):
        pass


def test_redact_url():
    from mas_orchestra.runtime.postgres import is_postgres_url, redact_url

    assert redact_url("postgresql://mas:pw@db.example:5433/threads?sslmode=require") == \
        "postgresql://mas:***@db.example:5433/threads?sslmode=require"
    assert redact_url("postgresql://mas@db/threads") == "postgresql://mas@db/threads"
    assert is_postgres_url("postgres://x") and is_postgres_url("postgresql://x") and not is_postgres_url("runs.sqlite")


@needs_server
@pytest.mark.server
@pytest.mark.slow
def test_served_graph_keeps_its_checkpoints_in_postgres(tmp_path):
    """``langgraph dev --config langgraph.postgres.json``: a served run's node results are in the database, where
    a worker process reads them; the server's own thread records stay in its memory (in-memory runtime)."""
    assert URL
    pytest.importorskip("langgraph_sdk")
    pytest.importorskip("langgraph_api")
    from langgraph_sdk import get_sync_client

    from tests.test_langgraph_server import start_langgraph_dev
    from tests.test_server import ECHO_ANSWER

    with start_katan(tmp_path) as katan, start_langgraph_dev(
        tmp_path, REPO / "langgraph.postgres.json", {"MAS_POSTGRES_URL": URL}
    ) as served:
        client = get_sync_client(url=served.url, timeout=60)
        thread_id = client.threads.create()["thread_id"]
        out = client.runs.wait(thread_id, "mas_orchestra", input={"question": "What is 3+4?"},
                               context={"subagent": katan.model, "settings": {"max_retries": 1}})
        assert out["status"] == "ok" and out["answer"] == ECHO_ANSWER, out
        assert "Using custom checkpointer: AsyncPostgresSaver" in served.log.read_text()
        stored = finished(URL, thread_id)  # read by this process straight from PostgreSQL
        assert sorted(stored) == ["J", "P0", "P1", "P2"] and stored["J"].answer == ECHO_ANSWER
