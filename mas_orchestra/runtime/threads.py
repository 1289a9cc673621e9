"""Orchestra runs on checkpointed threads: start, resume, approve, fork; the events of :meth:`Orchestra.astream`.

A thread's state is the end-to-end graph's (:mod:`mas_orchestra.runtime.pipeline`). Before anything runs, an
existing thread is checked against this run (question, orchestrator, sub-agent model, DoM): a difference
is a :class:`ThreadMismatchError` naming the thread and each difference, and nothing is run.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from langgraph.types import Command

from agents.base import AgentResult
from mas_orchestra.compile import NodeExecutionError
from mas_orchestra.errors import CheckpointError, ThreadMismatchError
from mas_orchestra.runtime.outcome import RunRecord, node_events
from mas_orchestra.runtime.pipeline import build_pipeline, setup_of
from mas_orchestra.runtime.postgres import (
    is_database_error,
    is_postgres_url,
    open_async_postgres_checkpointer,
    postgres_error,
    redact_url,
)
from mas_orchestra.runtime.runner_protocol import PipelineRunner
from mas_orchestra.spec import spec_from_data
from mas_orchestra.status import Status

__all__ = ["NO_RESUME", "finished_nodes", "thread_differences", "thread_events"]

#: "No resume value given" (``None`` is a resume value: it approves).
NO_RESUME: Any = object()

# Outer steps: orchestrate, validate, approve, execute, plus the resume/update steps; the spec's own
# depth is bounded inside execute (its subgraph gets its own recursion_limit).
_OUTER_RECURSION_LIMIT = 25


def thread_differences(values: Mapping[str, Any], question: str, setup: Mapping[str, str]) -> dict[str, tuple]:
    """What differs between a stored thread and a run: ``{what: (stored, given)}`` (empty when it matches).

    Args:
        values: The stored thread's state values.
        question: The question of this run.
        setup: The models and DoM of this run.

    Returns:
        ``{what: (stored, given)}``.
    """
    differences: dict[str, tuple] = {}
    if values.get("question") != question:
        differences["question"] = (values.get("question"), question)
    stored = values.get("setup") or {}
    for key, given in setup.items():
        if key in stored and stored[key] != given:
            differences[key] = (stored[key], given)
    return differences


@contextlib.asynccontextmanager
async def _saver(checkpointer: Any) -> AsyncIterator[Any]:
    if is_postgres_url(checkpointer):
        async with open_async_postgres_checkpointer(checkpointer) as saver:
            yield saver
    elif isinstance(checkpointer, (str, Path)):
        from mas_orchestra.runtime.checkpoint import open_async_sqlite_checkpointer

        async with open_async_sqlite_checkpointer(checkpointer) as saver:
            yield saver
    else:
        yield checkpointer


def _store_name(checkpointer: Any) -> str:
    if is_postgres_url(checkpointer):
        return redact_url(checkpointer)
    if isinstance(checkpointer, (str, Path)):
        return str(checkpointer)
    conn = getattr(checkpointer, "conn", None)
    return f"{type(checkpointer).__name__}({conn!r})" if conn is not None else type(checkpointer).__name__


def _postgres_url_of(orchestra: PipelineRunner) -> str:
    """A URL naming the database of a saver passed as an object (its connection's parameters, no password)."""
    info = getattr(getattr(orchestra.checkpointer, "conn", None), "info", None)
    if info is None:
        return "postgresql://unknown"
    return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"


def _fill(run: RunRecord, values: Mapping[str, Any], orchestra: PipelineRunner) -> None:
    """Copy a thread's stored state into the run record (results from the checkpoint, not from calls)."""
    run.orchestration = values.get("orchestration") or run.orchestration
    if values.get("spec"):
        run.spec = spec_from_data(values["spec"], registry=orchestra.registry)
    for node_id, data in (values.get("results") or {}).items():
        run.results[node_id] = AgentResult.model_validate(data)
    if values.get("answer") is not None:
        run.answer = values["answer"]


def _outcome_of(run: RunRecord, values: Mapping[str, Any]) -> dict[str, Any]:
    status = Status(values.get("status") or Status.EXEC_ERROR.value)
    error = values.get("error") if status is not Status.OK else None
    if status is not Status.OK and not error:
        error = "the run ended without a status"
    return {"type": "outcome", "outcome": run.outcome(status, error=error)}


async def _inner_results(graph: Any, config: dict[str, Any]) -> dict[str, AgentResult]:
    """Node results checkpointed by the spec subgraph of a run that stopped inside ``execute``."""
    snapshot = await graph.aget_state(config, subgraphs=True)
    found: dict[str, AgentResult] = {}
    for task in snapshot.tasks:
        state = getattr(task, "state", None)
        values = getattr(state, "values", None) or {}
        for node_id, result in (values.get("results") or {}).items():
            found[node_id] = result if isinstance(result, AgentResult) else AgentResult.model_validate(result)
    return found


def finished_nodes(checkpointer: Any, thread_id: str) -> dict[str, AgentResult]:
    """The node results checkpointed on an Orchestra thread so far, also while it runs or after it died.

    Reads only; safe next to a running writer.

    Args:
        checkpointer: A synchronous saver (``InMemorySaver``, ``SqliteSaver``; e.g. from
            :func:`mas_orchestra.runtime.checkpoint.open_sqlite_checkpointer`).
        thread_id: The thread.

    Returns:
        Node id → result of every node that finished (in the execute subgraph's pending writes too).
    """

    def no_runs(_context: Any) -> Any:
        raise RuntimeError("finished_nodes only reads a thread")

    graph = build_pipeline(no_runs, checkpointer=checkpointer)
    snapshot = graph.get_state({"configurable": {"thread_id": thread_id}})
    found = {k: AgentResult.model_validate(v) for k, v in (snapshot.values.get("results") or {}).items()}
    for task in snapshot.tasks:
        if task.name != "execute":
            continue
        # The spec subgraph checkpoints under the namespace "execute:<task id>" of the same thread; its
        # latest checkpoint holds the finished supersteps, its pending writes the nodes finished since.
        inner = {"configurable": {"thread_id": thread_id, "checkpoint_ns": f"execute:{task.id}"}}
        saved = checkpointer.get_tuple(inner)
        if saved is None:
            continue
        results = dict(saved.checkpoint.get("channel_values", {}).get("results") or {})
        for _task_id, channel, value in saved.pending_writes or ():
            if channel == "results" and isinstance(value, Mapping):
                results.update(value)
        for node_id, result in results.items():
            found[node_id] = result if isinstance(result, AgentResult) else AgentResult.model_validate(result)
    return found


async def thread_events(
    orchestra: PipelineRunner, run: RunRecord, child: Any, thread_id: str | None, resume: Any, fork_from: str | None
) -> AsyncIterator[dict[str, Any]]:
    """The events of one checkpointed run (see :meth:`Orchestra.astream`).

    Args:
        orchestra: The runner (its ``checkpointer`` holds the thread).
        run: The run's record, filled as the run goes.
        child: The callbacks of the graph's run.
        thread_id: The thread (a new ``mas-…`` id when ``None``).
        resume: Answers an approval interrupt (``NO_RESUME``: none).
        fork_from: Starts ``thread_id`` from this thread's orchestration.
    """
    thread_id = thread_id or f"mas-{uuid.uuid4().hex[:12]}"
    run.thread_id = thread_id
    setup = setup_of(orchestra)
    try:
        async with _saver(orchestra.checkpointer) as saver:
            graph = build_pipeline(
                lambda _context: orchestra, checkpointer=saver, approval=orchestra.interrupt_before_execute
            )
            config: dict[str, Any] = {
                "configurable": {"thread_id": thread_id},
                "callbacks": child,
                "recursion_limit": _OUTER_RECURSION_LIMIT,
            }
            command = await _start(graph, config, run, orchestra, setup, resume, fork_from)
            if isinstance(command, dict) and command.get("type") == "outcome":
                yield command
                return
            async for event in _stream(graph, config, run, command, orchestra):
                yield event
    except sqlite3.Error as exc:
        from mas_orchestra.runtime.checkpoint import as_checkpoint_error

        raise as_checkpoint_error(_store_name(orchestra.checkpointer), exc) from exc
    except Exception as exc:
        if not is_database_error(exc):
            raise
        # The PostgreSQL driver failed (connection lost, server gone): every committed node is kept.
        url = orchestra.checkpointer if is_postgres_url(orchestra.checkpointer) else _postgres_url_of(orchestra)
        raise postgres_error(url, exc) from exc


async def _start(
    graph: Any, config: dict[str, Any], run: RunRecord, orchestra: PipelineRunner, setup: dict[str, str],
    resume: Any, fork_from: str | None,
) -> Any:
    """What to stream: new input, ``None`` (resume), a ``Command(resume=…)``, or a ready outcome event."""
    thread_id = config["configurable"]["thread_id"]
    snapshot = await graph.aget_state(config)
    if fork_from is not None:
        if snapshot.values:
            raise ValueError(f"cannot fork into thread {thread_id!r}: it already exists; choose a new thread id")
        source = await graph.aget_state({"configurable": {"thread_id": fork_from}})
        if not source.values:
            store = _store_name(orchestra.checkpointer)
            raise ValueError(f"cannot fork thread {fork_from!r}: no such thread in {store}")
        if source.values.get("question") != run.question:
            raise ThreadMismatchError(fork_from, {"question": (source.values.get("question"), run.question)})
        if not source.values.get("orchestration"):
            raise ValueError(f"cannot fork thread {fork_from!r}: it has no orchestration yet; just resume it")
        # The fork keeps the orchestration (the orchestrator is not asked again) and validates it with this
        # Orchestra's DoM and registry; every node runs again on this Orchestra's models.
        await graph.aupdate_state(
            config,
            {
                "question": run.question, "setup": setup, "orchestration": source.values["orchestration"],
                "approval": orchestra.interrupt_before_execute,
            },
            as_node="orchestrate",
        )
        return None
    if not snapshot.values:
        if resume is not NO_RESUME:
            raise ValueError(f"thread {thread_id!r} does not exist (in {_store_name(orchestra.checkpointer)}): "
                             "nothing to resume")
        return {"question": run.question, "setup": setup}
    differences = thread_differences(snapshot.values, run.question, setup)
    if differences:
        raise ThreadMismatchError(thread_id, differences)
    _fill(run, snapshot.values, orchestra)
    interrupts = [i.value for task in snapshot.tasks for i in getattr(task, "interrupts", ())]
    if interrupts:
        if resume is NO_RESUME:  # still waiting: say so again, run nothing
            run.interrupt = interrupts[0]
            return {"type": "outcome", "outcome": run.outcome(Status.INTERRUPTED, error="waiting for approval")}
        return Command(resume=resume.model_dump(mode="json") if hasattr(resume, "model_dump") else resume)
    if resume is not NO_RESUME:
        raise ValueError(f"thread {thread_id!r} is not waiting for approval; run it without resume=")
    if not snapshot.next:  # finished: the stored outcome, no model call
        return _outcome_of(run, snapshot.values)
    return None  # stopped part-way (killed, timed out, failed node): go on from the last checkpoint


async def _stream(
    graph: Any, config: dict[str, Any], run: RunRecord, command: Any, orchestra: PipelineRunner
) -> AsyncIterator[dict[str, Any]]:
    try:
        async for namespace, mode, chunk in graph.astream(
            # durability="sync": a superstep's checkpoint is on disk before the next starts, so a kill -9
            # loses no finished node (the default "async" may lose the last superstep's checkpoint).
            command, config, stream_mode=["updates", "tasks"], subgraphs=True, durability="sync"
        ):
            if namespace:  # the spec subgraph inside execute: node events
                for event in node_events(run, mode, chunk):
                    yield event
                continue
            if mode != "updates":
                continue
            for step, update in (chunk or {}).items():
                if step == "__interrupt__":
                    run.interrupt = update[0].value if update else None
                elif step == "orchestrate" and isinstance(update, Mapping):
                    run.orchestration = update.get("orchestration", "")
                    yield {"type": "orchestration", "text": run.orchestration}
                elif step in ("validate", "approve") and isinstance(update, Mapping) and update.get("spec"):
                    run.spec = spec_from_data(update["spec"], registry=orchestra.registry)
                    yield {"type": "spec", "spec": run.spec}
    except NodeExecutionError as exc:
        run.results.update(await _inner_results(graph, config))
        yield {"type": "outcome", "outcome": run.outcome(Status.EXEC_ERROR, error=str(exc), failed_node=exc.node_id)}
        return
    except (ThreadMismatchError, CheckpointError, sqlite3.Error):
        raise
    except Exception as exc:  # orchestrator failure and the like: an outcome; the thread stays resumable
        if is_database_error(exc):  # the checkpoint store failed, not the run: raised as a CheckpointError
            raise
        error = f"{type(exc).__name__}: {exc}"
        if not run.orchestration:
            error = f"orchestrator failed: {error}"
        yield {"type": "outcome", "outcome": run.outcome(Status.EXEC_ERROR, error=error)}
        return
    snapshot = await graph.aget_state(config)
    if snapshot.next and run.interrupt is not None:
        yield {"type": "outcome", "outcome": run.outcome(Status.INTERRUPTED, error="waiting for approval")}
        return
    run.results.clear()
    _fill(run, snapshot.values, orchestra)
    yield _outcome_of(run, snapshot.values)

