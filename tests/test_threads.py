"""Orchestra runs on checkpointed threads: resume, stored outcomes, mismatches, approval, fork, CLI."""

from __future__ import annotations

import json
import sqlite3

import pytest
from langchain_core.messages import BaseMessage
from pydantic import PrivateAttr

from mas_orchestra import OrchestraConfig, RunSettings
from mas_orchestra.cli import main
from mas_orchestra.errors import CheckpointError, ThreadMismatchError
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.runtime.checkpoint import memory_checkpointer
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel
from tests.step_models import StepModel

pytest.importorskip("langgraph.checkpoint.sqlite")

CHAIN = spec_from_data({
    "nodes": [{"id": "S0", "agent": "cot", "input": "step 0"}]
    + [{"id": f"S{i}", "agent": "cot", "input": f"step {i} after ${{S{i - 1}}}"} for i in range(1, 4)],
    "edges": [{"source": f"S{i - 1}", "target": f"S{i}"} for i in range(1, 4)],
}).to_xml()


def orchestrator(text: str = CHAIN) -> ScriptedChatModel:
    return ScriptedChatModel(replies=[text], model_name="orch")


def make(sub=None, orch=None, *, timeout: float | None = None, interrupt_before_execute: bool = False,
         **kw) -> tuple[Orchestra, ScriptedChatModel, StepModel]:
    orch = orch or orchestrator()
    sub = sub or StepModel(model_name="sub")
    kw.setdefault("checkpointer", memory_checkpointer())
    config = OrchestraConfig(interrupt_before_execute=interrupt_before_execute)
    settings = RunSettings(max_retries=0, timeout=timeout)
    return Orchestra(orch, sub, config=config, settings=settings, **kw), orch, sub


async def test_a_failed_run_resumes_without_reorchestrating_or_recalling_finished_nodes():
    orchestra, orch, sub = make(StepModel(model_name="sub", fail_once={2}))
    first = await orchestra.arun("q", thread_id="t")
    assert first.status is Status.EXEC_ERROR and first.failed_node == "S2" and first.thread_id == "t"
    assert sorted(first.node_results) == ["S0", "S1"]  # read back from the checkpoint
    resumed = await orchestra.arun("q", thread_id="t")
    assert resumed.status is Status.OK and resumed.answer == "answer-3"
    assert orch.calls == 1  # the orchestration is a checkpointed step
    assert sub.steps == [0, 1, 2, 2, 3]  # S0, S1 not called again
    assert resumed.usage.orchestrator_calls == 0 and resumed.usage.subagent_calls == 2
    assert sorted(resumed.node_results) == ["S0", "S1", "S2", "S3"]
    assert resumed.node_results["S0"].answer == "answer-0"
    again = await orchestra.arun("q", thread_id="t")  # finished: the stored outcome, no call at all
    assert again.status is Status.OK and again.answer == "answer-3" and again.usage.llm_calls == 0
    assert again.spec is not None and [n.id for n in again.spec.nodes] == ["S0", "S1", "S2", "S3"]


async def test_timed_out_run_resumes_where_it_stopped():
    sub = StepModel(model_name="sub", delay=0.2)
    orchestra, orch, _ = make(sub, timeout=0.5)
    first = await orchestra.arun("q", thread_id="slow")
    assert first.status is Status.TIMEOUT and first.thread_id == "slow"
    finished = [int(node[1:]) for node in first.finished_nodes]
    assert finished and len(finished) < 4
    orchestra.settings = orchestra.settings.model_copy(update={"timeout": None})
    resumed = await orchestra.arun("q", thread_id="slow")
    assert resumed.status is Status.OK and orch.calls == 1
    assert all(sub.steps.count(step) == 1 for step in finished)  # a finished node is never called again
    assert resumed.usage.subagent_calls == 4 - len(finished)


async def test_a_new_thread_id_is_made_when_none_is_given_and_streams_node_events():
    orchestra, _, _ = make()
    events = [e async for e in orchestra.astream("q")]
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["orchestration", "spec"] and kinds[-1] == "outcome"
    assert [e["node"] for e in events if e["type"] == "node_end"] == ["S0", "S1", "S2", "S3"]
    outcome = events[-1]["outcome"]
    assert outcome.ok and outcome.thread_id and outcome.thread_id.startswith("mas-")


@pytest.mark.parametrize("change", ["question", "subagent", "dom"])
async def test_resuming_with_another_question_or_model_set_names_the_thread_and_difference(change):
    saver = memory_checkpointer()
    orchestra, orch, _ = make(StepModel(model_name="sub", fail_once={1}), checkpointer=saver)
    await orchestra.arun("q", thread_id="t")
    question = "another q" if change == "question" else "q"
    sub = StepModel(model_name="other-sub" if change == "subagent" else "sub")
    other = Orchestra(orch, sub, config=OrchestraConfig(dom="low" if change == "dom" else "high"), checkpointer=saver)
    with pytest.raises(ThreadMismatchError) as info:
        await other.arun(question, thread_id="t")
    assert info.value.thread_id == "t" and list(info.value.differences) == [change]
    assert "thread 't'" in str(info.value) and "--fork" in str(info.value)
    assert sub.calls == 0


async def test_fork_keeps_the_orchestration_and_reruns_the_nodes_on_new_models():
    saver = memory_checkpointer()
    orchestra, orch, _ = make(checkpointer=saver)
    assert (await orchestra.arun("q", thread_id="base")).ok
    new_sub = StepModel(model_name="new-sub")
    fork = Orchestra(orch, new_sub, checkpointer=saver)
    out = await fork.arun("q", thread_id="base-2", fork_from="base")
    assert out.ok and out.thread_id == "base-2" and orch.calls == 1 and new_sub.steps == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="already exists"):
        await fork.arun("q", thread_id="base-2", fork_from="base")
    with pytest.raises(ValueError, match="no such thread"):
        await fork.arun("q", thread_id="x", fork_from="missing")


# -- approval --------------------------------------------------------------------------------------------


async def test_approval_interrupt_shows_the_spec_and_runs_nothing_until_approved():
    orchestra, orch, sub = make(interrupt_before_execute=True)
    paused = await orchestra.arun("q", thread_id="a")
    assert paused.status is Status.INTERRUPTED and sub.calls == 0
    assert paused.interrupt is not None and [n["id"] for n in paused.interrupt["spec"]["nodes"]] == [
        "S0", "S1", "S2", "S3"]
    assert "<agent_id>S3</agent_id>" in paused.interrupt["spec_text"]
    still = await orchestra.arun("q", thread_id="a")  # no resume value: still waiting, nothing runs
    assert still.status is Status.INTERRUPTED and sub.calls == 0 and still.usage.llm_calls == 0
    done = await orchestra.arun("q", thread_id="a", resume="approve")
    assert done.ok and done.answer == "answer-3" and orch.calls == 1 and sub.steps == [0, 1, 2, 3]


async def test_an_edited_spec_is_validated_again_and_an_invalid_edit_asks_again():
    orchestra, _, sub = make(interrupt_before_execute=True)
    await orchestra.arun("q", thread_id="e")
    bad = {"spec": {"nodes": [{"id": "A", "agent": "nope", "input": ""}]}}
    again = await orchestra.arun("q", thread_id="e", resume=bad)
    assert again.status is Status.INTERRUPTED and sub.calls == 0
    assert "the edited spec is invalid" in again.interrupt["error"] and "nope" in again.interrupt["error"]
    edited = spec_from_data({"nodes": [{"id": "ONLY", "agent": "cot", "input": "step 9"}]})
    done = await orchestra.arun("q", thread_id="e", resume={"spec": edited.model_dump(mode="json")})
    assert done.ok and done.answer == "answer-9" and sorted(done.node_results) == ["ONLY"]
    assert sub.steps == [9] and done.spec is not None and done.spec.spec_hash() == edited.spec_hash()


async def test_reject_ends_the_thread_without_running_it():
    orchestra, _, sub = make(interrupt_before_execute=True)
    await orchestra.arun("q", thread_id="r")
    out = await orchestra.arun("q", thread_id="r", resume={"action": "reject", "reason": "too many agents"})
    assert out.status is Status.INVALID_SPEC and "too many agents" in out.error and sub.calls == 0
    with pytest.raises(ValueError, match="not waiting for approval"):
        await orchestra.arun("q", thread_id="r", resume="approve")


def test_thread_arguments_need_a_checkpointer():
    with pytest.raises(ValueError, match="needs a checkpointer"):
        Orchestra(orchestrator(), StepModel(), config=OrchestraConfig(interrupt_before_execute=True))
    with pytest.raises(ValueError, match="need Orchestra\\(checkpointer"):
        Orchestra(orchestrator(), StepModel()).run("q", thread_id="t")


# -- SQLite file as checkpointer, and the CLI ------------------------------------------------------------


def test_sqlite_path_checkpointer_survives_a_new_orchestra(tmp_path):
    db = tmp_path / "runs.sqlite"
    first = Orchestra(orchestrator(), StepModel(model_name="sub", fail_once={3}), settings=RunSettings(max_retries=0),
                      checkpointer=db)
    assert first.run("q", thread_id="t").status is Status.EXEC_ERROR
    orch, sub = orchestrator(), StepModel(model_name="sub")
    out = Orchestra(orch, sub, settings=RunSettings(max_retries=0), checkpointer=str(db)).run("q", thread_id="t")
    assert out.ok and orch.calls == 0 and sub.steps == [3]


def test_corrupt_database_is_a_checkpoint_error_naming_the_file(tmp_path):
    db = tmp_path / "runs.sqlite"
    db.write_bytes(b"garbage" * 100)
    with pytest.raises(CheckpointError, match=r"runs\.sqlite"):
        Orchestra(orchestrator(), StepModel(), checkpointer=db).run("q", thread_id="t")
    assert db.read_bytes() == b"garbage" * 100


CLI_MODELS = "python:tests.test_threads:"


def cli_orchestrator() -> ScriptedChatModel:
    return orchestrator()


def cli_subagent() -> StepModel:
    return StepModel(model_name="sub")


def test_cli_thread_approve_resume_and_mismatch(tmp_path, capsys):
    db = str(tmp_path / "cli.sqlite")
    base = ["run", "q", "--orchestrator", CLI_MODELS + "cli_orchestrator", "--subagent", CLI_MODELS + "cli_subagent",
            "--db", db, "--thread", "c1"]
    assert main([*base, "--approve"]) == 3
    out = capsys.readouterr().out
    assert "== status == interrupted" in out and "--resume approve" in out and "thread: c1" in out
    assert main([*base, "--resume", "approve", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "ok" and outcome["answer"] == "answer-3" and outcome["thread_id"] == "c1"
    assert outcome["usage"]["orchestrator_calls"] == 0 and outcome["usage"]["subagent_calls"] == 4
    assert main([*base, "--json"]) == 0  # finished thread: stored outcome, no calls
    assert json.loads(capsys.readouterr().out)["usage"]["llm_calls"] == 0
    assert main([*base[:1], "other question", *base[2:]]) == 2
    assert "thread 'c1'" in capsys.readouterr().err
    assert main([*base[:1], "q", *base[2:-1], "c1", "--fork", "c1-b", "--json"]) == 0
    forked = json.loads(capsys.readouterr().out)
    assert forked["thread_id"] == "c1-b" and forked["usage"]["orchestrator_calls"] == 0


class LocksTheDatabase(StepModel):
    """A sub-agent that, when asked step 2, lets another connection take the database's write lock."""

    db: str = ""
    _holder: object = PrivateAttr(default=None)

    def _next_reply(self, messages: list[BaseMessage], index: int) -> object:
        reply = super()._next_reply(messages, index)
        if self.steps[-1] == 2 and self._holder is None:
            holder = sqlite3.connect(self.db, timeout=0.1)
            holder.execute("BEGIN EXCLUSIVE")  # another process writing, and not letting go
            self._holder = holder
        return reply

    def release(self) -> None:
        if self._holder is not None:
            self._holder.rollback()  # type: ignore[attr-defined]
            self._holder.close()  # type: ignore[attr-defined]


def test_database_locked_mid_run_is_a_checkpoint_error_and_the_thread_resumes_after(tmp_path, monkeypatch):
    monkeypatch.setattr("mas_orchestra.runtime.checkpoint.DEFAULT_LOCK_TIMEOUT_S", 0.3)
    db = tmp_path / "runs.sqlite"
    sub = LocksTheDatabase(model_name="sub", db=str(db))
    orchestra = Orchestra(orchestrator(), sub, settings=RunSettings(max_retries=0), checkpointer=db)
    try:
        with pytest.raises(CheckpointError, match="locked") as info:
            orchestra.run("q", thread_id="t")
        assert str(db) in str(info.value)
    finally:
        sub.release()
    orch, again = orchestrator(), StepModel(model_name="sub")
    out = Orchestra(orch, again, settings=RunSettings(max_retries=0), checkpointer=db).run("q", thread_id="t")
    assert out.ok and out.answer == "answer-3" and orch.calls == 0
    assert 0 not in again.steps and 1 not in again.steps  # S0 and S1 were kept in the checkpoint


async def test_orchestrator_failure_is_retried_on_resume_but_an_invalid_spec_is_final():
    orch = ScriptedChatModel(replies=[RuntimeError("orchestrator down"), CHAIN], cycle=False, model_name="orch")
    orchestra, _, sub = make(orch=orch)
    failed = await orchestra.arun("q", thread_id="o")
    assert failed.status is Status.EXEC_ERROR and failed.error.startswith("orchestrator failed") and sub.calls == 0
    resumed = await orchestra.arun("q", thread_id="o")
    assert resumed.ok and orch.calls == 2
    bad = ScriptedChatModel(replies=["<agent><agent_id>A</agent_id><agent_name>Nope</agent_name></agent>"],
                            model_name="orch")
    orchestra, _, sub = make(orch=bad)
    invalid = await orchestra.arun("q", thread_id="i")
    assert invalid.status is Status.INVALID_SPEC and "Nope" in invalid.error
    again = await orchestra.arun("q", thread_id="i")
    assert again.status is Status.INVALID_SPEC and again.error == invalid.error and bad.calls == 1 and sub.calls == 0


async def test_end_to_end_graph_state_and_history_show_orchestration_spec_and_each_node_result():
    from graphs.end_to_end import build_graph

    saver = memory_checkpointer()
    orchestra, _, _ = make(checkpointer=saver)
    graph = build_graph(orchestra, checkpointer=saver)
    config = {"configurable": {"thread_id": "g"}}
    out = await graph.ainvoke({"question": "q"}, config)
    assert out["status"] == "ok" and out["answer"] == "answer-3"
    state = await graph.aget_state(config)
    assert {k: v["answer"] for k, v in state.values["results"].items()} == {f"S{i}": f"answer-{i}" for i in range(4)}
    assert state.values["setup"] == {"orchestrator": "orch", "subagent": "sub", "dom": "high"}
    steps = [h async for h in graph.aget_state_history(config)][::-1]  # oldest first
    written = [sorted(k for k, v in h.values.items() if k != "question" and v not in (None, {}, "")) for h in steps]
    assert written[2] == ["approval", "orchestration", "setup"]  # after orchestrate
    assert "spec" in written[3] and "results" not in written[4] and "results" in written[-1]


async def test_a_served_thread_takes_a_second_question_from_a_clean_state():
    from graphs.end_to_end import build_graph

    orchestra, orch, sub = make()
    graph = build_graph(orchestra, checkpointer=memory_checkpointer())
    config = {"configurable": {"thread_id": "two"}}
    first = await graph.ainvoke({"question": "first"}, config)
    second = await graph.ainvoke({"question": "second"}, config)
    assert first["status"] == second["status"] == "ok" and orch.calls == 2 and sub.calls == 8
    assert second["question"] == "second" and sorted(second["results"]) == ["S0", "S1", "S2", "S3"]
