"""Grammars whose every sentence is a valid orchestration (or a well-formed sub-agent reply).

Constrained decoding makes even a 135M-parameter orchestrator write something the parser accepts: at each
step the model may only pick tokens that keep the text inside the grammar. The grammars are generated from
the agent registry (so user-registered kinds and their parameters are included) in the EBNF dialect that
xgrammar and vLLM read, and as a JSON schema for APIs that only take ``response_format``.

How far the grammar goes into the validator's rules (DESIGN §3):

* ids are canonical: the k-th agent is ``A<k>`` — unique by construction;
* agent names are the offered block names, parameters are written with their tags and values within their
  caps (integers and one-decimal floats enumerated, strings bounded, debate roles a JSON list of >= 2);
* edges run only from an earlier to a later agent (acyclic, no self-loops), are listed sorted (no
  duplicates), and every agent but the last has an outgoing edge — so the last agent is the one sink and
  every agent reaches it;
* ``${A<j>}`` in agent k's input may only name an earlier agent (j < k);
* text fields exclude ``<`` (no format markup) and are bounded in length (see :class:`GrammarLimits`).

One rule a context-free grammar cannot carry: "``${X}`` in Y's input needs an edge path X -> Y" (the edges
come after the inputs, and which earlier ids an input used would have to be remembered). Local decoding
(``embedded`` / ``hf:`` models, training rollouts with transformers) closes it by running in **stages**
(:class:`~mas_orchestra.constraints.OrchestrationConstraint`): :func:`thinking_grammar`, then
:func:`agent_stage_grammar` agent by agent, then :func:`edge_grammar`, built from what the agents wrote, which
requires an edge X -> Y for every ``${X}`` in Y. Each stage is also fitted to the tokens left, so the whole
orchestration is complete within the call's token budget. Single-request backends (a vLLM server, JSON
schema APIs) get the one-piece :func:`orchestration_grammar`; there the validator stays the judge of that
one rule (an ``invalid_spec`` outcome names the missing edge).

Nothing here imports xgrammar or torch: grammars are plain strings.
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
from mas_orchestra.spec import MAX_NODES

__all__ = [
    "EDGE_MARKER",
    "REPLY_CLOSE",
    "REPLY_END",
    "GrammarLimits",
    "agent_id",
    "agent_markup_chars",
    "agent_stage_grammar",
    "agent_text_chars",
    "edge_grammar",
    "edges_chars",
    "orchestration_grammar",
    "orchestration_json_schema",
    "references_by_agent",
    "reply_closing_grammar",
    "reply_grammar",
    "reply_json_schema",
    "thinking_grammar",
]

#: Where the agents end and the edge block begins (in staged decoding, where the edge grammar takes over).
EDGE_MARKER = "\n<edge>"
_MAX_ENUMERATED = 256  # values of one numeric parameter written out as alternatives


@dataclass(frozen=True)
class GrammarLimits:
    """Bounds the grammar puts on what the orchestrator may write.

    Text bounds are characters; together they bound the orchestration's length, so choose
    ``max_new_tokens`` of the orchestrator call above the worst case (roughly one token per character of
    free text in the worst case, plus ~40 tokens of markup per agent).
    """

    max_agents: int = 4
    thinking_chars: int = 300
    description_chars: int = 80
    input_chars: int = 300
    answer_chars: int = 200
    string_param_chars: int = 40
    max_list_items: int = 4  # list parameters (debate roles) get at most this many items, or their minimum

    def __post_init__(self) -> None:
        if not 1 <= self.max_agents <= MAX_NODES:
            raise ValueError(f"max_agents must be between 1 and {MAX_NODES}, got {self.max_agents}")
        for name in ("thinking_chars", "description_chars", "input_chars", "answer_chars", "string_param_chars",
                     "max_list_items"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def agent_id(k: int) -> str:
    """The canonical id of the k-th agent (1-based) in a constrained orchestration."""
    return f"A{k}"


def _lit(text: str) -> str:
    """An EBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


def _char_class(exclude: str) -> str:
    """An EBNF negated character class of ``exclude`` (escaped for the xgrammar/vLLM dialect)."""
    escapes = {"\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\-", "^": "\\^", "\n": "\\n", "\t": "\\t"}
    return "[^" + "".join(escapes.get(c, c) for c in exclude) + "]"


def _text(chars: int, *, exclude: str = "<", first_nonspace: bool = False, first_exclude: str = "") -> str:
    """Inline free text of at most ``chars`` characters, none of them in ``exclude``.

    ``first_nonspace`` makes the text non-empty with a first character that is not whitespace (nor in
    ``first_exclude``). Repetitions are written inline: xgrammar compiles a bounded repetition that sits
    in a rule of its own much more slowly.
    """
    cls = _char_class(exclude)
    if not first_nonspace:
        return f"{cls}{{0,{chars}}}"
    head = _char_class(exclude + " \n\t" + first_exclude)
    return f"{head} {cls}{{0,{chars - 1}}}" if chars > 1 else head


# -- parameter values ------------------------------------------------------------------------------------


def _bounds(info: FieldInfo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for meta in info.metadata:
        for attr, cls in (("ge", Ge), ("gt", Gt), ("le", Le), ("lt", Lt), ("min_length", MinLen),
                          ("max_length", MaxLen)):
            if isinstance(meta, cls):
                out[attr] = getattr(meta, attr)
    return out


def _unwrap_optional(annotation: Any) -> Any:
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
    annotation = _unwrap_optional(info.annotation)
    base = typing.get_origin(annotation) or annotation
    if base is typing.Annotated:
        base = typing.get_args(annotation)[0]
    bounds = _bounds(info)

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
        return "(" + " | ".join(_lit(str(v)) for v in range(int(lo), int(hi) + 1)) + ")"
    if base is float:
        lo = bounds.get("ge", bounds.get("gt"))
        hi = bounds.get("le", bounds.get("lt"))
        if lo is None or hi is None:
            raise fail("is a float without both bounds")
        tenths = [t for t in range(round(lo * 10), round(hi * 10) + 1)
                  if ("gt" not in bounds or t / 10 > lo) and ("lt" not in bounds or t / 10 < hi)]
        if not tenths or len(tenths) > _MAX_ENUMERATED:
            raise fail(f"spans {len(tenths)} one-decimal values (1 to {_MAX_ENUMERATED} can be enumerated)")
        return "(" + " | ".join(_lit(f"{t / 10:.1f}") for t in tenths) + ")"
    if base is str:
        sb = {**_string_bounds(annotation), **bounds}
        cap = min(int(sb.get("max_length", limits.string_param_chars)), limits.string_param_chars)
        # Written raw, read back as JSON when it parses as JSON: so no first character that starts a JSON
        # value (a digit, '-', a quote, a bracket, t/f/n of true/false/null).
        return _text(cap, exclude="<\n", first_nonspace=True, first_exclude='"[{0123456789-tfn')
    if base is Literal or (isinstance(base, type) and issubclass(base, enum.Enum)):
        values = list(typing.get_args(annotation)) if base is Literal else [m.value for m in base]  # type: ignore[union-attr]
        written = [v if isinstance(v, str) else json.dumps(v) for v in values]
        if not written or any("<" in w for w in written):
            raise fail("has no choices, or a choice containing '<'")
        return "(" + " | ".join(_lit(w) for w in written) + ")"
    if base is list:
        (item,) = typing.get_args(_unwrap_optional(info.annotation))[:1] or (None,)
        item_base = typing.get_origin(item) or item
        if item_base is typing.Annotated:
            item_base = typing.get_args(item)[0]
        if item_base is not str:
            raise fail("is a list of something other than strings")
        lo = int(bounds.get("min_length", 0))
        hi = bounds.get("max_length")
        if hi is None:
            raise fail("is a list without max_length")
        hi = min(int(hi), max(lo, limits.max_list_items))
        ib = _string_bounds(item)
        cap = min(int(ib.get("max_length", limits.string_param_chars)), limits.string_param_chars)
        element = '"\\"" ' + _text(cap, exclude='<"\\\n', first_nonspace=True) + ' "\\""'
        if hi == 0:
            return '"[]"'
        more = f'(", " {element}){{{max(lo - 1, 0)},{int(hi) - 1}}}'
        body = f'"[" {element} {more} "]"'
        return body if lo >= 1 else f'("[]" | {body})'
    raise fail(f"has type {annotation!r}")


def _params_grammar(kind: AgentKind, limits: GrammarLimits) -> str:
    parts: list[str] = []
    for name, info in kind.params.model_fields.items():
        tag = kind.xml_tag(name)
        piece = f'"\\n    <{tag}>" {_value_grammar(kind, name, info, limits)} "</{tag}>"'
        parts.append(piece if info.is_required() else f"({piece})?")
    return " ".join(parts)


# -- orchestration grammars ------------------------------------------------------------------------------


def _input_grammar(k: int, limits: GrammarLimits) -> str:
    """Agent k's input: free text with ``${A<j>}`` references to earlier agents only."""
    if k <= 1:
        return _text(limits.input_chars, exclude="<$")
    refs = " | ".join(_lit(agent_id(j)) for j in range(1, k))
    return f'([^<$] | "${{" ({refs}) "}}"){{0,{limits.input_chars}}}'


def _agent_rules(k: int, kinds: list[AgentKind], limits: GrammarLimits, params: dict[str, str],
                 *, dom: str) -> list[str]:
    alternatives = []
    for kind in kinds:
        alternatives.append(f"{_lit(kind.block)} {_lit('</agent_name>')} kind_{kind.name}_{k}")
    rules = [f"agent_{k} ::= " + _lit("\n<agent>\n" + (f"  <agent_id>{agent_id(k)}</agent_id>\n" if dom == "high"
                                                         else "") + "  <agent_name>")
             + " (" + " | ".join(alternatives) + ")"]
    tail = "\n  </required_arguments>\n" + (f"  <agent_output_id>{agent_id(k)}</agent_output_id>\n"
                                             if dom == "low" else "") + "</agent>"
    for kind in kinds:
        rules.append(
            f"kind_{kind.name}_{k} ::= " + _lit("\n  <agent_description>")
            + f" {_text(limits.description_chars, exclude='<$' + chr(10))} "
            + _lit("</agent_description>\n  <required_arguments>\n    <agent_input>")
            + f" {_input_grammar(k, limits)} " + _lit("</agent_input>")
            + (f" {params[kind.name]}" if params[kind.name] else "") + f" {_lit(tail)}"
        )
    return rules


def _kinds(registry: AgentRegistry | None) -> list[AgentKind]:
    kinds = (registry or default_registry).kinds()
    if not kinds:
        raise GrammarError("the registry offers no agent kinds; nothing to orchestrate")
    for kind in kinds:
        if not re.fullmatch(r"[A-Za-z0-9_]+", kind.name):
            raise GrammarError(f"agent kind {kind.name!r}: its name cannot be used as a grammar rule name")
    return kinds


def _edge(i: int, j: int) -> str:
    return _lit(_edge_text(i, j))


def _edge_rules(n: int, required: dict[int, set[int]] | None, prefix: str) -> tuple[str, list[str]]:
    """Rules for the sorted edge list of n agents; returns (sequence of source rules, rules).

    For source i, the targets are a strictly increasing, non-empty subset of i+1..n that contains
    ``required[i]`` (targets whose input references i).
    """
    rules: list[str] = []
    sources: list[str] = []
    for i in range(1, n):
        must = (required or {}).get(i, set())

        def name(j: int, need: bool, i: int = i) -> str:
            return f"{prefix}_{i}_{j}_{'n' if need else 'o'}"

        for j in range(n, i, -1):
            for need in (True, False):
                edge = _edge(i, j)
                if j == n:
                    body = edge if (need or j in must) else f"({edge})?"
                elif j in must:
                    body = f"{edge} {name(j + 1, False)}"
                elif need:
                    body = f"({edge} {name(j + 1, False)} | {name(j + 1, True)})"
                else:
                    body = f"({edge})? {name(j + 1, False)}"
                rules.append(f"{name(j, need)} ::= {body}")
        sources.append(name(i + 1, True))
    return " ".join(sources), rules


def orchestration_grammar(
    dom: Literal["high", "low"] = "high",
    registry: AgentRegistry | None = None,
    limits: GrammarLimits | None = None,
) -> str:
    """EBNF (xgrammar / vLLM dialect, root rule ``root``) of the orchestrations the validator accepts, in one
    piece (for backends that take one grammar per request). Local decoding uses the stages instead (see
    :class:`~mas_orchestra.constraints.OrchestrationConstraint`). Raises :class:`GrammarError` when a
    registered kind has a parameter the grammar cannot express.
    """
    if dom not in ("high", "low"):
        raise ValueError(f"dom must be 'high' or 'low', got {dom!r}")
    limits = limits or GrammarLimits()
    kinds = _kinds(registry)
    params = {kind.name: _params_grammar(kind, limits) for kind in kinds}
    thinking = f'"<thinking>" {_text(limits.thinking_chars)} "</thinking>"'
    if dom == "low":
        rules = [f"root ::= {thinking} {_low_choice(limits)}", *_agent_rules(1, kinds, limits, params, dom="low")]
        return "\n".join(rules) + "\n"
    rules = [f"root ::= {thinking} agent_1 more_2"]
    for k in range(1, limits.max_agents + 1):
        rules.extend(_agent_rules(k, kinds, limits, params, dom="high"))
    # more_k: after k-1 agents, either stop (edges for k-1 agents) or write agent k.
    for k in range(2, limits.max_agents + 2):
        n = k - 1
        if n == 1:
            stop = '""'
        else:
            seq, edge_rules = _edge_rules(n, None, f"e{n}")
            rules.extend(edge_rules)
            stop = f'{_lit(EDGE_MARKER)} {seq} "\\n</edge>"'
        more = stop if k > limits.max_agents else f"({stop} | agent_{k} more_{k + 1})"
        rules.append(f"more_{k} ::= {more}")
    return "\n".join(rules) + "\n"


def _direct_answer(limits: GrammarLimits) -> str:
    return f'"\\n<answer>" {_text(limits.answer_chars, first_nonspace=True)} "</answer>"'


def _low_choice(limits: GrammarLimits, *, delegate: bool = True) -> str:
    """Low DoM after the thinking: a direct answer, or one delegated agent and its output id."""
    if not delegate:
        return _direct_answer(limits)
    return f'({_direct_answer(limits)} | agent_1 {_lit(chr(10) + "<answer>" + agent_id(1) + "</answer>")})'


# -- stages for local decoding ---------------------------------------------------------------------------


def thinking_grammar(chars: int) -> str:
    """First stage: the plan, at most ``chars`` characters."""
    return f'root ::= "<thinking>" {_text(max(0, chars))} "</thinking>"\n'


def agent_stage_grammar(
    k: int,
    dom: Literal["high", "low"],
    registry: AgentRegistry | None,
    limits: GrammarLimits,
    *,
    agent: bool = True,
    stop: bool = False,
    edges: bool = False,
    direct_answer: bool = False,
) -> str:
    """Stage after the thinking (k = 1) or after agent k - 1: write agent k, or (if allowed) stop / go to the
    edges / answer directly (no agents: what a budget too small for one agent leaves). Low DoM: the direct
    answer, or (``agent``) the one delegated agent with its output id."""
    kinds = _kinds(registry)
    params = {kind.name: _params_grammar(kind, limits) for kind in kinds}
    if dom == "low":
        rules = [f"root ::= {_low_choice(limits, delegate=agent)}"]
        if agent:
            rules.extend(_agent_rules(1, kinds, limits, params, dom="low"))
        return "\n".join(rules) + "\n"
    choices = (['""'] if stop else []) + ([_lit(EDGE_MARKER)] if edges else []) + ([f"agent_{k}"] if agent else [])
    choices += [_direct_answer(limits)] if direct_answer else []
    if not choices:
        raise ValueError("a stage needs at least one choice")
    rules = [f"root ::= ({' | '.join(choices)})"]
    if agent:
        rules.extend(_agent_rules(k, kinds, limits, params, dom=dom))
    return "\n".join(rules) + "\n"


def agent_markup_chars(k: int, dom: Literal["high", "low"], registry: AgentRegistry | None) -> int:
    """Characters of fixed markup of agent k at most (the longest block name, every parameter tag written)."""
    kinds = _kinds(registry)
    longest = 0
    for kind in kinds:
        tags = sum(2 * len(kind.xml_tag(p)) + 10 for p in kind.params.model_fields)
        longest = max(longest, len(kind.block) + tags)
    fixed = len("\n<agent>\n  <agent_name></agent_name>\n  <agent_description></agent_description>\n"
                "  <required_arguments>\n    <agent_input></agent_input>\n  </required_arguments>\n</agent>")
    ident = len(f"  <agent_id>{agent_id(k)}</agent_id>\n") if dom == "high" else len(
        f"  <agent_output_id>{agent_id(k)}</agent_output_id>\n<answer>{agent_id(k)}</answer>")
    return fixed + ident + longest


def agent_text_chars(registry: AgentRegistry | None, limits: GrammarLimits) -> int:
    """Free-text characters of one agent at most under ``limits`` (description, input, parameter values)."""
    most = 0
    for kind in _kinds(registry):
        total = 0
        for info in kind.params.model_fields.values():
            annotation = _unwrap_optional(info.annotation)
            base = typing.get_origin(annotation) or annotation
            if base is list:
                bounds = _bounds(info)
                items = min(int(bounds.get("max_length", 1)), max(int(bounds.get("min_length", 0)),
                                                                   limits.max_list_items))
                total += items * (limits.string_param_chars + 4)
            elif base is str:
                total += limits.string_param_chars
            else:
                total += 4
        most = max(most, total)
    return limits.description_chars + limits.input_chars + most


def edges_chars(n: int) -> int:
    """Characters of the edge block of n agents at most (every earlier -> later pair listed)."""
    if n < 2:
        return 0
    one = len(_edge_text(n - 1, n))
    return len(EDGE_MARKER) + len("\n</edge>") + one * n * (n - 1) // 2


def _edge_text(i: int, j: int) -> str:
    return f"\n  <from>{agent_id(i)}</from><to>{agent_id(j)}</to>"


_REF_RE = re.compile(r"\$\{A(\d+)\}")
_BLOCK_RE = re.compile(r"<agent>\s*<agent_id>A(\d+)</agent_id>(.*?)</agent>", re.S)


def references_by_agent(agents_text: str) -> dict[int, set[int]]:
    """For text written under the grammar: agent number -> numbers of the agents its input references."""
    out: dict[int, set[int]] = {}
    for match in _BLOCK_RE.finditer(agents_text):
        out[int(match.group(1))] = {int(r) for r in _REF_RE.findall(match.group(2))}
    return out


def edge_grammar(agents_text: str) -> str:
    """EBNF of the edge block that completes the agents written so far (text ending in :data:`EDGE_MARKER`).

    Requires the edge X -> Y for every ``${X}`` in Y's input, on top of the structural rules.
    """
    refs = references_by_agent(agents_text)
    n = max(refs, default=0)
    if n < 2:
        raise GrammarError(f"edge grammar needs at least two agents; the text declares {n}")
    required: dict[int, set[int]] = {}
    for target, sources in refs.items():
        for source in sources:
            required.setdefault(source, set()).add(target)
    seq, rules = _edge_rules(n, required, "e")
    return "\n".join([f'root ::= {seq} "\\n</edge>"', *rules]) + "\n"


# -- sub-agent replies -----------------------------------------------------------------------------------


#: Between the reasoning and the answer of a sub-agent reply, and after the answer.
REPLY_CLOSE = "</thinking>\n<answer>"
REPLY_END = "</answer>"


def reply_grammar(thinking_chars: int = 600, answer_chars: int = 200) -> str:
    """EBNF of the sub-agent reply contract ``<thinking>…</thinking>`` + non-empty ``<answer>…</answer>``."""
    if thinking_chars < 1 or answer_chars < 1:
        raise ValueError("thinking_chars and answer_chars must be >= 1")
    return f'root ::= "<thinking>" {_text(thinking_chars)} {reply_closing_grammar(REPLY_CLOSE, answer_chars)}\n'


def reply_closing_grammar(close: str, answer_chars: int) -> str:
    """The end of a reply from inside the reasoning: ``close`` (the rest of :data:`REPLY_CLOSE`), a non-empty
    answer of at most ``answer_chars`` characters and :data:`REPLY_END` (an expression, no rule name)."""
    return f"{_lit(close)} {_text(answer_chars, first_nonspace=True)} {_lit(REPLY_END)}"


def reply_json_schema() -> dict[str, Any]:
    """JSON schema of the reply contract for ``response_format`` APIs (``{"thinking", "answer"}``)."""
    return {
        "type": "object",
        "properties": {"thinking": {"type": "string"}, "answer": {"type": "string"}},
        "required": ["thinking", "answer"],
        "additionalProperties": False,
    }


# -- JSON schema form ------------------------------------------------------------------------------------


def _param_schema(kind: AgentKind, name: str, info: FieldInfo) -> dict[str, Any]:
    schema = dict(kind.params.model_json_schema()["properties"].get(name, {}))
    for key in ("title", "default", "description"):
        schema.pop(key, None)
    if not schema or "$ref" in schema or "allOf" in schema:
        raise GrammarError(
            f"agent kind {kind.block!r}: parameter {name!r} has no plain JSON schema; turn constrained decoding "
            "off (constrained=False, --no-constrained)"
        )
    return schema


def orchestration_json_schema(
    dom: Literal["high", "low"] = "high", registry: AgentRegistry | None = None, limits: GrammarLimits | None = None
) -> dict[str, Any]:
    """A strict JSON schema (OpenAI ``response_format`` style) of our JSON spec form.

    Ids are canonical (``A1``…), agent kinds and parameters come from the registry; the graph rules
    (edges, one sink, references) are left to the validator — JSON schema cannot state them.
    """
    if dom not in ("high", "low"):
        raise ValueError(f"dom must be 'high' or 'low', got {dom!r}")
    limits = limits or GrammarLimits()
    n = 1 if dom == "low" else limits.max_agents
    ids = [agent_id(k) for k in range(1, n + 1)]
    variants = []
    for kind in _kinds(registry):
        props = {p: _param_schema(kind, p, i) for p, i in kind.params.model_fields.items()}
        variants.append({
            "type": "object",
            "properties": {
                "id": {"type": "string", "enum": ids},
                "agent": {"type": "string", "enum": [kind.name]},
                "description": {"type": "string"},
                "input": {"type": "string"},
                "params": {"type": "object", "properties": props, "required": list(props),
                           "additionalProperties": False},
            },
            "required": ["id", "agent", "description", "input", "params"],
            "additionalProperties": False,
        })
    properties: dict[str, Any] = {
        "thinking": {"type": "string"},
        "nodes": {"type": "array", "items": {"anyOf": variants}, "maxItems": n},
    }
    if dom == "high":
        edge = {
            "type": "object",
            "properties": {"source": {"type": "string", "enum": ids}, "target": {"type": "string", "enum": ids}},
            "required": ["source", "target"],
            "additionalProperties": False,
        }
        properties["edges"] = {"type": "array", "items": edge}
    else:
        properties["direct_answer"] = {"type": ["string", "null"]}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
