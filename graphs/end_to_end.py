"""The end-to-end graph served by ``langgraph.json``: orchestrate → validate → approve → execute.

It is :func:`mas_orchestra.runtime.pipeline.build_pipeline` (each step a checkpointed node; the spec runs as a
checkpointed subgraph, so the server's thread state shows every node's result). Each run reads its setup from
its LangGraph context, a :class:`ServedContext` (the graph's ``context_schema``; a LangGraph server validates a
run's ``context`` into it, and mirrors a client's ``configurable`` into it), falling back to environment
variables:

- ``orchestrator`` (``MAS_ORCHESTRATOR``): orchestrator model string, default ``embedded``;
- ``subagent`` (``MAS_SUBAGENT``): sub-agent model string, default ``embedded``;
- ``config``: the :class:`~mas_orchestra.config.OrchestraConfig`; its ``dom`` (``MAS_DOM``) and
  ``interrupt_before_execute`` (``MAS_APPROVAL``: pause for approval of the spec) fall back to the environment
  when the context does not set them;
- ``settings``: the run's :class:`~mas_orchestra.settings.RunSettings`.

An unknown key or a value of the wrong type is a ``pydantic.ValidationError`` naming the field.
``MAS_SEARCH`` (e.g. ``bm25:corpus.jsonl``) enables search nodes and ``MAS_MCP`` (an ``{"mcpServers": …}``
JSON file) offers its servers' tools to tool agents; both are read from the environment only, and so are
``python:`` model strings and prompt template folders: a client of a served graph may pick models, not import
code or read the server's files.

A model string from a run's context must also pass the server's :class:`~mas_orchestra.models.policy.ModelPolicy`
(:func:`served_model_policy`): ``embedded``, ``scripted:*``, the server's own ``$MAS_ORCHESTRATOR`` /
``$MAS_SUBAGENT`` and the comma-separated patterns of ``$MAS_SERVED_MODELS`` (e.g. ``openai:*``); ``hf:`` paths
need ``MAS_SERVED_ALLOW_HF_PATHS=1`` and ``vllm:`` URLs off this machine ``MAS_SERVED_ALLOW_REMOTE_VLLM=1``. A
``vllm:`` model from a context never gets ``$VLLM_API_KEY`` (its URL came from the client).
"""

from __future__ import annotations

import threading
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from agents.search import make_backend
from mas_orchestra import environment
from mas_orchestra.config import OrchestraConfig
from mas_orchestra.models.policy import ModelPolicy, keyless
from mas_orchestra.runtime import Orchestra
from mas_orchestra.runtime.pipeline import PipelineState, build_pipeline
from mas_orchestra.settings import RunSettings

__all__ = [
    "EndToEndState",
    "ServedContext",
    "approval_from_context",
    "build_graph",
    "checked_model",
    "graph",
    "orchestra_from_context",
    "served_model_policy",
]

EndToEndState = PipelineState  # the state the served graph returns (kept under its former name)


class ServedContext(BaseModel):
    """The LangGraph context of a served run: models, how the orchestrator plans, and the run's settings.

    Frozen; an unknown key or a value of the wrong type raises ``pydantic.ValidationError`` naming the field.

    Example:
        ```python
        await graph.ainvoke({"question": "2+3?"}, context={"subagent": "openai:gpt-4o-mini",
                                                           "config": {"dom": "low"}, "settings": {"timeout": 60}})
        ```
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    orchestrator: StrictStr | None = Field(
        default=None, description="Orchestrator model string; None: $MAS_ORCHESTRATOR, else embedded.")
    subagent: StrictStr | None = Field(
        default=None, description="Sub-agent model string; None: $MAS_SUBAGENT, else embedded.")
    config: OrchestraConfig = Field(
        default_factory=OrchestraConfig,
        description="How the orchestrator plans; dom and interrupt_before_execute not set here come from "
                    "$MAS_DOM and $MAS_APPROVAL.")
    settings: RunSettings = Field(default_factory=RunSettings, description="Bounds and retries of the run.")


def _context(context: ServedContext | None) -> ServedContext:
    if context is None:
        return ServedContext()
    if not isinstance(context, ServedContext):  # build_graph's context_schema validates a dict before any node
        raise TypeError(f"the served graph's context must be a ServedContext, got {type(context).__name__}")
    return context


def served_model_policy() -> ModelPolicy:
    """The models a run's context may name (see the module docstring), read from the environment now."""
    return ModelPolicy.with_extra(
        environment.items("MAS_SERVED_MODELS"), allow_hf_paths=environment.flag("MAS_SERVED_ALLOW_HF_PATHS"),
        allow_remote_vllm=environment.flag("MAS_SERVED_ALLOW_REMOTE_VLLM"),
        hints={"pattern": "MAS_SERVED_MODELS='{model}' (or a pattern such as '{prefix}:*') in the server's environment",
               "python": "a server-side $MAS_ORCHESTRATOR / $MAS_SUBAGENT", "vllm": "MAS_SERVED_ALLOW_REMOTE_VLLM=1",
               "hf": "MAS_SERVED_ALLOW_HF_PATHS=1"})


def checked_model(value: Any, key: str, env: str) -> str:
    """The model string a run asked for under ``key``, else ``$env``, else ``embedded``.

    Args:
        value: The run's value (``None``: not given).
        key: ``orchestrator`` or ``subagent``.
        env: The environment variable read when the run does not name one.

    Returns:
        The model string.

    Raises:
        ValueError: A value that is not a model string, a ``python:`` one (those import code, so only the
            server's environment may name them), or one the server's :func:`served_model_policy` refuses
            (:class:`~mas_orchestra.models.policy.ModelNotAllowedError`).
    """
    if value is None:
        return environment.text(env, default="embedded") or "embedded"
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"context {key!r} must be a model string such as 'openai:gpt-4o-mini', got {value!r}")
    if value.strip().startswith("python:"):
        raise ValueError(
            f"context {key!r}: 'python:' model strings are not accepted from a run's context (they import "
            f"code); set {env} in the server's environment instead"
        )
    served_model_policy().check(f"context {key!r}", value)
    return value.strip()


def _served_config(context: ServedContext) -> OrchestraConfig:
    """The context's config with ``dom`` / ``interrupt_before_execute`` from the environment where not set."""
    config = context.config
    if config.prompt is not None:
        raise ValueError("context config.prompt: prompt template folders are not accepted from a run's context "
                         "(they read the server's files)")
    given = config.model_fields_set
    update: dict[str, Any] = {}
    if "dom" not in given:
        update["dom"] = environment.text("MAS_DOM", default="high") or "high"
    if "interrupt_before_execute" not in given:
        update["interrupt_before_execute"] = environment.flag("MAS_APPROVAL")
    # model_validate, not model_copy: a bad $MAS_DOM is a ValidationError too.
    return OrchestraConfig.model_validate({**config.model_dump(), **update}) if update else config


_cache: dict[tuple[Any, ...], Orchestra] = {}
_lock = threading.Lock()


def orchestra_from_context(context: ServedContext | None) -> Orchestra:
    """The :class:`Orchestra` of a run's setup (built once per distinct setup, then reused).

    Args:
        context: The run's context (``None``: every value from the environment or its default).

    Returns:
        The Orchestra (search and MCP come from ``MAS_SEARCH`` / ``MAS_MCP`` only; approval is the graph's,
        see :func:`approval_from_context`).

    Raises:
        ValueError: A bad model string, a prompt folder, or a bad ``$MAS_DOM``.
    """
    context = _context(context)
    orchestrator = checked_model(context.orchestrator, "orchestrator", "MAS_ORCHESTRATOR")
    subagent = checked_model(context.subagent, "subagent", "MAS_SUBAGENT")
    # Approval is decided per run by the graph (the server supplies the checkpointer), not by the Orchestra.
    config = _served_config(context).model_copy(update={"interrupt_before_execute": False})
    key = (orchestrator, subagent, config.model_dump_json(), context.settings.model_dump_json(),
           context.orchestrator is not None, context.subagent is not None)
    with _lock:
        if key not in _cache:
            settings = context.settings
            search_spec = environment.text("MAS_SEARCH")
            search = make_backend(search_spec, cache_path=environment.search_cache_path()) if search_spec else None
            mcp = environment.text("MAS_MCP")  # an MCP servers file: from the environment only, never a context
            # A vllm: URL from the run's context gets no API key; the server's own (from its environment) does.
            models = [keyless(m, settings.call_timeout) if given else m
                      for m, given in ((orchestrator, context.orchestrator is not None),
                                       (subagent, context.subagent is not None))]
            _cache[key] = Orchestra(models[0], models[1], config=config, settings=settings, search=search, mcp=mcp)
        return _cache[key]


def approval_from_context(context: ServedContext | None) -> bool:
    """Whether a run pauses for approval: ``config.interrupt_before_execute`` of its context, else ``$MAS_APPROVAL``.

    Args:
        context: The run's context.

    Returns:
        Whether the run pauses before execution.
    """
    return _served_config(_context(context)).interrupt_before_execute


def build_graph(orchestra: Orchestra | None = None, *, checkpointer: Any = None) -> CompiledStateGraph:
    """The end-to-end graph around ``orchestra``, or around each run's context when None.

    A LangGraph server attaches its own checkpointer; pass ``checkpointer`` to run it yourself with
    threads (``graph.invoke({"question": …}, {"configurable": {"thread_id": …}}, context={...})``).

    Args:
        orchestra: A fixed Orchestra; ``None`` builds one per run from its :class:`ServedContext` (see
            :func:`orchestra_from_context`).
        checkpointer: A LangGraph checkpointer.

    Returns:
        The compiled ``orchestrate → validate → approve → execute`` graph, whose ``context_schema`` is
        :class:`ServedContext`.
    """
    if orchestra is not None:
        fixed = orchestra

        def resolve(context: ServedContext | None) -> Orchestra:
            return fixed

        def approval(context: ServedContext | None) -> bool:
            return fixed.interrupt_before_execute or approval_from_context(context)
    else:
        resolve, approval = orchestra_from_context, approval_from_context
    return build_pipeline(resolve, checkpointer=checkpointer, approval=approval, context_schema=ServedContext)


graph = build_graph()
