"""The Orchestra runtime: orchestrate → parse → validate → compile → run, and say what happened.

``Orchestra.arun(question)`` never raises for a bad orchestration, a failing sub-agent or a timeout:
each ends as an :class:`Outcome` with its status and error recorded. Wrong argument types from the
caller still raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from langchain_core.callbacks.manager import AsyncCallbackManager
from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import BaseModel, Field, field_validator

from agents.base import AgentResult, CallSettings, message_text
from mas_orchestra.compile import NodeExecutionError, compile_spec
from mas_orchestra.constraints import (
    ConstrainedSetting,
    OrchestrationConstraint,
    bind_constraint,
    constraint_mode,
    reply_constrainer,
)
from mas_orchestra.errors import CompileError, SpecError
from mas_orchestra.grammar import GrammarLimits
from mas_orchestra.models import resolve_model, with_transient_retry
from mas_orchestra.prompts import orchestrator_prompt
from mas_orchestra.registry import AgentRegistry, default_registry, offered_registry
from mas_orchestra.spec import GraphSpec
from mas_orchestra.status import Status
from mas_orchestra.usage import ORCHESTRATOR_TAG, RunUsage, UsageCallback
from mas_orchestra.xml_format import parse_orchestration

__all__ = ["DEFAULT_CONSTRAINED_MAX_TOKENS", "Orchestra", "Outcome", "Status", "execute_spec"]

log = logging.getLogger(__name__)

#: Orchestrator token budget of a constrained local model when none is given (the stages fit any budget;
#: this one leaves room for a plan and a few agents).
DEFAULT_CONSTRAINED_MAX_TOKENS = 512
_NO_RESUME: Any = object()  # "no resume value given" (None is a valid resume value: approve)


class Outcome(BaseModel):
    """Everything about one run."""

    status: Status
    question: str
    answer: str | None = None
    spec: GraphSpec | None = None
    orchestration: str = ""
    node_results: dict[str, AgentResult] = Field(default_factory=dict)
    finished_nodes: list[str] = Field(default_factory=list)
    error: str | None = None
    failed_node: str | None = None
    usage: RunUsage = Field(default_factory=RunUsage)
    thread_id: str | None = None  # the checkpointed thread this run lives on (None without a checkpointer)
    interrupt: dict[str, Any] | None = None  # what the approval interrupt shows, when status is interrupted

    @field_validator("spec", mode="wrap")
    @classmethod
    def _keep_validated_spec(cls, value: Any, handler: Any) -> Any:
        # A GraphSpec instance was validated when it was built, possibly against a user registry;
        # re-running its checks here (default registry) would reject user-registered agent kinds.
        return value if isinstance(value, GraphSpec) else handler(value)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def valid(self) -> bool:
        """The orchestration parsed, validated and compiled (whatever happened when it ran)."""
        return self.status in (Status.OK, Status.EXEC_ERROR, Status.TIMEOUT) and self.spec is not None


class _Run:
    """Mutable record of a run in progress, so a timeout can still report what finished."""

    def __init__(self, question: str) -> None:
        self.question = question
        self.started = time.perf_counter()
        self.orchestration = ""
        self.spec: GraphSpec | None = None
        self.results: dict[str, AgentResult] = {}
        self.answer: str | None = None
        self.usage = UsageCallback()
        self.thread_id: str | None = None
        self.interrupt: dict[str, Any] | None = None

    def outcome(self, status: Status, *, error: str | None = None, failed_node: str | None = None) -> Outcome:
        return Outcome(
            status=status,
            question=self.question,
            answer=self.answer if status is Status.OK else None,
            spec=self.spec,
            orchestration=self.orchestration,
            node_results=dict(self.results),
            finished_nodes=list(self.results),
            error=error,
            failed_node=failed_node,
            usage=self.usage.snapshot(time.perf_counter() - self.started),
            thread_id=self.thread_id,
            interrupt=self.interrupt,
        )


def _node_events(run: _Run, mode: str, chunk: Any) -> list[dict[str, Any]]:
    """The node events of one ``tasks``/``updates`` stream chunk of a compiled spec graph; records finished
    nodes' results (and the final answer) in ``run``."""
    if mode == "tasks":
        started = "result" not in chunk and "error" not in chunk
        return [{"type": "node_start", "node": chunk["name"]}] if started else []
    events = []
    for update in (chunk or {}).values():
        if not isinstance(update, Mapping):
            continue
        for done_id, result in (update.get("results") or {}).items():
            run.results[done_id] = result
            events.append({"type": "node_end", "node": done_id, "agent": result.agent, "answer": result.answer})
        if "final_answer" in update:
            run.answer = update["final_answer"]
    return events


async def _stream_graph(graph: Any, run: _Run, config: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Run a compiled graph, recording results as nodes finish and yielding node events."""
    async for mode, chunk in graph.astream(
        {"question": run.question}, config=config, stream_mode=["tasks", "updates"]
    ):
        for event in _node_events(run, mode, chunk):
            yield event


async def execute_spec(
    spec: GraphSpec,
    question: str,
    *,
    model: Any,
    search: Any = None,
    registry: AgentRegistry | None = None,
    timeout: float | None = None,
    max_retries: int = 3,
    max_concurrency: int = 32,
    call_timeout: float | None = None,
    retry_initial_delay: float = 1.0,
    orchestration: str = "",
    callbacks: list[Any] | None = None,
    constrained: ConstrainedSetting = None,
) -> Outcome:
    """Compile and run an already parsed spec; the outcome statuses are those of :class:`Orchestra`.

    ``constrained`` decodes the sub-agents' replies under the reply grammar (see :class:`Orchestra`).
    """
    run = _Run(question)
    run.spec, run.orchestration = spec, orchestration
    constrain = reply_constrainer(constraint_mode(constrained, model))
    events = _execute(run, model=model, search=search, registry=registry or default_registry,
                      max_retries=max_retries, max_concurrency=max_concurrency, call_timeout=call_timeout,
                      retry_initial_delay=retry_initial_delay, callbacks=callbacks or [], constrain_reply=constrain)
    return await _drain(events, run, timeout)


async def _drain(events: AsyncIterator[dict[str, Any]], run: _Run, timeout: float | None) -> Outcome:
    last: Outcome | None = None
    async for event in _with_deadline(events, run, timeout):
        if event["type"] == "outcome":
            last = event["outcome"]
    assert last is not None
    return last


async def _with_deadline(
    events: AsyncIterator[dict[str, Any]], run: _Run, timeout: float | None
) -> AsyncIterator[dict[str, Any]]:
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


async def _execute(
    run: _Run,
    *,
    model: Any,
    search: Any,
    registry: AgentRegistry,
    max_retries: int,
    max_concurrency: int,
    call_timeout: float | None,
    retry_initial_delay: float,
    callbacks: list[Any],
    parent: Any = None,
    constrain_reply: Any = None,
) -> AsyncIterator[dict[str, Any]]:
    assert run.spec is not None
    try:
        settings = CallSettings(call_timeout=call_timeout, constrain_reply=constrain_reply)
        graph = compile_spec(
            run.spec, model, search=search, registry=registry, settings=settings,
            max_concurrency=max_concurrency, max_retries=max_retries, retry_initial_delay=retry_initial_delay,
        )
    except CompileError as exc:
        yield {"type": "outcome", "outcome": run.outcome(Status.COMPILE_ERROR, error=str(exc))}
        return
    config: dict[str, Any] = {"callbacks": parent if parent is not None else [run.usage, *callbacks]}
    config["metadata"] = {"spec_hash": run.spec.spec_hash()}
    try:
        async for event in _stream_graph(graph, run, config):
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


class Orchestra:
    """Ask an orchestrator model for a multi-agent system, compile it and run it on sub-agent models.

    ``orchestrator`` / ``subagent``: a ``BaseChatModel`` (any Runnable over messages) or a model
    string (``embedded``, ``openai:gpt-4o-mini``, ``vllm:<model>@<url>``, ``hf:<path>``,
    ``python:module:attr``…). ``dom``: ``high`` (any DAG) or ``low`` (answer directly or delegate to
    one agent). ``search``: a search backend for WebSearchAgent nodes (without one, the orchestrator
    is not offered that agent). ``timeout`` bounds a whole run in seconds; ``call_timeout`` one
    sub-agent call. ``max_retries``: transient model errors are retried with exponential backoff and
    jitter. ``max_concurrency`` bounds model calls in flight; ``requests_per_second`` rate-limits
    API models given as strings (LangChain's ``InMemoryRateLimiter``). ``agents`` restricts the
    agent kinds offered (names or aliases).

    ``constrained``: decode the orchestration and the sub-agent replies under grammars generated from the
    registry, so that the orchestration always parses and validates and replies always parse
    (:mod:`mas_orchestra.constraints`). ``None`` (default): on for local models (embedded, hf:), off for
    others; ``True``: on, and a backend that cannot do it raises :class:`ConstrainedDecodingError` here;
    ``False``: off; ``"auto"``: on where the backend can, off with a logged warning elsewhere.
    ``grammar_limits`` bounds what a constrained orchestration may contain (agents, text lengths).

    ``checkpointer``: any LangGraph checkpointer, or a path to a SQLite file (opened for each run; needs the
    ``checkpoint`` extra). Runs then live on threads (``arun(question, thread_id=...)``): the orchestration,
    the approval and every node result are checkpointed, and running the same thread again resumes it
    without calling the orchestrator or any finished node again (a finished thread returns its stored
    outcome). ``interrupt_before_execute`` pauses each run after orchestration (status ``interrupted``,
    the spec in ``Outcome.interrupt``) until ``arun(question, thread_id=..., resume=...)`` approves, edits
    or rejects it.
    """

    def __init__(
        self,
        orchestrator: Any = "embedded",
        subagent: Any = "embedded",
        dom: Literal["high", "low"] = "high",
        *,
        search: Any = None,
        max_retries: int = 3,
        timeout: float | None = None,
        call_timeout: float | None = None,
        max_concurrency: int = 32,
        agents: list[str] | None = None,
        registry: AgentRegistry | None = None,
        checkpointer: Any = None,
        interrupt_before_execute: bool = False,
        orchestrator_temperature: float | None = None,
        orchestrator_max_tokens: int | None = None,
        retry_initial_delay: float = 1.0,
        requests_per_second: float | None = None,
        constrained: ConstrainedSetting = None,
        grammar_limits: GrammarLimits | None = None,
    ) -> None:
        if dom not in ("high", "low"):
            raise ValueError(f"dom must be 'high' or 'low', got {dom!r}")
        for name, value in (("timeout", timeout), ("call_timeout", call_timeout)):
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        self.dom = dom
        self.search = search
        self.max_retries = max_retries
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.max_concurrency = max_concurrency
        self.retry_initial_delay = retry_initial_delay
        if interrupt_before_execute and checkpointer is None:
            raise ValueError("interrupt_before_execute=True needs a checkpointer (e.g. checkpointer='runs.sqlite')")
        self.checkpointer = checkpointer
        self.interrupt_before_execute = interrupt_before_execute
        self.registry = offered_registry(registry, search=search, agents=agents)
        # Model strings get the per-call timeout and the rate limiter at the HTTP client level.
        resolve = {"timeout": call_timeout, "requests_per_second": requests_per_second}
        self.orchestrator: Runnable = resolve_model(orchestrator, **resolve)
        self.subagent: Runnable = (
            self.orchestrator if subagent is orchestrator else resolve_model(subagent, **resolve)
        )
        self._orchestrator_kwargs: dict[str, Any] = {}
        if orchestrator_temperature is not None:
            self._orchestrator_kwargs["temperature"] = orchestrator_temperature
        # Constrained decoding: fail here, at construction, if a backend cannot do what was asked.
        orchestrator_mode = constraint_mode(constrained, self.orchestrator)
        subagent_mode = constraint_mode(constrained, self.subagent)
        self.orchestration_constraint: OrchestrationConstraint | None = None
        self._orchestrator_call: Runnable = self.orchestrator
        if orchestrator_mode != "off":
            self.orchestration_constraint = OrchestrationConstraint(
                dom=dom, registry=self.registry, limits=grammar_limits or GrammarLimits()
            )
            self.orchestration_constraint.grammar()  # a kind the grammar cannot express raises GrammarError now
            if orchestrator_max_tokens is None:
                orchestrator_max_tokens = DEFAULT_CONSTRAINED_MAX_TOKENS
            self._orchestrator_call = bind_constraint(
                self.orchestrator, self.orchestration_constraint, max_tokens=orchestrator_max_tokens,
                fallback=orchestrator_mode == "fallback",
            )
        self.constrain_reply = reply_constrainer(subagent_mode, self.subagent)
        self.constrained = {"orchestrator": orchestrator_mode, "subagent": subagent_mode}
        if orchestrator_max_tokens is not None:
            self._orchestrator_kwargs["max_tokens"] = orchestrator_max_tokens

    # -- public API ---------------------------------------------------------------------------

    def prompt(self, question: str) -> str:
        """The orchestrator prompt for ``question``."""
        return orchestrator_prompt(question, self.dom, registry=self.registry)

    async def aorchestrate(self, question: str, *, callbacks: Any = None) -> str:
        """Only the orchestrator call: the raw orchestration text."""
        _check_question(question)
        model = with_transient_retry(self._orchestrator_call, self.max_retries, initial_delay=self.retry_initial_delay)
        config: RunnableConfig = {"callbacks": callbacks, "tags": [ORCHESTRATOR_TAG], "run_name": "orchestrator"}
        reply = await model.ainvoke([HumanMessage(content=self.prompt(question))], config, **self._orchestrator_kwargs)
        return message_text(reply)

    async def aplan(self, question: str) -> GraphSpec:
        """Orchestrate and parse: the spec the orchestrator wrote (raises SpecError if invalid)."""
        return parse_orchestration(await self.aorchestrate(question), dom=self.dom, registry=self.registry)

    def plan(self, question: str) -> GraphSpec:
        return _run_sync(self.aplan(question))

    async def arun(
        self, question: str, *, callbacks: list[Any] | None = None, thread_id: str | None = None,
        resume: Any = _NO_RESUME, fork_from: str | None = None,
    ) -> Outcome:
        """Orchestrate, compile and run; always returns an :class:`Outcome`.

        With a checkpointer, ``thread_id`` / ``resume`` / ``fork_from`` are those of :meth:`astream`.
        """
        outcome: Outcome | None = None
        async for event in self.astream(
            question, callbacks=callbacks, thread_id=thread_id, resume=resume, fork_from=fork_from
        ):
            if event["type"] == "outcome":
                outcome = event["outcome"]
        assert outcome is not None
        return outcome

    def run(
        self, question: str, *, callbacks: list[Any] | None = None, thread_id: str | None = None,
        resume: Any = _NO_RESUME, fork_from: str | None = None,
    ) -> Outcome:
        """Synchronous :meth:`arun` (not from inside a running event loop)."""
        return _run_sync(
            self.arun(question, callbacks=callbacks, thread_id=thread_id, resume=resume, fork_from=fork_from)
        )

    async def astream(
        self, question: str, *, callbacks: list[Any] | None = None, thread_id: str | None = None,
        resume: Any = _NO_RESUME, fork_from: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield events: ``orchestration`` (text), ``spec``, ``node_start``/``node_end``, ``outcome``.

        With a checkpointer the run lives on thread ``thread_id`` (a new id when None, in
        ``Outcome.thread_id``); an existing thread is resumed (see :class:`Orchestra`). ``resume`` answers an
        approval interrupt (``"approve"``, ``"reject"``, an edited spec; see
        :func:`mas_orchestra.pipeline.review_decision`). ``fork_from`` starts ``thread_id`` from another
        thread's orchestration, so its nodes run again with this Orchestra's models.
        Resuming with another question or model set raises :class:`ThreadMismatchError`; a checkpoint
        store that cannot be used raises :class:`CheckpointError`.
        """
        _check_question(question)
        durable = self.checkpointer is not None
        if not durable and (thread_id is not None or fork_from is not None or resume is not _NO_RESUME):
            raise ValueError("thread_id / resume / fork_from need Orchestra(checkpointer=...)")
        run = _Run(question)
        manager = AsyncCallbackManager.configure(
            inheritable_callbacks=[run.usage, *(callbacks or [])], inheritable_metadata={"dom": self.dom}
        )
        root = await manager.on_chain_start({"name": "MAS-Orchestra"}, {"question": question}, name="MAS-Orchestra")
        final: Outcome | None = None
        try:
            events = (
                self._thread_events(run, root.get_child(), thread_id, resume, fork_from)
                if durable else self._events(run, root.get_child())
            )
            async for event in _with_deadline(events, run, self.timeout):
                if event["type"] == "outcome":
                    final = event["outcome"]
                yield event
        finally:
            if final is not None:
                await root.on_chain_end(
                    {"status": final.status.value, "answer": final.answer, "error": final.error}
                )
            else:
                await root.on_chain_error(asyncio.CancelledError("stream closed before the run ended"))

    def parse(self, text: str) -> GraphSpec:
        """Parse and validate orchestration text the way this Orchestra does (its DoM and registry)."""
        return parse_orchestration(text, dom=self.dom, registry=self.registry)

    # -- internals ----------------------------------------------------------------------------

    async def _thread_events(
        self, run: _Run, child: Any, thread_id: str | None, resume: Any, fork_from: str | None
    ) -> AsyncIterator[dict[str, Any]]:
        from mas_orchestra.threads import thread_events

        async for event in thread_events(self, run, child, thread_id, resume, fork_from):
            yield event

    async def _events(self, run: _Run, child: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            run.orchestration = await self.aorchestrate(run.question, callbacks=child)
        except Exception as exc:
            yield {
                "type": "outcome",
                "outcome": run.outcome(Status.EXEC_ERROR, error=f"orchestrator failed: {type(exc).__name__}: {exc}"),
            }
            return
        yield {"type": "orchestration", "text": run.orchestration}
        try:
            run.spec = parse_orchestration(run.orchestration, dom=self.dom, registry=self.registry)
        except SpecError as exc:
            yield {"type": "outcome", "outcome": run.outcome(Status.INVALID_SPEC, error=str(exc))}
            return
        yield {"type": "spec", "spec": run.spec}
        async for event in _execute(
            run, model=self.subagent, search=self.search, registry=self.registry, max_retries=self.max_retries,
            max_concurrency=self.max_concurrency, call_timeout=self.call_timeout,
            retry_initial_delay=self.retry_initial_delay, callbacks=[], parent=child,
            constrain_reply=self.constrain_reply,
        ):
            yield event


def _check_question(question: Any) -> None:
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")


def _run_sync(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called the sync API inside a running event loop; use `await orchestra.arun(...)`")
