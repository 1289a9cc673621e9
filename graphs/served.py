"""Graph factories exposed by ``langgraph.json``: baselines and the diamond example.

Each is a factory of the run's config (the LangGraph server calls it per run, with the run's context mirrored
into ``configurable``): the sub-agent model is the run's ``subagent`` (checked as the end-to-end graph checks it,
:func:`graphs.end_to_end.checked_model`), else ``$MAS_SUBAGENT``, else ``embedded``. A baseline runs one block
with no orchestrator, so it needs no :class:`~mas_orchestra.config.OrchestraConfig`. Compiled graphs are cached
per model string, so a server does not rebuild (or reload a local model) for every request.
"""

from __future__ import annotations

import functools

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from graphs.baselines import baseline_graph
from graphs.end_to_end import checked_model
from graphs.examples import example_spec
from mas_orchestra.compile import compile_spec

__all__ = ["cot", "debate", "diamond", "reflexion", "sc"]


@functools.lru_cache(maxsize=32)
def _baseline(kind: str, model: str) -> CompiledStateGraph:
    return baseline_graph(kind, model)


@functools.lru_cache(maxsize=8)
def _diamond(model: str) -> CompiledStateGraph:
    return compile_spec(example_spec("diamond"), model)


def _model(config: RunnableConfig | None) -> str:
    configurable = (config or {}).get("configurable") or {}
    return checked_model(configurable.get("subagent"), "subagent", "MAS_SUBAGENT")


def cot(config: RunnableConfig) -> CompiledStateGraph:
    """Chain-of-thought baseline on the run's sub-agent model.

    Args:
        config: The run's config; its ``subagent`` (else ``$MAS_SUBAGENT``) names the model.

    Returns:
        The compiled graph.
    """
    return _baseline("cot", _model(config))


def sc(config: RunnableConfig) -> CompiledStateGraph:
    """Self-consistency baseline on the run's sub-agent model.

    Args:
        config: The run's config; its ``subagent`` (else ``$MAS_SUBAGENT``) names the model.

    Returns:
        The compiled graph.
    """
    return _baseline("sc", _model(config))


def reflexion(config: RunnableConfig) -> CompiledStateGraph:
    """Reflexion baseline on the run's sub-agent model.

    Args:
        config: The run's config; its ``subagent`` (else ``$MAS_SUBAGENT``) names the model.

    Returns:
        The compiled graph.
    """
    return _baseline("reflexion", _model(config))


def debate(config: RunnableConfig) -> CompiledStateGraph:
    """Debate baseline on the run's sub-agent model.

    Args:
        config: The run's config; its ``subagent`` (else ``$MAS_SUBAGENT``) names the model.

    Returns:
        The compiled graph.
    """
    return _baseline("debate", _model(config))


def diamond(config: RunnableConfig) -> CompiledStateGraph:
    """The diamond example spec on the run's sub-agent model.

    Args:
        config: The run's config; its ``subagent`` (else ``$MAS_SUBAGENT``) names the model.

    Returns:
        The compiled graph.
    """
    return _diamond(_model(config))
