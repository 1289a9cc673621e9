"""The end-to-end graph served by ``langgraph.json``: orchestrate → validate → approve → execute.

It is :func:`mas_orchestra.runtime.pipeline.build_pipeline` (each step a checkpointed node; the spec runs as a
checkpointed subgraph, so the server's thread state shows every node's result). Each run reads its
setup from ``config["configurable"]``, falling back to environment variables:

- ``orchestrator`` (``MAS_ORCHESTRATOR``): orchestrator model string, default ``embedded``;
- ``subagent`` (``MAS_SUBAGENT``): sub-agent model string, default ``embedded``;
- ``dom`` (``MAS_DOM``): ``high`` or ``low``;
- ``interrupt_before_execute`` (``MAS_APPROVAL``): ``true`` pauses for approval of the spec;
- ``max_retries``, ``max_concurrency``, ``call_timeout``, ``retry_initial_delay``, ``timeout``: the run's
  :class:`~mas_orchestra.settings.RunSettings` (numbers, as JSON configs carry them; validated once per setup).

``MAS_SEARCH`` (e.g. ``bm25:corpus.jsonl``) enables search nodes and ``MAS_MCP`` (an ``{"mcpServers": …}``
JSON file) offers its servers' tools to tool agents; both are read from the environment only, and so are
``python:`` model strings: a client of a served graph may pick models, not import code.

A model string from a run's config must also pass the server's :class:`~mas_orchestra.models.policy.ModelPolicy`
(:func:`served_model_policy`): ``embedded``, ``scripted:*``, the server's own ``$MAS_ORCHESTRATOR`` /
``$MAS_SUBAGENT`` and the comma-separated patterns of ``$MAS_SERVED_MODELS`` (e.g. ``openai:*``); ``hf:`` paths
need ``MAS_SERVED_ALLOW_HF_PATHS=1`` and ``vllm:`` URLs off this machine ``MAS_SERVED_ALLOW_REMOTE_VLLM=1``. A
``vllm:`` model from a config never gets ``$VLLM_API_KEY`` (its URL came from the client).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from agents.search import make_backend
from mas_orchestra import environment
from mas_orchestra.models.policy import ModelPolicy, keyless
from mas_orchestra.runtime import Orchestra
from mas_orchestra.runtime.pipeline import PipelineState, build_pipeline
from mas_orchestra.settings import RunSettings

__all__ = ["EndToEndState", "build_graph", "graph", "model_from_config", "orchestra_from_config", "served_model_policy"]

EndToEndState = PipelineState  # the state the served graph returns (kept under its former name)

# configurable values arrive as JSON (or strings from a form): each is read as the type its RunSettings field has.
_NUMBERS = {"max_retries": int, "max_concurrency": int, "call_timeout": float, "retry_initial_delay": float,
            "timeout": float}
_TRUE = {"1", "true", "yes", "on"}


def _configurable(config: RunnableConfig | None) -> Mapping[str, Any]:
    return (config or {}).get("configurable") or {}


def served_model_policy() -> ModelPolicy:
    """The models a run's config may name (see the module docstring), read from the environment now."""
    return ModelPolicy.with_extra(
        environment.items("MAS_SERVED_MODELS"), allow_hf_paths=environment.flag("MAS_SERVED_ALLOW_HF_PATHS"),
        allow_remote_vllm=environment.flag("MAS_SERVED_ALLOW_REMOTE_VLLM"),
        hints={"pattern": "MAS_SERVED_MODELS='{model}' (or a pattern such as '{prefix}:*') in the server's environment",
               "python": "a server-side $MAS_ORCHESTRATOR / $MAS_SUBAGENT", "vllm": "MAS_SERVED_ALLOW_REMOTE_VLLM=1",
               "hf": "MAS_SERVED_ALLOW_HF_PATHS=1"})


def model_from_config(config: RunnableConfig | None, key: str, env: str) -> str:
    """The model string a run asked for under ``configurable[key]``, else ``$env``, else ``embedded``.

    Args:
        config: The run's config.
        key: ``orchestrator`` or ``subagent``.
        env: The environment variable read when the config does not name one.

    Returns:
        The model string.

    Raises:
        ValueError: A value that is not a model string, a ``python:`` one (those import code, so only the
            server's environment may name them), or one the server's :func:`served_model_policy` refuses
            (:class:`~mas_orchestra.models.policy.ModelNotAllowedError`).
    """
    value = _configurable(config).get(key)
    if value is None:
        return environment.text(env, default="embedded") or "embedded"
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"configurable {key!r} must be a model string such as 'openai:gpt-4o-mini', got {value!r}")
    if value.strip().startswith("python:"):
        raise ValueError(
            f"configurable {key!r}: 'python:' model strings are not accepted from a run's config (they import "
            f"code); set {env} in the server's environment instead"
        )
    served_model_policy().check(f"configurable {key!r}", value)
    return value.strip()


def _setup_key(config: RunnableConfig | None) -> tuple[Any, ...]:
    conf = _configurable(config)
    dom = conf.get("dom") or environment.text("MAS_DOM", default="high")
    numbers = tuple((name, conf.get(name)) for name in sorted(_NUMBERS))
    return (
        model_from_config(config, "orchestrator", "MAS_ORCHESTRATOR"),
        model_from_config(config, "subagent", "MAS_SUBAGENT"),
        dom,
        numbers,
    )


_cache: dict[tuple[Any, ...], Orchestra] = {}
_lock = threading.Lock()


def orchestra_from_config(config: RunnableConfig | None) -> Orchestra:
    """The :class:`Orchestra` of a run's setup (built once per distinct setup, then reused).

    Args:
        config: The run's config; ``configurable`` may name models, ``dom`` and the ``RunSettings`` fields.

    Returns:
        The Orchestra (search and MCP come from ``MAS_SEARCH`` / ``MAS_MCP`` only).

    Raises:
        ValueError: A bad model string or a non-numeric setting.
    """
    key = _setup_key(config)
    with _lock:
        if key not in _cache:
            orchestrator, subagent, dom, numbers = key
            options: dict[str, Any] = {}
            for name, value in numbers:
                if value is not None:
                    try:
                        options[name] = _NUMBERS[name](value)
                    except (TypeError, ValueError):
                        raise ValueError(f"configurable {name!r} must be a number, got {value!r}") from None
            settings = RunSettings(**options)
            search_spec = environment.text("MAS_SEARCH")
            search = make_backend(search_spec, cache_path=environment.search_cache_path()) if search_spec else None
            mcp = environment.text("MAS_MCP")  # an MCP servers file: from the environment only, never config
            # A vllm: URL from the run's config gets no API key; the server's own (from its environment) does.
            conf = _configurable(config)
            models = [keyless(m, settings.call_timeout) if conf.get(name) is not None else m
                      for name, m in (("orchestrator", orchestrator), ("subagent", subagent))]
            _cache[key] = Orchestra(models[0], models[1], dom=dom, search=search, settings=settings, mcp=mcp)
        return _cache[key]


def approval_from_config(config: RunnableConfig | None) -> bool:
    """Whether a run pauses for approval: ``configurable["interrupt_before_execute"]`` or ``$MAS_APPROVAL``.

    Args:
        config: The run's config.

    Returns:
        True for ``True`` or a true-looking string (``1``, ``true``, ``yes`` …).
    """
    value = _configurable(config).get("interrupt_before_execute")
    if value is None:
        return environment.flag("MAS_APPROVAL")
    return value is True or str(value).strip().lower() in _TRUE


def build_graph(orchestra: Orchestra | None = None, *, checkpointer: Any = None) -> CompiledStateGraph:
    """The end-to-end graph around ``orchestra``, or around each run's configured setup when None.

    A LangGraph server attaches its own checkpointer; pass ``checkpointer`` to run it yourself with
    threads (``graph.invoke({"question": …}, {"configurable": {"thread_id": …}})``).

    Args:
        orchestra: A fixed Orchestra; ``None`` builds one per run from its config (see
            :func:`orchestra_from_config`).
        checkpointer: A LangGraph checkpointer.

    Returns:
        The compiled ``orchestrate → validate → approve → execute`` graph.
    """
    if orchestra is not None:
        fixed = orchestra

        def resolve(config: RunnableConfig) -> Orchestra:
            return fixed

        def approval(config: RunnableConfig) -> bool:
            return fixed.interrupt_before_execute or approval_from_config(config)
    else:
        resolve, approval = orchestra_from_config, approval_from_config
    return build_pipeline(resolve, checkpointer=checkpointer, approval=approval)


graph = build_graph()
