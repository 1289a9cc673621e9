"""The Orchestra: orchestrate → parse → validate → compile → run, and say what happened.

``Orchestra.arun(question)`` never raises for a bad orchestration, a failing sub-agent or a timeout:
each ends as an :class:`Outcome` with its status and error recorded. Wrong argument types from the
caller still raise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import replace
from typing import Any

from langchain_core.callbacks.manager import AsyncCallbackManager
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig

from agents.base import message_text, model_name_of
from agents.tools.mcp import DEFAULT_LIST_TIMEOUT, load_mcp_tools, mcp_run_sessions
from mas_orchestra.caps import (
    SamplingCaps,
    apply_caps,
    asks_plainly,
    capped_registry,
    caps_for_model,
    tightest_caps,
)
from mas_orchestra.config import OrchestraConfig
from mas_orchestra.errors import SpecError
from mas_orchestra.models import resolve_model, with_transient_retry
from mas_orchestra.models.constraints import (
    OrchestrationConstraint,
    bind_constraint,
    constraint_mode,
    reply_constrainer,
)
from mas_orchestra.offers import PoolError, with_pool, with_tools
from mas_orchestra.prompt_templates import load_template
from mas_orchestra.prompts import orchestrator_messages
from mas_orchestra.registry import AgentRegistry, offered_registry
from mas_orchestra.runtime.execute import execute_events, with_deadline
from mas_orchestra.runtime.guards import check_question, run_sync
from mas_orchestra.runtime.outcome import Outcome, RunRecord
from mas_orchestra.runtime.threads import NO_RESUME, thread_events
from mas_orchestra.runtime.usage import ORCHESTRATOR_TAG
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import Dom, GraphSpec, parse_orchestration
from mas_orchestra.spec.grammar import GrammarLimits
from mas_orchestra.status import Status

__all__ = ["DEFAULT_CONSTRAINED_MAX_TOKENS", "Orchestra"]

log = logging.getLogger(__name__)

#: Orchestrator token budget of a constrained local model when none is given (the stages fit any budget;
#: this one leaves room for a plan and a few agents).
DEFAULT_CONSTRAINED_MAX_TOKENS = 512


class Orchestra:
    """Ask an orchestrator model for a multi-agent system, compile it and run it on sub-agent models.

    Model arguments take a ``BaseChatModel`` (any Runnable over messages) or a model string (``embedded``,
    ``openai:gpt-4o-mini``, ``vllm:<model>@<url>``, ``hf:<path>``, ``python:module:attr``…). How the orchestrator
    plans is one :class:`~mas_orchestra.config.OrchestraConfig`; how runs are bounded and retried is one
    :class:`~mas_orchestra.settings.RunSettings`. With a ``checkpointer``, runs live on threads
    (``arun(question, thread_id=...)``) and resume where they stopped.

    Args:
        orchestrator: The model that writes the orchestration (default ``embedded``).
        subagent: The model the sub-agents call, or a pool ``{"fast": model, "strong": model}``: with more than
            one model, every agent gets a ``model`` parameter naming one (default the first, or
            ``config.subagent_defaults[kind]``).
        config: How the orchestrator plans: DoM, offered agents, constrained decoding and its grammar limits,
            prompt template, orchestrator budget and temperature, strictness, pool defaults, caps, plain replies,
            approval (default: its defaults).
        settings: The bounds, retries, concurrency and rate limit of every run (default: its defaults).
        search: A search backend for WebSearchAgent nodes; without one, the orchestrator is not offered that
            agent.
        registry: The agent registry (default: the built-in kinds and any registered ones).
        tools: LangChain tools (``@tool`` functions) offered through the ``ToolAgent`` kind: the prompt lists
            them, the orchestrator picks which tools each tool agent gets.
        mcp: MCP servers whose tools are offered the same way: a ``{"mcpServers": {...}}`` dict or JSON file;
            each server is started and its tools listed here.
        checkpointer: Any LangGraph checkpointer, a path to a SQLite file (opened for each run; needs the
            ``checkpoint`` extra) or a ``postgresql://`` URL (opened for each run, shared by any number of worker
            processes; needs the ``postgres`` extra; see :mod:`mas_orchestra.runtime.postgres`). With
            ``config.interrupt_before_execute``, each run pauses after orchestration (status ``interrupted``, the
            spec in ``Outcome.interrupt``) until ``arun(question, thread_id=..., resume=...)`` approves, edits or
            rejects it.

    Raises:
        TypeError: ``config`` is not an ``OrchestraConfig`` or ``settings`` not a ``RunSettings``.
        ConstrainedDecodingError: ``config.constrained=True`` and a backend cannot decode under a grammar.
        GrammarError: A registered kind has a parameter the grammar cannot express.
        PromptTemplateError: ``config.prompt`` is not a usable template folder.
        PoolError: ``config.subagent_defaults`` without a pool, or naming an unknown pool model.
        KeyError: ``config.agents`` names an unknown agent kind (the valid kinds are listed).
        McpServerError: An MCP server does not start or does not list its tools in time.
        ValueError: ``config.interrupt_before_execute`` without a checkpointer.

    Example:
        ```python
        orch = Orchestra("openai:gpt-4o-mini", "openai:gpt-4o-mini", config=OrchestraConfig(dom="low"),
                         settings=RunSettings(timeout=300))
        outcome = orch.run("How many r's are in strawberry?")
        print(outcome.status.value, outcome.answer, outcome.usage.cost_usd)
        ```
    """

    def __init__(
        self,
        orchestrator: Any = "embedded",
        subagent: Any = "embedded",
        *,
        config: OrchestraConfig | None = None,
        settings: RunSettings | None = None,
        search: Any = None,
        registry: AgentRegistry | None = None,
        tools: Iterable[Any] | None = None,
        mcp: Any = None,
        checkpointer: Any = None,
    ) -> None:
        if config is not None and not isinstance(config, OrchestraConfig):
            raise TypeError(f"config must be an OrchestraConfig, got {type(config).__name__}")
        #: How this Orchestra plans (see :class:`~mas_orchestra.config.OrchestraConfig`).
        self.config: OrchestraConfig = config or OrchestraConfig()
        config = self.config
        self.dom: Dom = config.dom
        self.strict = config.strict
        self.prompt_template = load_template(config.prompt, self.dom)  # a bad folder raises PromptTemplateError
        self.settings = RunSettings.of(settings)
        self.search = search
        if config.interrupt_before_execute and checkpointer is None:
            raise ValueError("interrupt_before_execute=True needs a checkpointer (e.g. checkpointer='runs.sqlite')")
        self.checkpointer = checkpointer
        self.interrupt_before_execute = config.interrupt_before_execute
        self.registry = offered_registry(registry, search=search, agents=config.agents)
        # Offered tools (MCP servers listed now, so one that does not start fails here) become the ToolAgent kind.
        self.tools: list[Any] = [*(tools or ()), *(load_mcp_tools(mcp, timeout=self.settings.call_timeout or
                                                                   DEFAULT_LIST_TIMEOUT) if mcp is not None else ())]
        self.registry = with_tools(self.registry, self.tools)
        # Model strings get the per-call timeout and the rate limiter at the HTTP client level.
        resolve = {"timeout": self.settings.call_timeout, "requests_per_second": self.settings.requests_per_second}
        self.orchestrator: Runnable = resolve_model(orchestrator, **resolve)
        pool = subagent if isinstance(subagent, Mapping) else {"default": subagent}
        if config.subagent_defaults and not isinstance(subagent, Mapping):
            raise PoolError("subagent_defaults needs a pool: subagent={'fast': ..., 'strong': ...}")
        #: The sub-agent models by pool name (one, named "default", when ``subagent`` is a single model).
        self.subagent_pool: dict[str, Runnable] = {
            name: self.orchestrator if model is orchestrator else resolve_model(model, **resolve)
            for name, model in pool.items()
        }
        self.registry = with_pool(self.registry, self.subagent_pool, config.subagent_defaults)
        # Sampling caps of the sub-agent models (the tightest over a pool: a node may run on any of them). The
        # uncapped registry reads text plans (so a value above a cap is capped with a warning, not refused); the
        # capped one is what the prompt lists, the grammar allows and the compiler builds from.
        self.caps: SamplingCaps = config.caps if config.caps is not None else tightest_caps(
            caps_for_model(model) for model in self.subagent_pool.values()
        )
        self._reading_registry = self.registry
        #: Step-by-step attempts asked as plain calls (see ``OrchestraConfig.plain_replies``).
        self.plain_replies: bool = config.plain_replies if config.plain_replies is not None else all(
            asks_plainly(model) for model in self.subagent_pool.values()
        )
        self.registry = capped_registry(self.registry, self.caps)
        self.subagent: Runnable = next(iter(self.subagent_pool.values()))
        self._orchestrator_kwargs: dict[str, Any] = {}
        if config.orchestrator_temperature is not None:
            self._orchestrator_kwargs["temperature"] = config.orchestrator_temperature
        # Constrained decoding: fail here, at construction, if a backend cannot do what was asked.
        orchestrator_mode = constraint_mode(config.constrained, self.orchestrator)
        pool_modes = {constraint_mode(config.constrained, model) for model in self.subagent_pool.values()}
        # A mixed pool under the default setting: constrain none (the default is on for local models only).
        subagent_mode = pool_modes.pop() if len(pool_modes) == 1 else "off"
        for model in list(self.subagent_pool.values())[1:]:
            reply_constrainer(subagent_mode, model)  # a pool model that cannot be constrained fails here too
        self.orchestration_constraint: OrchestrationConstraint | None = None
        self._orchestrator_call: Runnable = self.orchestrator
        max_tokens = config.orchestrator_max_tokens
        if orchestrator_mode != "off":
            limits = self._grammar_limits(config.grammar_limits)
            self.orchestration_constraint = OrchestrationConstraint(
                dom=self.dom, registry=self.registry, limits=limits, direct_answers=limits.direct_answer
            )
            self.orchestration_constraint.grammar()  # a kind the grammar cannot express raises GrammarError now
            if max_tokens is None:
                max_tokens = DEFAULT_CONSTRAINED_MAX_TOKENS
            self._orchestrator_call = bind_constraint(
                self.orchestrator, self.orchestration_constraint, max_tokens=max_tokens,
                fallback=orchestrator_mode == "fallback",
            )
        self.constrain_reply = reply_constrainer(subagent_mode, self.subagent)
        self.constrained = {"orchestrator": orchestrator_mode, "subagent": subagent_mode}
        if max_tokens is not None:
            self._orchestrator_kwargs["max_tokens"] = max_tokens

    # -- public API ---------------------------------------------------------------------------

    def prompt(self, question: str) -> str:
        """The orchestrator prompt for ``question`` as one text (see :meth:`messages`).

        Args:
            question: The task.

        Returns:
            The messages' contents joined by blank lines.
        """
        return "\n\n".join(m["content"] for m in self.messages(question))

    def messages(self, question: str) -> list[dict[str, str]]:
        """The orchestrator's chat messages for ``question`` (from this Orchestra's prompt template).

        Args:
            question: The task.

        Returns:
            ``{"role": "system" | "user", "content": ...}`` dicts, in order.
        """
        return orchestrator_messages(
            question, self.dom, registry=self.registry, prompt=self.prompt_template,
            model=model_name_of(self.subagent),
        )

    async def aorchestrate(self, question: str, *, callbacks: Any = None) -> str:
        """Only the orchestrator call: the raw orchestration text.

        Args:
            question: The task.
            callbacks: LangChain callbacks (or a callback manager) for the call.

        Returns:
            The orchestrator's reply text, unparsed.

        Raises:
            TypeError: ``question`` is not a string.
        """
        check_question(question)
        model = with_transient_retry(
            self._orchestrator_call, self.settings.max_retries, initial_delay=self.settings.retry_initial_delay
        )
        config: RunnableConfig = {"callbacks": callbacks, "tags": [ORCHESTRATOR_TAG], "run_name": "orchestrator"}
        messages = [
            SystemMessage(content=m["content"]) if m["role"] == "system" else HumanMessage(content=m["content"])
            for m in self.messages(question)
        ]
        reply = await model.ainvoke(messages, config, **self._orchestrator_kwargs)
        return message_text(reply)

    async def aplan(self, question: str) -> GraphSpec:
        """Orchestrate and parse: the spec the orchestrator wrote.

        Args:
            question: The task.

        Returns:
            The validated spec.

        Raises:
            SpecError: The orchestration is not a valid spec (every problem listed).
        """
        return self.parse(await self.aorchestrate(question))

    def plan(self, question: str) -> GraphSpec:
        """Synchronous :meth:`aplan` (not from inside a running event loop).

        Args:
            question: The task.

        Returns:
            The validated spec.

        Raises:
            SpecError: The orchestration is not a valid spec (every problem listed).
        """
        return run_sync(self.aplan(question))

    async def arun(
        self, question: str, *, callbacks: list[Any] | None = None, thread_id: str | None = None,
        resume: Any = NO_RESUME, fork_from: str | None = None,
    ) -> Outcome:
        """Orchestrate, compile and run; always returns an :class:`Outcome`.

        A bad orchestration, a failing sub-agent or a time-out is the outcome's status, not an exception.

        Args:
            question: The task.
            callbacks: LangChain callbacks added to every model call of the run.
            thread_id: With a checkpointer: the thread to start or resume (see :meth:`astream`).
            resume: With a checkpointer: the answer to an approval interrupt (see :meth:`astream`).
            fork_from: With a checkpointer: a thread whose orchestration this one starts from.

        Returns:
            The outcome: status, answer, node results, usage.

        Raises:
            ThreadMismatchError: Resuming a thread with another question or model set.
            CheckpointError: The checkpoint store cannot be used.
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
        resume: Any = NO_RESUME, fork_from: str | None = None,
    ) -> Outcome:
        """Synchronous :meth:`arun` (not from inside a running event loop).

        Args:
            question: The task.
            callbacks: LangChain callbacks added to every model call of the run.
            thread_id: With a checkpointer: the thread to start or resume.
            resume: With a checkpointer: the answer to an approval interrupt.
            fork_from: With a checkpointer: a thread whose orchestration this one starts from.

        Returns:
            The outcome: status, answer, node results, usage.

        Raises:
            ThreadMismatchError: Resuming a thread with another question or model set.
            CheckpointError: The checkpoint store cannot be used.
        """
        return run_sync(
            self.arun(question, callbacks=callbacks, thread_id=thread_id, resume=resume, fork_from=fork_from)
        )

    async def astream(
        self, question: str, *, callbacks: list[Any] | None = None, thread_id: str | None = None,
        resume: Any = NO_RESUME, fork_from: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield events: ``orchestration`` (text), ``spec``, ``node_start``/``node_end``, ``outcome``.

        Args:
            question: The task.
            callbacks: LangChain callbacks added to every model call of the run.
            thread_id: With a checkpointer, the run lives on this thread (a new id when None, in
                ``Outcome.thread_id``); an existing thread is resumed (see :class:`Orchestra`).
            resume: Answers an approval interrupt (``"approve"``, ``"reject"``, an edited spec; see
                :func:`mas_orchestra.runtime.pipeline.review_decision`).
            fork_from: Starts ``thread_id`` from another thread's orchestration, so its nodes run again with
                this Orchestra's models.

        Yields:
            Dicts with a ``type`` key; the last one is ``{"type": "outcome", "outcome": Outcome}``.

        Raises:
            ValueError: ``thread_id``, ``resume`` or ``fork_from`` without a checkpointer.
            ThreadMismatchError: Resuming with another question or model set.
            CheckpointError: The checkpoint store cannot be used.
        """
        check_question(question)
        durable = self.checkpointer is not None
        if not durable and (thread_id is not None or fork_from is not None or resume is not NO_RESUME):
            raise ValueError("thread_id / resume / fork_from need Orchestra(checkpointer=...)")
        run = RunRecord(question)
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
            # One session per stdio MCP server for the whole run, closed (its process stopped) when it ends.
            async with mcp_run_sessions():
                async for event in with_deadline(events, run, self.settings.timeout):
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
        """Parse and validate orchestration text the way this Orchestra does (its DoM, registry, strictness).

        A parameter above the sub-agent model's cap (:attr:`caps`) is brought down to it with a ``capped_param``
        warning, or, with ``strict``, makes the text invalid.

        Args:
            text: Orchestration text (or our JSON form).

        Returns:
            The validated spec.

        Raises:
            SpecError: The text is not a valid spec (every problem listed; with ``strict``, a parameter above a
                cap, naming node and parameter).
        """
        spec = parse_orchestration(text, dom=self.dom, registry=self._reading_registry, strict=self.strict)
        return apply_caps(spec, self._reading_registry, self.caps, strict=self.strict,
                          model=model_name_of(self.subagent))

    # -- internals ----------------------------------------------------------------------------

    def _grammar_limits(self, limits: GrammarLimits) -> GrammarLimits:
        """The grammar's bounds: ``limits`` with at most the caps' ``max_agents`` agents."""
        if self.caps.max_agents is not None and self.caps.max_agents < limits.max_agents:
            limits = replace(limits, max_agents=self.caps.max_agents)
        return limits

    async def _thread_events(
        self, run: RunRecord, child: Any, thread_id: str | None, resume: Any, fork_from: str | None
    ) -> AsyncIterator[dict[str, Any]]:
        async for event in thread_events(self, run, child, thread_id, resume, fork_from):
            yield event

    async def _events(self, run: RunRecord, child: Any) -> AsyncIterator[dict[str, Any]]:
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
            run.spec = self.parse(run.orchestration)
        except SpecError as exc:
            yield {"type": "outcome", "outcome": run.outcome(Status.INVALID_SPEC, error=str(exc))}
            return
        yield {"type": "spec", "spec": run.spec}
        async for event in execute_events(
            run, model=self.subagent, search=self.search, registry=self.registry, settings=self.settings,
            callbacks=[], parent=child, constrain_reply=self.constrain_reply, plain_replies=self.plain_replies,
        ):
            yield event

