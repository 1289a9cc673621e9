"""Compiled specs with LangGraph checkpointers: per-superstep results, resume, state/history, serialisation, stores."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents import AgentResult
from mas_orchestra import GraphSpec, compile_spec
from mas_orchestra.compile import NodeExecutionError
from mas_orchestra.errors import CheckpointError, MissingExtraError, ThreadMismatchError
from mas_orchestra.runtime.checkpoint import (
    CHECKPOINT_TYPES,
    check_sqlite_file,
    checkpoint_serde,
    memory_checkpointer,
    open_async_sqlite_checkpointer,
    open_sqlite_checkpointer,
)
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel, cot_reply
from tests.step_models import StepModel

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("langgraph.checkpoint.sqlite")


def chain(n: int = 4) -> GraphSpec:
    """S0 -> S1 -> … -> S{n-1}, each CoT on 'step i' of the previous result."""
    nodes = [{"id": "S0", "agent": "cot", "input": "step 0"}]
    nodes += [{"id": f"S{i}", "agent": "cot", "input": f"step {i} after ${{S{i - 1}}}"} for i in range(1, n)]
    edges = [{"source": f"S{i - 1}", "target": f"S{i}"} for i in range(1, n)]
    return spec_from_data({"nodes": nodes, "edges": edges})


def thread(tid: str) -> dict:
    return {"configurable": {"thread_id": tid}}


# -- resume re-calls no finished node ------------------------------------------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_resume_after_a_failed_node_calls_no_finished_node(store, tmp_path):
    model = StepModel(fail_once={2})
    async with (
        open_async_sqlite_checkpointer(tmp_path / "runs.sqlite") if store == "sqlite" else _memory()
    ) as saver:
        graph = compile_spec(chain(4), model, checkpointer=saver)
        with pytest.raises(NodeExecutionError, match="S2"):
            await graph.ainvoke({"question": "q"}, thread("t1"))
        assert model.steps == [0, 1, 2]
        state = await graph.aget_state(thread("t1"))
        assert set(state.values["results"]) == {"S0", "S1"} and state.next == ("S2",)
        out = await graph.ainvoke(None, thread("t1"))  # resume
    assert model.steps == [0, 1, 2, 2, 3]  # S0 and S1 were not called again
    assert out["final_answer"] == "answer-3"
    assert all(isinstance(r, AgentResult) for r in out["results"].values())
    assert [out["results"][f"S{i}"].answer for i in range(4)] == [f"answer-{i}" for i in range(4)]


class _memory:
    async def __aenter__(self):
        return memory_checkpointer()

    async def __aexit__(self, *exc):
        return False


def test_state_and_history_show_each_node_result():
    spec = spec_from_data({
        "nodes": [{"id": f"P{i}", "agent": "cot", "input": f"part {i}"} for i in range(2)]
        + [{"id": "J", "agent": "cot", "input": "combine ${P0} ${P1}"}],
        "edges": [{"source": "P0", "target": "J"}, {"source": "P1", "target": "J"}],
    })
    graph = compile_spec(spec, ScriptedChatModel(replies=[cot_reply("7")]), checkpointer=InMemorySaver())
    graph.invoke({"question": "q"}, thread("h"))
    final = graph.get_state(thread("h"))
    assert final.next == () and final.values["final_answer"] == "7"
    assert final.values["results"]["J"].answer == "7" and final.values["spec_hash"] == spec.spec_hash()
    history = list(graph.get_state_history(thread("h")))  # newest first
    finished = [sorted(h.values.get("results") or {}) for h in reversed(history)]
    # input, START fan-out, both branches in one superstep, then the join
    assert finished[-2:] == [["P0", "P1"], ["J", "P0", "P1"]]
    assert [h.metadata["step"] for h in reversed(history)] == list(range(-1, len(history) - 1))


def test_a_thread_resumed_by_another_spec_is_refused_naming_both():
    saver = InMemorySaver()
    model = StepModel(fail_once={1})
    first = compile_spec(chain(3), model, checkpointer=saver)
    with pytest.raises(NodeExecutionError):
        first.invoke({"question": "q"}, thread("m"))
    data = chain(3).model_dump()
    data["nodes"][1]["input"] = "step 1 again after ${S0}"
    edited = spec_from_data(data)
    with pytest.raises(ThreadMismatchError) as info:
        compile_spec(edited, model, checkpointer=saver).invoke(None, thread("m"))
    assert info.value.thread_id == "m"
    assert info.value.differences == {"spec": (chain(3).spec_hash(), edited.spec_hash())}
    assert "thread 'm'" in str(info.value) and chain(3).spec_hash() in str(info.value)


# -- serialisation ---------------------------------------------------------------------------------------


def test_checkpoint_serde_round_trips_results_without_the_unregistered_type_warning(caplog):
    result = AgentResult(agent="sc", thinking="t", answer="a", details={"votes": {"a": 3}, "samples": ["a"]})
    result.usage.record("m", None)
    serde = checkpoint_serde()
    with caplog.at_level(logging.WARNING):
        back = serde.loads_typed(serde.dumps_typed({"results": {"X": result}}))
    assert back["results"]["X"] == result and isinstance(back["results"]["X"].usage.by_model["m"].calls, int)
    assert not [r for r in caplog.records if "unregistered" in r.getMessage() or "Blocked" in r.getMessage()]
    assert ("agents.base", "AgentResult") in CHECKPOINT_TYPES


def test_checkpoint_serde_refuses_types_it_does_not_know(caplog):
    class Foreign(AgentResult):
        pass

    serde = checkpoint_serde()
    with caplog.at_level(logging.WARNING):
        back = serde.loads_typed(serde.dumps_typed(Foreign(agent="x", answer="y")))
    assert not isinstance(back, Foreign)  # blocked: not revived as the foreign class


STRICT_SCRIPT = textwrap.dedent("""
    import json, logging, sys
    from langgraph.checkpoint.sqlite import SqliteSaver
    import sqlite3
    from mas_orchestra.compile import compile_spec
    from mas_orchestra.spec import spec_from_data
    from mas_orchestra.testing import ScriptedChatModel, cot_reply
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    db, phase = sys.argv[1], sys.argv[2]
    spec = spec_from_data({"nodes": [{"id": "A", "agent": "cot", "input": ""},
                                     {"id": "B", "agent": "cot", "input": "check ${A}"}],
                           "edges": [{"source": "A", "target": "B"}]})
    replies = [cot_reply("1"), ValueError("B fails")] if phase == "first" else [cot_reply("2")]
    model = ScriptedChatModel(replies=replies, cycle=False)
    conn = sqlite3.connect(db, check_same_thread=False)
    graph = compile_spec(spec, model, checkpointer=SqliteSaver(conn))   # LangGraph's default serializer
    config = {"configurable": {"thread_id": "strict"}}
    try:
        out = graph.invoke({"question": "q"} if phase == "first" else None, config)
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "calls": model.calls}))
    else:
        print(json.dumps({"a": type(out["results"]["A"]).__name__, "answer": out["final_answer"],
                          "calls": model.calls}))
""")


def test_strict_msgpack_mode_resumes_in_a_new_process(tmp_path):
    """LANGGRAPH_STRICT_MSGPACK=true (the future default): results checkpointed by one process revive in the next."""
    script = tmp_path / "strict.py"
    script.write_text(STRICT_SCRIPT)
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true", "PYTHONPATH": str(REPO)}
    db = str(tmp_path / "strict.sqlite")
    runs = [subprocess.run([sys.executable, str(script), db, phase], capture_output=True, text=True, env=env,
                           timeout=120) for phase in ("first", "resume")]
    first, resumed = ([line for line in r.stdout.splitlines() if line.startswith("{")] for r in runs)
    assert first == ['{"error": "NodeExecutionError", "calls": 2}'], runs[0].stderr
    assert resumed == ['{"a": "AgentResult", "answer": "2", "calls": 1}'], runs[1].stderr
    assert "Blocked deserialization" not in runs[1].stderr and "unregistered" not in runs[1].stderr


# -- the SQLite store: bad files are typed errors, never overwritten ------------------------------------


def test_corrupt_database_is_a_checkpoint_error_and_the_file_is_kept(tmp_path):
    bad = tmp_path / "runs.sqlite"
    content = b"this is not a database\n" * 200
    bad.write_bytes(content)
    with pytest.raises(CheckpointError) as info, open_sqlite_checkpointer(bad):
        pass
    assert info.value.path == str(bad) and str(bad) in str(info.value)
    assert "corrupt or not a SQLite database" in str(info.value) and "move it aside" in str(info.value)
    assert bad.read_bytes() == content


def test_locked_database_is_a_checkpoint_error_and_nothing_stored_is_lost(tmp_path):
    db = tmp_path / "runs.sqlite"
    with open_sqlite_checkpointer(db) as saver:
        compile_spec(chain(2), ScriptedChatModel(), checkpointer=saver).invoke({"question": "q"}, thread("kept"))
    holder = sqlite3.connect(str(db))
    holder.execute("BEGIN EXCLUSIVE")  # another process writing
    try:
        with pytest.raises(CheckpointError, match="locked") as info:
            check_sqlite_file(db, lock_timeout=0.2)
        assert str(db) in str(info.value)

        async def open_async() -> None:
            async with open_async_sqlite_checkpointer(db, lock_timeout=0.2):
                pass

        with pytest.raises(CheckpointError, match="locked"):
            asyncio.run(open_async())
    finally:
        holder.rollback()
        holder.close()
    with open_sqlite_checkpointer(db) as saver:
        state = compile_spec(chain(2), ScriptedChatModel(), checkpointer=saver).get_state(thread("kept"))
    assert state.values["final_answer"] == "42" and set(state.values["results"]) == {"S0", "S1"}


async def test_runs_opening_a_new_file_together_all_get_a_checkpointer(tmp_path):
    """Each opening switches the file to WAL journaling, which SQLite refuses at once ("database is locked",
    without its busy timeout) while another connection uses the file: two studio runs started together on a new
    file failed so (about 1 opening in 50 here). Openings wait for the switch now."""

    async def open_and_write(db: Path, thread_id: str) -> None:
        async with open_async_sqlite_checkpointer(db) as saver:
            await compile_spec(chain(2), ScriptedChatModel(), checkpointer=saver).ainvoke(
                {"question": "q"}, thread(thread_id))

    for attempt in range(40):
        db = tmp_path / f"new{attempt}.sqlite"
        sqlite3.connect(str(db)).close()  # an empty file, in rollback journaling until the first setup
        await asyncio.gather(*(open_and_write(db, f"t{i}") for i in range(3)))
        with open_sqlite_checkpointer(db) as saver:
            graph = compile_spec(chain(2), ScriptedChatModel(), checkpointer=saver)
            assert all(graph.get_state(thread(f"t{i}")).values["final_answer"] == "42" for i in range(3))
    # the same with the synchronous saver, from threads
    db = tmp_path / "threads.sqlite"
    sqlite3.connect(str(db)).close()

    def open_sync(thread_id: str) -> None:
        with open_sqlite_checkpointer(db) as saver:
            compile_spec(chain(2), ScriptedChatModel(), checkpointer=saver).invoke({"question": "q"},
                                                                                   thread(thread_id))

    await asyncio.gather(*(asyncio.to_thread(open_sync, f"s{i}") for i in range(3)))


def test_directory_or_missing_folder_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="is a directory"):
        check_sqlite_file(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        check_sqlite_file(tmp_path / "nope" / "runs.sqlite")


def test_missing_sqlite_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.sqlite", None)
    with pytest.raises(MissingExtraError) as info, open_sqlite_checkpointer("x.sqlite"):
        pass
    assert info.value.command == "pip install 'mas-orchestra[checkpoint]'"


NO_EXTRAS_SCRIPT = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            # langgraph_sdk is not blocked: langgraph itself depends on it (langgraph.runtime imports it)
            blocked = ("langgraph.checkpoint.sqlite", "aiosqlite", "langgraph_api", "langgraph_cli")
            if any(name == b or name.startswith(b + ".") for b in blocked):
                raise ImportError(f"blocked {name}")
            return None

    sys.meta_path.insert(0, Block())
    import mas_orchestra, agents, graphs
    import mas_orchestra.runtime.checkpoint, mas_orchestra.runtime.pipeline, mas_orchestra.runtime.threads
    import graphs.end_to_end, graphs.served
    from mas_orchestra.runtime.checkpoint import memory_checkpointer, open_sqlite_checkpointer
    from mas_orchestra.errors import MissingExtraError
    memory_checkpointer()
    try:
        with open_sqlite_checkpointer("x.sqlite"):
            pass
    except MissingExtraError as exc:
        print("missing:", exc.command)
""")


def test_core_and_graphs_import_without_the_checkpoint_and_serve_extras(tmp_path):
    script = tmp_path / "no_extras.py"
    script.write_text(NO_EXTRAS_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "missing: pip install 'mas-orchestra[checkpoint]'"


def test_sqlite_synchronous_setting_is_applied_and_checked(tmp_path):
    with open_sqlite_checkpointer(tmp_path / "a.sqlite") as saver:
        assert saver.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (default; WAL journal)
        assert saver.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with open_sqlite_checkpointer(tmp_path / "b.sqlite", synchronous="full") as saver:
        assert saver.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with (
        pytest.raises(ValueError, match="synchronous must be one of"),
        open_sqlite_checkpointer(tmp_path / "c.sqlite", synchronous="sometimes"),
    ):
        pass
    assert not (tmp_path / "c.sqlite").exists()
