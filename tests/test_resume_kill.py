"""kill -9 a checkpointed six-node run halfway, resume it, and count what the model server saw.

``mas-orchestra run --thread … --db …`` runs in a child process against the local OpenAI-compatible echo
server (llm-katan, 600 ms injected latency per request, one request per CoT node). The test watches the
SQLite checkpoint file and sends SIGKILL once three nodes are checkpointed, then runs the same command
again. The server's own request counter (``/metrics``) says how many requests the resume made: it must be
exactly one per node that had not finished, i.e. zero for the finished ones, and the answer and node
results must equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_server import Katan, report, start_katan

pytest.importorskip("langgraph.checkpoint.sqlite")
pytest.importorskip("langchain_openai")
pytestmark = [pytest.mark.server, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
NODES = 6
KILL_AFTER = 3


def served_requests(katan: Katan) -> int:
    """The server's own count of chat requests it answered (Prometheus ``llm_katan_requests_total``)."""
    with urllib.request.urlopen(f"{katan.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("llm_katan_requests_total{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no llm_katan_requests_total in /metrics: {text[:500]}")


def finished(db: Path, thread_id: str) -> dict:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from mas_orchestra.runtime.checkpoint import checkpoint_serde
    from mas_orchestra.runtime.threads import finished_nodes

    if not db.exists():
        return {}
    conn = sqlite3.connect(str(db), check_same_thread=False, timeout=5)
    try:
        return finished_nodes(SqliteSaver(conn, serde=checkpoint_serde()), thread_id)
    except sqlite3.OperationalError:  # tables not created yet
        return {}
    finally:
        conn.close()


def command(katan: Katan, db: Path, thread_id: str) -> list[str]:
    return [sys.executable, "-m", "mas_orchestra", "run", "What is 3+4?", "--json", "--max-retries", "0",
            "--orchestrator", "python:tests.served_models:chain_orchestrator", "--subagent", katan.model,
            "--thread", thread_id, "--db", str(db)]


def kill_after_nodes(command_line: list[str], env: dict, finished_nodes) -> None:
    """Start a worker running ``command_line`` and ``kill -9`` it once ``finished_nodes()`` holds KILL_AFTER nodes."""
    child = subprocess.Popen(command_line, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    try:
        while len(finished_nodes()) < KILL_AFTER:
            assert child.poll() is None, child.stderr.read().decode()[-3000:] if child.stderr else ""
            assert time.monotonic() < deadline, "three nodes never finished"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    time.sleep(1.0)  # let the request in flight at the kill end on the server, so it is not counted below


def run_cli(katan: Katan, db: Path, thread_id: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command(katan, db, thread_id), capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_kill_9_after_three_nodes_then_resume_requests_nothing_for_finished_nodes(tmp_path, capsys):
    with start_katan(tmp_path, "--latency-ms", "600") as katan:
        db = tmp_path / "runs.sqlite"
        before = served_requests(katan)
        reference = run_cli(katan, db, "uninterrupted")
        assert reference["status"] == "ok" and served_requests(katan) - before == NODES

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        kill_after_nodes(command(katan, db, "killed"), env, lambda: finished(db, "killed"))
        done_at_kill = sorted(finished(db, "killed"))
        at_kill = served_requests(katan)

        resumed = run_cli(katan, db, "killed")
        resume_requests = served_requests(katan) - at_kill
        unfinished = NODES - len(done_at_kill)
        report(capsys, f"kill -9 after {done_at_kill} checkpointed ({len(done_at_kill)}/{NODES} nodes); resume: "
                       f"{resume_requests} server requests for {unfinished} unfinished nodes -> "
                       f"{resume_requests - unfinished} for finished nodes; orchestrator calls "
                       f"{resumed['usage']['orchestrator_calls']}; answer equal: "
                       f"{resumed['answer'] == reference['answer']}")
        assert len(done_at_kill) >= KILL_AFTER and unfinished > 0
        assert resume_requests == unfinished  # zero requests for the finished nodes
        assert resumed["usage"]["orchestrator_calls"] == 0 and resumed["usage"]["subagent_calls"] == unfinished
        assert resumed["status"] == "ok" and resumed["answer"] == reference["answer"]
        answers = {k: (v["answer"], v["thinking"]) for k, v in resumed["node_results"].items()}
        assert answers == {k: (v["answer"], v["thinking"]) for k, v in reference["node_results"].items()}
        assert sorted(answers) == [f"S{i}" for i in range(NODES)]
