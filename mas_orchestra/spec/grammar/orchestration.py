"""Grammars whose every sentence is a valid orchestration: in one piece, and in stages for local decoding.

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
(:class:`~mas_orchestra.models.constraints.OrchestrationConstraint`): :func:`thinking_grammar`, then
:func:`agent_stage_grammar` agent by agent (an input that writes a reference ends its stage there and goes
on in :func:`input_rest_grammar`, which keeps xgrammar's masks fast), then :func:`edge_grammar`, built from what
the agents wrote, which requires an edge X -> Y for every ``${X}`` in Y. Each stage is also fitted to the tokens
left, so the whole orchestration is complete within the call's token budget. Single-request backends (a vLLM
server, JSON schema APIs) get the one-piece :func:`orchestration_grammar`; there the validator stays the judge of that
one rule (an ``invalid_spec`` outcome names the missing edge).

Nothing here imports xgrammar or torch: grammars are plain strings.
"""

from __future__ import annotations

import re
import typing

from mas_orchestra.errors import GrammarError
from mas_orchestra.registry import AgentKind, AgentRegistry
from mas_orchestra.spec.grammar.ebnf import (
    GrammarLimits,
    agent_id,
    bounds_of,
    lit,
    offered_kinds,
    params_grammar,
    text_rule,
    unwrap_optional,
)
from mas_orchestra.spec.limits import Dom, check_dom

__all__ = [
    "EDGE_MARKER",
    "OpenInput",
    "agent_markup_chars",
    "agent_stage_grammar",
    "agent_text_chars",
    "edge_grammar",
    "edges_chars",
    "input_rest_grammar",
    "input_rest_markup_chars",
    "open_input",
    "orchestration_grammar",
    "params_text_chars",
    "references_by_agent",
    "thinking_grammar",
]

#: Where the agents end and the edge block begins (in staged decoding, where the edge grammar takes over).
EDGE_MARKER = "\n<edge>"


def _references(k: int) -> str:
    """A ``${A<j>}`` reference to an agent before agent k."""
    refs = " | ".join(lit(agent_id(j)) for j in range(1, k))
    return f'"${{" ({refs}) "}}"'


def _input_grammar(k: int, limits: GrammarLimits) -> str:
    """Agent k's input in one piece: free text with ``${A<j>}`` references to earlier agents only."""
    if k <= 1:
        return text_rule(limits.input_chars, exclude="<$")
    return f"([^<$] | {_references(k)}){{0,{limits.input_chars}}}"


def _input_to_stage_end(k: int, items: int, after: str) -> str:
    """Staged decoding: at most ``items`` more items of agent k's input (a reference counts as one), then either
    a reference, which ends the stage (:func:`input_rest_grammar` continues after it), or the end of the input
    and ``after``.

    The one-piece form repeats a choice between a character and a reference. Inside such a repetition xgrammar
    checks most of the vocabulary at run time for every token (on a CPU, tens to hundreds of milliseconds per
    token, growing with the bound: ``benchmarks/constrained_decoding.py --input-masks``). Here every repetition
    is of one character class, whose token masks xgrammar precomputes.
    """
    close = f"{lit('</agent_input>')} {after}"
    if k <= 1 or items <= 0:
        return f"{text_rule(max(0, items), exclude='<$')} {close}"
    # Two alternatives, each one repetition then a sequence: xgrammar compiles this in milliseconds, where a
    # repetition followed by a choice ("text (reference | end)") took about a second per grammar.
    before_ref = f"{text_rule(items - 1, exclude='<$')} " if items > 1 else ""
    return f"({before_ref}{_references(k)} | {text_rule(items, exclude='<$')} {close})"


def _agent_tail(k: int, dom: str) -> str:
    """The markup that closes agent k after its parameters."""
    return "\n  </required_arguments>\n" + (f"  <agent_output_id>{agent_id(k)}</agent_output_id>\n"
                                              if dom == "low" else "") + "</agent>"


def _after_input(k: int, params: str, dom: str) -> str:
    """What follows ``</agent_input>``: the kind's parameters (``params``, their grammar) and the closing markup."""
    return (f"{params} " if params else "") + lit(_agent_tail(k, dom))


def _agent_rules(k: int, kinds: list[AgentKind], limits: GrammarLimits, params: dict[str, str],
                 *, dom: str, staged: bool = False) -> list[str]:
    alternatives = []
    for kind in kinds:
        alternatives.append(f"{lit(kind.block)} {lit('</agent_name>')} kind_{kind.name}_{k}")
    rules = [f"agent_{k} ::= " + lit("\n<agent>\n" + (f"  <agent_id>{agent_id(k)}</agent_id>\n" if dom == "high"
                                                         else "") + "  <agent_name>")
             + " (" + " | ".join(alternatives) + ")"]
    for kind in kinds:
        after = _after_input(k, params[kind.name], dom)
        if staged:
            body = _input_to_stage_end(k, limits.input_chars, after)
        else:
            body = f"{_input_grammar(k, limits)} {lit('</agent_input>')} {after}"
        rules.append(
            f"kind_{kind.name}_{k} ::= " + lit("\n  <agent_description>")
            + f" {text_rule(limits.description_chars, exclude='<$' + chr(10))} "
            + lit("</agent_description>\n  <required_arguments>\n    <agent_input>") + f" {body}"
        )
    return rules


def _edge(i: int, j: int) -> str:
    return lit(_edge_text(i, j))


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
    dom: Dom = "high",
    registry: AgentRegistry | None = None,
    limits: GrammarLimits | None = None,
    *,
    direct_answer: bool = False,
) -> str:
    """EBNF (xgrammar / vLLM dialect, root rule ``root``) of the orchestrations the validator accepts.

    In one piece, for backends that take one grammar per request; local decoding uses the stages instead (see
    :class:`~mas_orchestra.models.constraints.OrchestrationConstraint`). Parameter values are enumerated within
    the registry's bounds, so a registry narrowed by sampling caps (:func:`mas_orchestra.caps.capped_registry`)
    gives a grammar that cannot ask for more.

    Args:
        dom: ``high`` or ``low``.
        registry: The offered kinds and their parameters (default: the default registry).
        limits: Caps on agents and text lengths (default: :class:`GrammarLimits`'s).
        direct_answer: (high DoM) the orchestrator may also answer right after the thinking, with no agents.

    Returns:
        The grammar text.

    Raises:
        GrammarError: A registered kind has a parameter the grammar cannot express.
    """
    check_dom(dom)
    limits = limits or GrammarLimits()
    kinds = offered_kinds(registry)
    params = {kind.name: params_grammar(kind, limits) for kind in kinds}
    thinking = f'"<thinking>" {text_rule(limits.thinking_chars)} "</thinking>"'
    if dom == "low":
        rules = [f"root ::= {thinking} {_low_choice(limits)}", *_agent_rules(1, kinds, limits, params, dom="low")]
        return "\n".join(rules) + "\n"
    first = f"({_direct_answer(limits)} | agent_1 more_2)" if direct_answer else "agent_1 more_2"
    rules = [f"root ::= {thinking} {first}"]
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
            stop = f'{lit(EDGE_MARKER)} {seq} "\\n</edge>"'
        more = stop if k > limits.max_agents else f"({stop} | agent_{k} more_{k + 1})"
        rules.append(f"more_{k} ::= {more}")
    return "\n".join(rules) + "\n"


def _direct_answer(limits: GrammarLimits) -> str:
    return f'"\\n<answer>" {text_rule(limits.answer_chars, first_nonspace=True)} "</answer>"'


def _low_choice(limits: GrammarLimits, *, delegate: bool = True) -> str:
    """Low DoM after the thinking: a direct answer, or one delegated agent and its output id."""
    if not delegate:
        return _direct_answer(limits)
    return f'({_direct_answer(limits)} | agent_1 {lit(chr(10) + "<answer>" + agent_id(1) + "</answer>")})'


def thinking_grammar(chars: int) -> str:
    """First stage: the plan, at most ``chars`` characters.

    Args:
        chars: Most characters of the thinking (negative counts as 0).
    """
    return f'root ::= "<thinking>" {text_rule(max(0, chars))} "</thinking>"\n'


def agent_stage_grammar(
    k: int,
    dom: Dom,
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
    answer, or (``agent``) the one delegated agent with its output id.

    Args:
        k: The agent's number (1-based).
        dom: The degree of MAS.
        registry: The kinds offered (default: the default registry).
        limits: Bounds on text lengths and values.
        agent: Offer writing agent k.
        stop: High DoM: offer ending the orchestration here (no edges).
        edges: High DoM: offer going to the edge block.
        direct_answer: High DoM: offer a direct answer with no agents.

    Raises:
        ValueError: A high-DoM stage with no choice.
    """
    kinds = offered_kinds(registry)
    params = {kind.name: params_grammar(kind, limits) for kind in kinds}
    if dom == "low":
        rules = [f"root ::= {_low_choice(limits, delegate=agent)}"]
        if agent:
            rules.extend(_agent_rules(1, kinds, limits, params, dom="low", staged=True))
        return "\n".join(rules) + "\n"
    choices = (['""'] if stop else []) + ([lit(EDGE_MARKER)] if edges else []) + ([f"agent_{k}"] if agent else [])
    choices += [_direct_answer(limits)] if direct_answer else []
    if not choices:
        raise ValueError("a stage needs at least one choice")
    rules = [f"root ::= ({' | '.join(choices)})"]
    if agent:
        rules.extend(_agent_rules(k, kinds, limits, params, dom=dom, staged=True))
    return "\n".join(rules) + "\n"


def agent_markup_chars(k: int, dom: Dom, registry: AgentRegistry | None) -> int:
    """Characters of fixed markup of agent k at most (the longest block name, every parameter tag written).

    Args:
        k: The agent's number (1-based).
        dom: The degree of MAS (low DoM adds the output id and the answer).
        registry: The kinds offered (default: the default registry).
    """
    kinds = offered_kinds(registry)
    longest = 0
    for kind in kinds:
        longest = max(longest, len(kind.block) + _param_tags_chars(kind))
    fixed = len("\n<agent>\n  <agent_name></agent_name>\n  <agent_description></agent_description>\n"
                "  <required_arguments>\n    <agent_input></agent_input>\n  </required_arguments>\n</agent>")
    ident = len(f"  <agent_id>{agent_id(k)}</agent_id>\n") if dom == "high" else len(
        f"  <agent_output_id>{agent_id(k)}</agent_output_id>\n<answer>{agent_id(k)}</answer>")
    return fixed + ident + longest


def agent_text_chars(registry: AgentRegistry | None, limits: GrammarLimits) -> int:
    """Free-text characters of one agent at most under ``limits`` (description, input, parameter values).

    Args:
        registry: The kinds offered (default: the default registry).
        limits: Bounds on text lengths and values.
    """
    most = max(params_text_chars(kind, limits) for kind in offered_kinds(registry))
    return limits.description_chars + limits.input_chars + most


def params_text_chars(kind: AgentKind, limits: GrammarLimits) -> int:
    """Characters of a kind's parameter values at most under ``limits`` (their tags not counted).

    Args:
        kind: The agent kind.
        limits: Bounds on text lengths and values.
    """
    total = 0
    for info in kind.params.model_fields.values():
        annotation = unwrap_optional(info.annotation)
        base = typing.get_origin(annotation) or annotation
        if base is list:
            bounds = bounds_of(info)
            items = min(int(bounds.get("max_length", 1)), max(int(bounds.get("min_length", 0)),
                                                               limits.max_list_items))
            total += items * (limits.string_param_chars + 4)
        elif base is str:
            total += limits.string_param_chars
        else:
            total += 4
    return total


def input_rest_markup_chars(k: int, kind: AgentKind, dom: Dom) -> int:
    """Characters of fixed markup after agent k's input at most (``</agent_input>``, the kind's parameter tags,
    the closing markup).

    Args:
        k: The agent's number (1-based).
        kind: The agent's kind.
        dom: The degree of MAS.
    """
    return len("</agent_input>") + _param_tags_chars(kind) + len(_agent_tail(k, dom))


def _param_tags_chars(kind: AgentKind) -> int:
    """Characters of a kind's parameter tags, every one written (open and close tags, indent and newline)."""
    return sum(2 * len(kind.xml_tag(p)) + 10 for p in kind.params.model_fields)


def edges_chars(n: int) -> int:
    """Characters of the edge block of n agents at most (every earlier -> later pair listed).

    Args:
        n: The number of agents (under 2: no edge block, 0).
    """
    if n < 2:
        return 0
    one = len(_edge_text(n - 1, n))
    return len(EDGE_MARKER) + len("\n</edge>") + one * n * (n - 1) // 2


def _edge_text(i: int, j: int) -> str:
    return f"\n  <from>{agent_id(i)}</from><to>{agent_id(j)}</to>"


_REF_RE = re.compile(r"\$\{A(\d+)\}")


_BLOCK_RE = re.compile(r"<agent>\s*<agent_id>A(\d+)</agent_id>(.*?)</agent>", re.S)


def references_by_agent(agents_text: str) -> dict[int, set[int]]:
    """For text written under the grammar: agent number -> numbers of the agents its input references.

    Args:
        agents_text: The orchestration's agent blocks.
    """
    out: dict[int, set[int]] = {}
    for match in _BLOCK_RE.finditer(agents_text):
        out[int(match.group(1))] = {int(r) for r in _REF_RE.findall(match.group(2))}
    return out


_OPEN_INPUT_RE = re.compile(r"<agent_id>A(\d+)</agent_id>\s*<agent_name>([^<]*)</agent_name>.*<agent_input>"
                            r"((?:(?!</agent_input>).)*)\Z", re.S)
_ENDS_WITH_REF_RE = re.compile(r"\$\{A\d+\}\Z")


class OpenInput(typing.NamedTuple):
    """Where staged decoding stopped inside an agent's input, right after a reference (:func:`open_input`).

    Attributes:
        agent: The agent's number (1-based).
        block: Its block name (``CoTAgent`` …).
        items: Items of its input written so far (characters, a ``${A<j>}`` reference counting as one, as the
            grammar counts them).
        references: References among them.
    """

    agent: int
    block: str
    items: int
    references: int


def open_input(text: str) -> OpenInput | None:
    """Where staged decoding stopped inside an agent's input after a reference, or ``None`` (the text does not
    end inside an ``<agent_input>`` right after a reference).

    Args:
        text: The orchestration so far.
    """
    if _ENDS_WITH_REF_RE.search(text) is None:
        return None
    start = text.rfind("<agent>")
    match = _OPEN_INPUT_RE.search(text, max(start, 0))
    if match is None:
        return None
    written = match.group(3)
    return OpenInput(int(match.group(1)), match.group(2), len(_REF_RE.sub("$", written)),
                     len(_REF_RE.findall(written)))


def input_rest_grammar(k: int, kind: AgentKind, limits: GrammarLimits, *, dom: Dom, items: int) -> str:
    """The stage that continues agent k's input after a reference: at most ``items`` more items, then another
    reference (the next such stage) or the end of the input, the kind's parameters and the closing markup.

    Args:
        k: The agent's number (1-based).
        kind: The agent's kind.
        limits: Bounds on parameter values.
        dom: The degree of MAS.
        items: Items the input may still take (characters; a reference counts as one).
    """
    after = _after_input(k, params_grammar(kind, limits), dom)
    return f"root ::= {_input_to_stage_end(k, items, after)}\n"


def edge_grammar(agents_text: str) -> str:
    """EBNF of the edge block that completes the agents written so far (text ending in :data:`EDGE_MARKER`).

    Requires the edge X -> Y for every ``${X}`` in Y's input, on top of the structural rules.

    Args:
        agents_text: The orchestration so far.

    Raises:
        GrammarError: The text declares fewer than two agents.
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
