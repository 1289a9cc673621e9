"""Single-agent baselines (the paper's CoT / SC / Debate / Reflexion / Search rows) as compiled graphs."""

from __future__ import annotations

from typing import Any

from langgraph.graph.state import CompiledStateGraph

from mas_orchestra.builtin_kinds import BASELINE_KINDS
from mas_orchestra.compile import compile_spec
from mas_orchestra.registry import BASELINE_DEBATE_ROLES, default_registry
from mas_orchestra.spec import GraphSpec, spec_from_data

__all__ = ["BASELINES", "DEFAULT_DEBATE_ROLES", "baseline_graph", "baseline_spec"]

BASELINES: tuple[str, ...] = BASELINE_KINDS  # defined with the agent kinds (the eval, a layer below, needs them)
DEFAULT_DEBATE_ROLES = list(BASELINE_DEBATE_ROLES)


def baseline_spec(kind: str, **params: Any) -> GraphSpec:
    """A one-node spec running ``kind`` on the whole question (low DoM, delegated as is).

    Args:
        kind: A registered agent kind (``cot``, ``sc``, ``reflexion``, ``debate``, ``search`` or an alias).
        **params: The kind's parameters (debate gets two default roles unless ``roles`` is given).

    Returns:
        The validated spec.

    Raises:
        KeyError: An unknown kind (the message lists the valid ones).
        SpecError: A parameter the kind does not take, or out of its bounds.
    """
    agent = default_registry.get(kind)
    if agent.name == "debate":
        params.setdefault("roles", list(DEFAULT_DEBATE_ROLES))
    return spec_from_data(
        {"dom": "low", "nodes": [{"id": agent.name, "agent": agent.name, "input": "", "params": params}]}
    )


def baseline_graph(kind: str, model: Any, *, search: Any = None, **compile_options: Any) -> CompiledStateGraph:
    """Compile the baseline for ``kind``; invoke with ``{"question": …}``, read ``final_answer``.

    Args:
        kind: A registered agent kind.
        model: The sub-agent model (a chat model or a model string).
        search: The search backend (needed by ``search``).
        **compile_options: ``params`` (the kind's parameters) and any keyword of
            :func:`~mas_orchestra.compile.compile_spec`.

    Returns:
        The compiled graph.

    Raises:
        KeyError: An unknown kind.
        SpecError: Bad parameters.
        CompileError: ``search`` without a search backend.
    """
    params = compile_options.pop("params", {})
    return compile_spec(baseline_spec(kind, **params), model, search=search, **compile_options)
