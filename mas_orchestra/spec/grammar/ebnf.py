"""The EBNF pieces every grammar is built from: literals, bounded free text, and parameter values.

Written in the dialect xgrammar and vLLM read. A parameter's value grammar is derived from its field in the
agent kind's ``Params`` model (type and bounds), so user-registered kinds get one too, or a
:class:`~mas_orchestra.errors.GrammarError` naming what cannot be expressed.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic.fields import FieldInfo

from mas_orchestra.errors import GrammarError
from mas_orchestra.registry import AgentKind, AgentRegistry, default_registry
from mas_orchestra.spec.limits import MAX_NODES

__all__ = [
    "GrammarLimits",
    "agent_id",
    "bounds_of",
    "lit",
    "offered_kinds",
    "params_grammar",
    "text_rule",
    "unwrap_optional",
]

_MAX_ENUMERATED = 256  # values of one numeric parameter written out as alternatives


@dataclass(frozen=True)
class GrammarLimits:
    """Bounds the grammar puts on what the orchestrator may write.

    Text bounds are characters; together they bound the orchestration's length, so choose
    ``max_new_tokens`` of the orchestrator call above the worst case (roughly one token per character of
    free text in the worst case, plus ~40 tokens of markup per agent).

    Attributes:
        max_agents: Most agents an orchestration may declare.
        thinking_chars: Characters of the plan (``<thinking>``).
        description_chars: Characters of an agent's description.
        input_chars: Characters of an agent's input.
        answer_chars: Characters of a direct answer.
        string_param_chars: Characters of a string parameter (a debate role).
        max_list_items: Items of a list parameter (debate roles), or its minimum when larger.
        direct_answer: A high-DoM orchestration may instead answer right after its thinking (no agents); the
            :class:`~mas_orchestra.runtime.Orchestra` grammar honours it, training's grammar never offers it, so
            evaluate a trained orchestrator with ``False``.
    """

    max_agents: int = 4
    thinking_chars: int = 300
    description_chars: int = 80
    input_chars: int = 300
    answer_chars: int = 200
    string_param_chars: int = 40
    max_list_items: int = 4  # list parameters (debate roles) get at most this many items, or their minimum
    direct_answer: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.max_agents <= MAX_NODES:
            raise ValueError(f"max_agents must be between 1 and {MAX_NODES}, got {self.max_agents}")
        for name in ("thinking_chars", "description_chars", "input_chars", "answer_chars", "string_param_chars",
                     "max_list_items"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def agent_id(k: int) -> str:
    """The canonical id of the k-th agent (1-based) in a constrained orchestration.

    Args:
        k: The agent's number.

    Returns:
        ``A<k>``.
    """
    return f"A{k}"


def lit(text: str) -> str:
    """An EBNF string literal.

    Args:
        text: The literal text.

    Returns:
        The quoted, escaped literal.
    """
    return json.dumps(text, ensure_ascii=False)


def _char_class(exclude: str) -> str:
    """An EBNF negated character class of ``exclude`` (escaped for the xgrammar/vLLM dialect)."""
    escapes = {"\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\-", "^": "\\^", "\n": "\\n", "\t": "\\t"}
    return "[^" + "".join(escapes.get(c, c) for c in exclude) + "]"


def text_rule(chars: int, *, exclude: str = "<", first_nonspace: bool = False, first_exclude: str = "") -> str:
    """Inline free text of at most ``chars`` characters, none of them in ``exclude``.

    Repetitions are written inline: xgrammar compiles a bounded repetition that sits in a rule of its own much
    more slowly.

    Args:
        chars: Most characters.
        exclude: Characters the text may not contain.
        first_nonspace: Make the text non-empty with a first character that is not whitespace (nor in
            ``first_exclude``).
        first_exclude: More characters the first one may not be (with ``first_nonspace``).
    """
    cls = _char_class(exclude)
    if not first_nonspace:
        return f"{cls}{{0,{chars}}}"
    head = _char_class(exclude + " \n\t" + first_exclude)
    return f"{head} {cls}{{0,{chars - 1}}}" if chars > 1 else head


def bounds_of(info: FieldInfo) -> dict[str, Any]:
    """The numeric and length bounds (``ge``, ``gt``, ``le``, ``lt``, ``min_length``, ``max_length``) of a field.

    Args:
        info: The pydantic field.
    """
    out: dict[str, Any] = {}
    for meta in info.metadata:
        for attr, cls in (("ge", Ge), ("gt", Gt), ("le", Le), ("lt", Lt), ("min_length", MinLen),
                          ("max_length", MaxLen)):
            if isinstance(meta, cls):
                out[attr] = getattr(meta, attr)
    return out


def unwrap_optional(annotation: Any) -> Any:
    """``X`` for ``X | None`` (``Optional[X]``), else the annotation unchanged.

    Args:
        annotation: A type annotation.
    """
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _string_bounds(annotation: Any) -> dict[str, Any]:
    """min/max length of an ``Annotated[str, StringConstraints(...)]`` (or plain str: none)."""
    out: dict[str, Any] = {}
    for meta in getattr(annotation, "__metadata__", ()):
        for attr in ("min_length", "max_length"):
            value = getattr(meta, attr, None)
            if value is not None:
                out[attr] = value
    return out


def _value_grammar(kind: AgentKind, name: str, info: FieldInfo, limits: GrammarLimits) -> str:
    """EBNF of a parameter's value as the orchestration text writes it (what the parser reads back)."""
    annotation = unwrap_optional(info.annotation)
    base = typing.get_origin(annotation) or annotation
    if base is typing.Annotated:
        base = typing.get_args(annotation)[0]
    bounds = bounds_of(info)

    def fail(why: str) -> GrammarError:
        return GrammarError(
            f"agent kind {kind.block!r}: parameter {name!r} {why}; the grammar cannot express it. "
            "Bound it in the kind's Params model, or turn constrained decoding off (constrained=False, "
            "--no-constrained)"
        )

    if base is bool:
        return '("true" | "false")'
    if base is int:
        lo = bounds.get("ge", bounds["gt"] + 1 if "gt" in bounds else None)
        hi = bounds.get("le", bounds["lt"] - 1 if "lt" in bounds else None)
        if lo is None or hi is None:
            raise fail("is an integer without both bounds (ge/le)")
        if hi - lo + 1 > _MAX_ENUMERATED:
            raise fail(f"allows {hi - lo + 1} integers (at most {_MAX_ENUMERATED} can be enumerated)")
        return "(" + " | ".join(lit(str(v)) for v in range(int(lo), int(hi) + 1)) + ")"
    if base is float:
        lo = bounds.get("ge", bounds.get("gt"))
        hi = bounds.get("le", bounds.get("lt"))
        if lo is None or hi is None:
            raise fail("is a float without both bounds")
        tenths = [t for t in range(round(lo * 10), round(hi * 10) + 1)
                  if ("gt" not in bounds or t / 10 > lo) and ("lt" not in bounds or t / 10 < hi)]
        if not tenths or len(tenths) > _MAX_ENUMERATED:
            raise fail(f"spans {len(tenths)} one-decimal values (1 to {_MAX_ENUMERATED} can be enumerated)")
        return "(" + " | ".join(lit(f"{t / 10:.1f}") for t in tenths) + ")"
    if base is str:
        sb = {**_string_bounds(annotation), **bounds}
        cap = min(int(sb.get("max_length", limits.string_param_chars)), limits.string_param_chars)
        # Written raw, read back as JSON when it parses as JSON: so no first character that starts a JSON
        # value (a digit, '-', a quote, a bracket, t/f/n of true/false/null).
        return text_rule(cap, exclude="<\n", first_nonspace=True, first_exclude='"[{0123456789-tfn')
    if base is Literal or (isinstance(base, type) and issubclass(base, enum.Enum)):
        values = list(typing.get_args(annotation)) if base is Literal else [m.value for m in base]  # type: ignore[union-attr]
        written = [v if isinstance(v, str) else json.dumps(v) for v in values]
        if not written or any("<" in w for w in written):
            raise fail("has no choices, or a choice containing '<'")
        return "(" + " | ".join(lit(w) for w in written) + ")"
    if base is list:
        (item,) = typing.get_args(unwrap_optional(info.annotation))[:1] or (None,)
        item_base = typing.get_origin(item) or item
        if item_base is typing.Annotated:
            item_base = typing.get_args(item)[0]
        if item_base is not str and item_base is not Literal:
            raise fail("is a list of something other than strings")
        lo = int(bounds.get("min_length", 0))
        hi = bounds.get("max_length")
        if hi is None:
            raise fail("is a list without max_length")
        hi = min(int(hi), max(lo, limits.max_list_items))
        ib = _string_bounds(item)
        cap = min(int(ib.get("max_length", limits.string_param_chars)), limits.string_param_chars)
        element = '"\\"" ' + text_rule(cap, exclude='<"\\\n', first_nonspace=True) + ' "\\""'
        if item_base is Literal:  # a closed set of names (offered tools): each one, quoted
            choices = [str(v) for v in typing.get_args(item)]
            element = "(" + " | ".join(lit(json.dumps(v)) for v in choices) + ")"
        if hi == 0:
            return '"[]"'
        more = f'(", " {element}){{{max(lo - 1, 0)},{int(hi) - 1}}}'
        body = f'"[" {element} {more} "]"'
        return body if lo >= 1 else f'("[]" | {body})'
    raise fail(f"has type {annotation!r}")


def params_grammar(kind: AgentKind, limits: GrammarLimits) -> str:
    """The grammar of a kind's ``<required_arguments>`` parameters, each within its caps.

    Args:
        kind: The agent kind (optional parameters become optional tags).
        limits: The caps on values.
    """
    parts: list[str] = []
    for name, info in kind.params.model_fields.items():
        tag = kind.xml_tag(name)
        piece = f'"\\n    <{tag}>" {_value_grammar(kind, name, info, limits)} "</{tag}>"'
        parts.append(piece if info.is_required() else f"({piece})?")
    return " ".join(parts)


def offered_kinds(registry: AgentRegistry | None) -> list[AgentKind]:
    """The registry's kinds, checked to be expressible (``GrammarError`` naming a kind and parameter if not).

    Args:
        registry: The registry (default: the default registry).

    Raises:
        GrammarError: The registry offers no kinds, or a kind's name cannot be a grammar rule name.
    """
    kinds = (registry or default_registry).kinds()
    if not kinds:
        raise GrammarError("the registry offers no agent kinds; nothing to orchestrate")
    for kind in kinds:
        if not re.fullmatch(r"[A-Za-z0-9_]+", kind.name):
            raise GrammarError(f"agent kind {kind.name!r}: its name cannot be used as a grammar rule name")
    return kinds
