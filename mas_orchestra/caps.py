"""Per-model caps on what a plan may ask of its sub-agents: sampling temperature, samples and rounds.

The blocks' own bounds (temperature ≤ 2.0, up to 20 self-consistency samples, 10 debate or reflexion rounds) are
the original system's, sized for API models. A 135M-parameter model does not survive them: at temperature 1.5 its
replies are token soup, and every extra sample or round is one more chance to drift. :class:`SamplingCaps` lowers
those bounds for one model:

* for a **constrained local orchestrator** the caps are part of the registry the grammar is generated from
  (:func:`capped_registry`), so a constrained plan cannot ask for more;
* a **text plan** that asks for more is brought down to the cap when it is read (:func:`apply_caps`), and each
  change is recorded as a ``capped_param`` :class:`~mas_orchestra.spec.SpecWarning` naming node and parameter;
  in strict mode it is a :class:`~mas_orchestra.errors.SpecError` instead.

A cap also lowers the parameter's default when the default is above it (the embedded model's self-consistency
runs 3 samples, not 5). Models without an entry in :data:`MODEL_CAPS` keep the original defaults and bounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

from pydantic import BaseModel, Field, create_model

from agents.base import Params, model_name_of
from agents.errors import MasOrchestraError
from mas_orchestra.errors import SpecError
from mas_orchestra.registry import AgentKind, AgentRegistry
from mas_orchestra.spec import GraphSpec
from mas_orchestra.spec.warnings import SpecWarning

__all__ = [
    "EMBEDDED_CAPS",
    "MODEL_CAPS",
    "NO_CAPS",
    "PLAIN_REPLY_MODELS",
    "SamplingCaps",
    "SamplingCapsError",
    "apply_caps",
    "asks_plainly",
    "capped_registry",
    "caps_for_model",
    "tightest_caps",
]


class SamplingCapsError(MasOrchestraError, ValueError):
    """A :class:`SamplingCaps` value that cannot be a cap (negative temperature, zero samples …)."""


@dataclass(frozen=True)
class SamplingCaps:
    """The most a plan may set for one sub-agent model; ``None`` leaves the block's own bound.

    Attributes:
        max_temperature: ``temperature`` of every agent kind that has one.
        max_samples: ``samples`` of self-consistency (``SCAgent``).
        max_debate_rounds: ``rounds`` of ``DebateAgent``.
        max_reflexion_rounds: ``rounds`` of ``ReflexionAgent``.
        max_agents: agents in a plan a constrained orchestrator may write (its grammar's
            :attr:`~mas_orchestra.spec.grammar.GrammarLimits.max_agents`; text plans are not cut).
        default_temperature: the ``temperature`` a node gets when its plan sets none (``None``: the block's own
            default, 0.5); must not exceed ``max_temperature``.
    """

    max_temperature: float | None = None
    max_samples: int | None = None
    max_debate_rounds: int | None = None
    max_reflexion_rounds: int | None = None
    max_agents: int | None = None
    default_temperature: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_temperature", "default_temperature"):
            t = getattr(self, name)
            if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
                                  or t < 0):
                raise SamplingCapsError(f"{name} must be a finite number >= 0, got {t!r}")
        if (self.default_temperature is not None and self.max_temperature is not None
                and self.default_temperature > self.max_temperature):
            raise SamplingCapsError(f"default_temperature {self.default_temperature} is above max_temperature "
                                    f"{self.max_temperature}")
        for name in ("max_samples", "max_debate_rounds", "max_reflexion_rounds", "max_agents"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise SamplingCapsError(f"{name} must be an integer >= 1 (or None for no cap), got {value!r}")

    def cap(self, kind: str, param: str) -> float | int | None:
        """The cap on parameter ``param`` of agent kind ``kind`` (canonical name), or ``None``.

        Args:
            kind: The agent kind's canonical name.
            param: The parameter (``temperature`` is capped for every kind).
        """
        if param == "temperature":
            return self.max_temperature
        return {("sc", "samples"): self.max_samples, ("debate", "rounds"): self.max_debate_rounds,
                ("reflexion", "rounds"): self.max_reflexion_rounds}.get((kind, param))

    def is_empty(self) -> bool:
        """True when nothing is capped or changed (the original defaults and bounds hold)."""
        return all(getattr(self, f.name) is None for f in fields(self))


#: No caps: the original system's defaults and bounds (API models and any model not in :data:`MODEL_CAPS`).
NO_CAPS = SamplingCaps()
#: The embedded SmolLM2-135M-Instruct: greedy unless a plan asks otherwise, at most temperature 1.0, few samples
#: and rounds. Above temperature 1.0 its replies turn to token soup; asked plainly it answered 4 of 6 short
#: questions greedy and 3 of 6 at 0.5; each extra sample or round costs seconds on a CPU and rarely helps.
#: Its plans are one agent (or a direct answer): with more, the 135M orchestrator wrote sub-tasks such as
#: "Combine ${A1} and ${A1}" and 3-4 agents for one-fact questions, each step losing the answer a plain call gives.
EMBEDDED_CAPS = SamplingCaps(max_temperature=1.0, max_samples=3, max_debate_rounds=2, max_reflexion_rounds=2,
                             max_agents=1, default_temperature=0.0)
#: Caps by model name as :func:`agents.base.model_name_of` reports it (lower-case; for a path, its last part).
MODEL_CAPS: dict[str, SamplingCaps] = {
    "embedded": EMBEDDED_CAPS,
    "smollm2-135m-instruct": EMBEDDED_CAPS,
    "huggingfacetb/smollm2-135m-instruct": EMBEDDED_CAPS,
}


def caps_for_model(model: Any) -> SamplingCaps:
    """The caps of a model (a chat model, a Runnable around one, or a model string); :data:`NO_CAPS` if unknown.

    Args:
        model: what :class:`~mas_orchestra.runtime.Orchestra` takes as a sub-agent model.

    Returns:
        The entry of :data:`MODEL_CAPS` for the model's name (or its path's last part), else :data:`NO_CAPS`.
    """
    for key in _names(model):
        if key in MODEL_CAPS:
            return MODEL_CAPS[key]
    return NO_CAPS


#: Models whose step-by-step attempts are asked as plain calls (the task alone, the reply read as the answer):
#: SmolLM2-135M answered 4 of 6 short questions asked plainly, 1 of 6 under the reply grammar and 2 of 6 with the
#: reply instructions (greedy; docs/guides/first-run.md).
PLAIN_REPLY_MODELS: frozenset[str] = frozenset(
    {"embedded", "smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct"}
)


def _names(model: Any) -> tuple[str, ...]:
    name = (model if isinstance(model, str) else model_name_of(model)).strip().lower()
    return name, name.rstrip("/").rsplit("/", 1)[-1], name.removeprefix("hf:")


def asks_plainly(model: Any) -> bool:
    """Whether a sub-agent model's step-by-step attempts are asked as plain calls (:data:`PLAIN_REPLY_MODELS`).

    Args:
        model: a chat model, a Runnable around one, or a model string.

    Returns:
        True for the embedded model (by name), False for any other.
    """
    return any(key in PLAIN_REPLY_MODELS for key in _names(model))


def tightest_caps(caps: Iterable[SamplingCaps]) -> SamplingCaps:
    """The smallest of each cap over several models (a node of a pool may run on any of them).

    Args:
        caps: The models' caps.
    """
    result = NO_CAPS
    for one in caps:
        updates = {}
        for f in fields(SamplingCaps):
            mine, theirs = getattr(result, f.name), getattr(one, f.name)
            if theirs is not None and (mine is None or theirs < mine):
                updates[f.name] = theirs
        result = replace(result, **updates)
    return result


def _upper_bound(info: Any) -> float | None:
    for meta in info.metadata:
        for attr in ("le", "lt"):
            value = getattr(meta, attr, None)
            if value is not None:
                return float(value)
    return None


def _narrowed_params(kind: AgentKind, caps: SamplingCaps) -> type[Params] | None:
    """``kind.params`` with each capped field's upper bound (and default, when above) lowered to its cap, and the
    temperature default set to ``caps.default_temperature`` where given."""
    overrides: dict[str, Any] = {}
    for name, info in kind.params.model_fields.items():
        cap = caps.cap(kind.name, name)
        new_default = caps.default_temperature if name == "temperature" else None
        if cap is None and new_default is None:
            continue
        bound = _upper_bound(info)
        if (cap is None or (bound is not None and bound <= cap)) and (new_default is None
                                                                       or new_default == info.default):
            continue
        cap = bound if cap is None or (bound is not None and bound < cap) else cap
        constraints: dict[str, Any] = {}
        for meta in info.metadata:
            for attr in ("ge", "gt"):
                if getattr(meta, attr, None) is not None:
                    constraints[attr] = getattr(meta, attr)
        default = info.default
        if new_default is not None and not info.is_required():
            default = new_default
        if not info.is_required() and isinstance(default, (int, float)) and not isinstance(default, bool):
            default = type(default)(min(default, cap)) if cap is not None else default
        field = Field(... if info.is_required() else default, le=cap, description=info.description, **constraints)
        overrides[name] = (info.annotation, field)
    if not overrides:
        return None
    base: type[BaseModel] = kind.params
    return create_model(  # type: ignore[call-overload, no-any-return]
        kind.params.__name__, __base__=base, __doc__=kind.params.__doc__, **overrides)  # type: ignore[arg-type]


def capped_registry(registry: AgentRegistry, caps: SamplingCaps) -> AgentRegistry:
    """A registry whose kinds' parameter models are bounded by ``caps`` (defaults above a cap become the cap).

    What the orchestration grammar, the prompt's parameter list and the compiler read from it all carry the
    caps. ``registry`` itself is not changed; with empty caps it is returned as it is.

    Args:
        registry: the offered agent kinds.
        caps: the sub-agent model's caps.

    Returns:
        A new registry with narrowed parameter models where a cap applies.
    """
    if caps.is_empty():
        return registry
    kinds = []
    for kind in registry.kinds():
        narrowed = _narrowed_params(kind, caps)
        kinds.append(kind if narrowed is None else replace(kind, params=narrowed))
    return AgentRegistry(kinds)


def apply_caps(spec: GraphSpec, registry: AgentRegistry, caps: SamplingCaps, *, strict: bool = False,
               model: str = "the sub-agent model") -> GraphSpec:
    """Bring every parameter of ``spec`` above a cap down to it, recording a ``capped_param`` warning each.

    Args:
        spec: a validated spec (read with the uncapped registry).
        registry: the registry the spec was read with (resolves node kinds).
        caps: the sub-agent model's caps.
        strict: a parameter above its cap is a :class:`SpecError` instead of a warning.
        model: the model's name, for the messages.

    Returns:
        ``spec`` itself when nothing is above a cap, else a copy with the capped values and the warnings added.

    Raises:
        SpecError: in strict mode, naming each node and parameter above its cap.
    """
    if caps.is_empty() or not spec.nodes:
        return spec
    warnings: list[SpecWarning] = []
    problems: list[str] = []
    nodes = []
    for node in spec.nodes:
        kind = registry.get(node.agent)
        params = dict(node.params)
        for name, value in node.params.items():
            cap = caps.cap(kind.name, name)
            if cap is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value <= cap:
                continue
            capped = type(value)(cap) if isinstance(value, int) and float(cap).is_integer() else cap
            params[name] = capped
            problems.append(f"agent {node.id!r} ({kind.block}): parameter {name!r} = {value} is above {model}'s "
                            f"cap {cap}; ask for at most {cap} or run with strict=False to have it capped")
            warnings.append(SpecWarning(
                kind="capped_param", location=f"agent {node.id}",
                message=f"{kind.block} parameter {name!r} = {value} is above {model}'s cap {cap}; runs with {capped}",
            ))
        nodes.append(node.model_copy(update={"params": params}) if params != node.params else node)
    if strict and problems:
        raise SpecError(problems)
    if not warnings:
        return spec
    return spec.model_copy(update={"nodes": nodes, "warnings": [*spec.warnings, *warnings]})
