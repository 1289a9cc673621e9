"""Compile a spec and run it: the events of a run, bounded by its deadline, ending in one :class:`Outcome`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from agents.base import ReplyConstrainer
from mas_orchestra.compile import NodeExecutionError, compile_spec
from mas_orchestra.errors import CompileError
from mas_orchestra.models.constraints import ConstrainedSetting, constraint_mode, reply_constrainer
from mas_orchestra.registry import AgentRegistry, default_registry
from mas_orchestra.runtime.outcome import Outcome, RunRecord, node_events
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import GraphSpec
from mas_orchestra.status import Status

__all__ = ["drain", "execute_events", "execute_spec", "stream_graph", "with_deadline"]

log = logging.getLogger(__name__)


async def stream_graph(graph: Any, run: RunRecord, config: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Run a compiled graph, recording results as nodes finish and yielding node events.

    Args:
        graph: The compiled spec graph.
        run: Records node results as they finish.
        config: The LangGraph run config.

    Yields:
        ``node_start`` / ``node_end`` events.
    """
    async for mode, chunk in graph.astream(
        {"question": run.question}, config=config, stream_mode=["tasks", "updates"]
    ):
        for event in node_events(run, mode, chunk):
            yield event


async def execute_spec(
    spec: GraphSpec,
    question: str,
    *,
    model: Any,
    search: Any = None,
    registry: AgentRegistry | None = None,
    settings: RunSettings | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
    max_concurrency: int | None = None,
    call_timeout: float | None = None,
    retry_initial_delay: float | None = None,
    orchestration: str = "",
    callbacks: list[Any] | None = None,
    constrained: ConstrainedSetting = None,
) -> Outcome:
    """Compile and run an already parsed spec; the outcome statuses are those of :class:`Orchestra`.

    Args:
        spec: The validated spec.
        question: The task.
        model: The sub-agent model (a chat model or a model string).
        search: The search backend for search nodes.
        registry: The registry the spec was parsed with (default: the default registry).
        settings: The run's bounds and retries (:class:`~mas_orchestra.settings.RunSettings`, default its
            defaults).
        timeout: Seconds for the whole run; overrides ``settings``.
        max_retries: Retries of transient model errors; overrides ``settings``.
        max_concurrency: Model calls in flight; overrides ``settings``.
        call_timeout: Seconds for one sub-agent call; overrides ``settings``.
        retry_initial_delay: Seconds before the first retry; overrides ``settings``.
        orchestration: The text the spec was read from, kept in the outcome.
        callbacks: LangChain callbacks added to every model call.
        constrained: Decode the sub-agents' replies under the reply grammar (see :class:`Orchestra`).

    Returns:
        The outcome; a failing node or a time-out is its status, not an exception.

    Raises:
        ConstrainedDecodingError: ``constrained=True`` and the model cannot decode under a grammar.
        TypeError: ``settings`` is not a ``RunSettings``.
    """
    settings = RunSettings.of(
        settings, timeout=timeout, max_retries=max_retries, max_concurrency=max_concurrency,
        call_timeout=call_timeout, retry_initial_delay=retry_initial_delay,
    )
    run = RunRecord(question)
    run.spec, run.orchestration = spec, orchestration
    constrain = reply_constrainer(constraint_mode(constrained, model))
    events = execute_events(run, model=model, search=search, registry=registry or default_registry,
                            settings=settings, callbacks=callbacks or [], constrain_reply=constrain)
    return await drain(events, run, settings.timeout)


async def drain(events: AsyncIterator[dict[str, Any]], run: RunRecord, timeout: float | None) -> Outcome:
    """The outcome event of ``events``, run to the end within ``timeout`` seconds.

    Args:
        events: The run's events.
        run: The run being recorded.
        timeout: Seconds the run may take (``None``: no bound).

    Returns:
        The outcome (``timeout`` when the deadline passed).
    """
    last: Outcome | None = None
    async for event in with_deadline(events, run, timeout):
        if event["type"] == "outcome":
            last = event["outcome"]
    assert last is not None
    return last


async def with_deadline(
    events: AsyncIterator[dict[str, Any]], run: RunRecord, timeout: float | None
) -> AsyncIterator[dict[str, Any]]:
    """``events`` until ``timeout`` seconds have passed; then a ``timeout`` outcome naming the finished nodes.

    Args:
        events: The run's events.
        run: The run being recorded (what finished goes into the ``timeout`` outcome).
        timeout: Seconds the run may take (``None``: no bound).

    Yields:
        The events, then a ``timeout`` outcome if the deadline passed first.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    iterator = events.__aiter__()
    while True:
        try:
            if deadline is None:
                event = await iterator.__anext__()
            else:
                event = await asyncio.wait_for(iterator.__anext__(), max(0.0, deadline - loop.time()))
        except StopAsyncIteration:
            return
        except (asyncio.TimeoutError, TimeoutError):
            # wait_for cancelled the step in flight: LangGraph cancels its running node tasks with it.
            await _close(iterator)
            finished = ", ".join(run.results) or "none"
            yield {
                "type": "outcome",
                "outcome": run.outcome(Status.TIMEOUT, error=f"run exceeded {timeout} s; finished nodes: {finished}"),
            }
            return
        yield event


async def _close(iterator: Any) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(RuntimeError, asyncio.CancelledError):  # already finalised by the cancellation
            await aclose()


async def execute_events(
    run: RunRecord,
    *,
    model: Any,
    search: Any,
    registry: AgentRegistry,
    settings: RunSettings,
    callbacks: list[Any],
    parent: Any = None,
    constrain_reply: ReplyConstrainer | None = None,
    plain_replies: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Compile ``run.spec`` with ``settings`` and run it, recording results in ``run``; the last event is the
    outcome (a compile error is one too). The run's deadline is the caller's (see :func:`with_deadline`).

    Args:
        run: The run, with its spec.
        model: The sub-agent model.
        search: The search backend.
        registry: The registry the spec was parsed with.
        settings: The run's bounds and retries.
        callbacks: LangChain callbacks for every model call.
        parent: The parent callback manager (the run's trace).
        constrain_reply: Binds the reply grammar to each model.
        plain_replies: See :func:`~mas_orchestra.compile.compile_spec`.

    Yields:
        ``node_start`` / ``node_end`` events, then the outcome.
    """
    assert run.spec is not None
    try:
        graph = compile_spec(
            run.spec, model, search=search, registry=registry, settings=settings, constrain_reply=constrain_reply,
            plain_replies=plain_replies,
        )
    except CompileError as exc:
        yield {"type": "outcome", "outcome": run.outcome(Status.COMPILE_ERROR, error=str(exc))}
        return
    config: dict[str, Any] = {"callbacks": parent if parent is not None else [run.usage, *callbacks]}
    config["metadata"] = {"spec_hash": run.spec.spec_hash()}
    try:
        async for event in stream_graph(graph, run, config):
            yield event
    except NodeExecutionError as exc:
        log.info("run failed at node %s: %s", exc.node_id, exc)
        yield {"type": "outcome", "outcome": run.outcome(Status.EXEC_ERROR, error=str(exc), failed_node=exc.node_id)}
        return
    except Exception as exc:  # a graph-level failure is an outcome, never lost
        log.warning("run failed: %r", exc)
        yield {"type": "outcome", "outcome": run.outcome(Status.EXEC_ERROR, error=f"{type(exc).__name__}: {exc}")}
        return
    if run.answer is None:
        yield {"type": "outcome", "outcome": run.outcome(Status.EXEC_ERROR, error="the graph produced no final answer")}
        return
    yield {"type": "outcome", "outcome": run.outcome(Status.OK)}


