"""What an orchestrator is offered beyond the built-in kinds: the user's tools and a pool of sub-agent models.

Both are written into the agent registry, the single source the prompt, the grammar, the validator and the
JSON schema read:

* :func:`with_tools` adds the ``ToolAgent`` kind: its description lists each offered tool's name and
  description, and its ``tools`` parameter is a bounded list of ``Literal`` tool names — so the prompt shows
  the tools, the grammar enumerates them and the validator rejects an invented name with the valid list;
* :func:`with_pool` gives every kind a ``model`` parameter, a ``Literal`` of the pool's names (default the
  first, or a per-kind default — the original's per-agent-kind sampler map), and the kind carries the pool so
  that the compiler runs each node on the model it names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field, create_model

from agents.base import Params
from agents.tools import ToolAgent, ToolParams, as_toolset
from agents.tools.agent import MAX_TOOLS, describe_tool
from mas_orchestra.errors import MasOrchestraError
from mas_orchestra.registry import AgentKind, AgentRegistry, BuildContext, default_registry

__all__ = ["POOL_PARAM", "TOOL_KIND", "PoolError", "subagent_from_args", "with_pool", "with_tools"]

#: The parameter that picks a pool model.
POOL_PARAM = "model"
#: The canonical name of the tool agent kind.
TOOL_KIND = "tools"
_POOL_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,39}")


class PoolError(MasOrchestraError, ValueError):
    """A sub-agent model pool cannot be used as given (a bad or unknown name); lists the valid names."""


def with_tools(registry: AgentRegistry | None, tools: Iterable[Any] | None) -> AgentRegistry:
    """``registry`` plus the ``ToolAgent`` kind over ``tools`` (LangChain tools, MCP tools, functions).

    Args:
        registry: The kinds offered so far.
        tools: The tools; their names become the values the kind's ``tools`` parameter may take.

    Returns:
        A new registry, or ``registry`` unchanged without tools (no tool agent is offered).
    """
    base = registry or default_registry
    toolset = as_toolset(tools)
    if not toolset:
        return base
    names = tuple(toolset)
    if len(names) > MAX_TOOLS:
        raise PoolError(f"{len(names)} tools offered; at most {MAX_TOOLS} can be offered to the orchestrator")
    choice = Literal[names]  # type: ignore[valid-type]
    params = create_model(
        "OfferedToolParams", __base__=ToolParams,
        tools=(list[choice], Field(default=list(names), min_length=1, max_length=len(names),
                                   description="The tools this agent may call, by name")),
    )
    listing = "\n".join(describe_tool(tool) for tool in toolset.values())

    def build(model: Any, p: Params, ctx: BuildContext) -> ToolAgent:
        chosen = [toolset[name] for name in dict.fromkeys(p.tools)]  # type: ignore[attr-defined]
        return ToolAgent(model, chosen, max_turns=p.max_turns, temperature=p.temperature,  # type: ignore[attr-defined]
                         settings=ctx.settings)

    kind = AgentKind(
        name=TOOL_KIND,
        block="ToolAgent",
        description="Tool use: calls the tools you give it (computations, look-ups, the user's systems) over "
        "several turns and answers from their results. Use it when a step needs a tool below. Tools:\n" + listing,
        params=params,
        factory=build,
        aliases=("ToolUse", "tool_agent", "tool"),
    )
    out = base.copy()
    out.add(kind, replace=True)
    return out


def _check_pool_name(name: Any) -> str:
    if not isinstance(name, str) or not _POOL_NAME_RE.fullmatch(name) or name in ("true", "false", "null"):
        raise PoolError(
            f"pool name {name!r}: use 1-40 letters, digits, '_', '.' or '-', starting with a letter (e.g. 'fast')"
        )
    return name


def with_pool(
    registry: AgentRegistry | None, pool: Mapping[str, Any], defaults: Mapping[str, str] | None = None
) -> AgentRegistry:
    """``registry`` with a ``model`` parameter on every kind, choosing among ``pool`` (name -> model).

    Args:
        registry: The kinds offered so far.
        pool: Pool name → model.
        defaults: Agent kind (any of its names) → the pool name its nodes use when the orchestrator names
            none (else the pool's first).

    Returns:
        A new registry, or ``registry`` unchanged for a pool of one model (no parameter needed).

    Raises:
        PoolError: A default naming an unknown kind or pool model.
    """
    base = registry or default_registry
    names = tuple(_check_pool_name(name) for name in pool)
    if not names:
        raise PoolError("the sub-agent model pool is empty; give at least one name -> model")
    for kind_name, model_name in (defaults or {}).items():
        if kind_name not in base:
            kinds = ", ".join(base.block_names())
            raise PoolError(f"pool default for unknown agent kind {kind_name!r}; kinds: {kinds}")
        if model_name not in pool:
            valid = ", ".join(names)
            raise PoolError(f"pool default {kind_name!r} -> {model_name!r}: no such pool model; valid: {valid}")
    if len(names) == 1:
        return base
    per_kind = {base.get(k).name: v for k, v in (defaults or {}).items()}
    choice = Literal[names]  # type: ignore[valid-type]
    models = tuple(pool.items())
    out = AgentRegistry()
    for kind in base.kinds():
        if POOL_PARAM in kind.params.model_fields:
            raise PoolError(f"agent kind {kind.block!r} already has a parameter {POOL_PARAM!r}; it cannot be pooled")
        field_definitions: dict[str, Any] = {POOL_PARAM: (choice, Field(
            default=per_kind.get(kind.name, names[0]), description=f"Which sub-agent model runs it: {', '.join(names)}"
        ))}
        params = create_model(f"{kind.params.__name__}WithModel", __base__=kind.params, **field_definitions)
        out.add(AgentKind(
            name=kind.name, block=kind.block, description=kind.description, params=params,
            factory=_without_pool_param(kind), aliases=kind.aliases, xml_tags=kind.xml_tags,
            needs_search=kind.needs_search, models=models,
        ))
    return out


def _without_pool_param(kind: AgentKind) -> Any:
    """The kind's own factory, given its own parameters (the pool choice is the compiler's)."""

    def build(model: Any, params: Params, ctx: BuildContext) -> Any:
        own = kind.params.model_validate(params.model_dump(exclude={POOL_PARAM}))
        return kind.factory(model, own, ctx)

    return build


def subagent_from_args(values: Iterable[str] | None, default: str = "embedded") -> str | dict[str, str]:
    """What repeated ``--subagent`` options mean: one model string, or a pool from ``name=model`` items.

    ``["openai:gpt-4o-mini"]`` is one model; ``["fast=openai:gpt-4o-mini", "strong=anthropic:claude-sonnet-4-5"]``
    a pool (the first is the default). Mixing the forms, or a name given twice, raises :class:`PoolError`.

    Args:
        values: The ``--subagent`` values.
        default: The model when none is given.

    Returns:
        One model string, or a pool ``{name: model}``.

    Raises:
        PoolError: Mixed forms, or a name given twice.
    """
    items = [v.strip() for v in (values or []) if v.strip()]
    if not items:
        return default
    named = [v for v in items if "=" in v and _POOL_NAME_RE.fullmatch(v.split("=", 1)[0])]
    if not named and len(items) == 1:
        return items[0]
    if len(named) != len(items):
        raise PoolError(
            f"--subagent {' '.join(items)}: give one model, or a pool as repeated NAME=MODEL "
            "(e.g. --subagent fast=openai:gpt-4o-mini --subagent strong=anthropic:claude-sonnet-4-5)"
        )
    pool: dict[str, str] = {}
    for item in named:
        name, model = item.split("=", 1)
        if name in pool:
            raise PoolError(f"--subagent: pool name {name!r} given twice")
        pool[_check_pool_name(name)] = model.strip()
    return pool
