"""The original orchestration text format: a lenient reader (text → plain data) and a writer.

The reader accepts what released orchestrator checkpoints emit: tags and agent names in any case and
spacing, values padded with whitespace, a tag never closed (it runs to the next tag we know or to the
end), a harmony-style ``…assistantfinal`` prefix, ``debate_roles`` as a JSON or Python-style list. It
returns the spec as plain data; :func:`mas_orchestra.spec.parse_orchestration` validates that data into
a :class:`~mas_orchestra.spec.GraphSpec`, through the same checks as JSON specs. This module works on
plain data and the spec's fields only, so the model can use it without the two importing each other.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from mas_orchestra.errors import SpecError
from mas_orchestra.registry import AgentRegistry, default_registry
from mas_orchestra.spec.json_format import read_json_spec
from mas_orchestra.spec.limits import ID_RE, MARKUP_RE, MAX_NODES, MAX_TEXT_CHARS, Dom
from mas_orchestra.spec.validation import SpecShape
from mas_orchestra.spec.warnings import line_of

__all__ = ["NO_ORCHESTRATION", "detect_dom", "read_orchestration", "spec_to_xml"]

#: How the problem of a text with no <agent> and no <answer> starts (the original's whole-response fallback
#: grades such a text as a direct answer; see :func:`mas_orchestra.runtime.whole_response_answer`).
NO_ORCHESTRATION = "no orchestration found"

#: Bounds the tokeniser's memory; a 10,000-block degenerate loop (~120,000 tags) still reads.
_MAX_TAGS = 250_000
# The final-channel markers of harmony-style output: everything up to the last one is the analysis channel.
_HARMONY_FINAL = re.compile(r"<\|assistant_final\|>|assistantfinal|assistant[ \t]final(?![a-z])", re.I)
_TAG_RE = re.compile(r"<\s*(/?)\s*([A-Za-z_][A-Za-z0-9_]*)\s*>")
_STRUCTURE_TAGS = frozenset({
    "thinking", "agent", "agent_id", "agent_name", "agent_description", "required_arguments",
    "agent_input", "debate_roles", "edge", "from", "to", "agent_output_id", "answer",
})
_AGENT_END = frozenset({"agent", "edge", "answer"})


@dataclass(slots=True)
class _Tag:
    start: int
    end: int
    name: str
    closing: bool


class _Doc:
    """Tokenised orchestration text: only tags the format knows count; any other ``<x>`` is text.

    Tags between the first ``<thinking>`` and its ``</thinking>`` are prose: they are dropped here (and
    counted in ``prose_tags``), so a tag mentioned while thinking creates nothing.
    """

    def __init__(self, text: str, known: frozenset[str]) -> None:
        self.text = text
        tags = []
        for m in _TAG_RE.finditer(text):
            closing, name = m.group(1, 2)
            name = name.lower()
            if name in known:
                tags.append(_Tag(m.start(), m.end(), name, bool(closing)))
        if len(tags) > _MAX_TAGS:
            raise SpecError(f"orchestration has {len(tags):,} tags; the limit is {_MAX_TAGS:,}")
        self.prose_tags = 0
        first = next((i for i, t in enumerate(tags) if t.name == "thinking" and not t.closing), None)
        if first is not None:
            close = next(
                (j for j in range(first + 1, len(tags)) if tags[j].name == "thinking" and tags[j].closing), None
            )
            if close is not None:
                self.prose_tags = close - first - 1
                tags = tags[: first + 1] + tags[close:]
        self.tags = tags
        self.starts = [t.start for t in tags]

        # Per-tag-name index of opening tags, so range look-ups stay logarithmic on big specs.
        self._opens: dict[str, tuple[list[int], list[int]]] = {}
        for i, t in enumerate(self.tags):
            if not t.closing:
                starts, indices = self._opens.setdefault(t.name, ([], []))
                starts.append(t.start)
                indices.append(i)

    def opens(self, name: str, lo: int = 0, hi: int | None = None) -> list[int]:
        hi = len(self.text) if hi is None else hi
        starts, indices = self._opens.get(name, ([], []))
        return indices[bisect.bisect_left(starts, lo) : bisect.bisect_left(starts, hi)]

    def block(self, index: int, hi: int, stop: frozenset[str] | None = None) -> tuple[str, int, bool]:
        """Text after tag ``index`` up to its close, else up to the next known (or ``stop``) tag, else ``hi``;
        the end of what was read, and whether the tag was closed."""
        tag = self.tags[index]
        for j in range(index + 1, len(self.tags)):
            later = self.tags[j]
            if later.start >= hi:
                break
            if later.name == tag.name and later.closing:
                return self.text[tag.end : later.start], later.end, True
            if stop is None or (later.name in stop and not later.closing):
                return self.text[tag.end : later.start], later.start, False
        return self.text[tag.end : hi], hi, False

    def content(self, index: int, hi: int, stop: frozenset[str] | None = None) -> tuple[str, int]:
        """:meth:`block` without the closed flag."""
        text, end, _ = self.block(index, hi, stop)
        return text, end

    def field(self, name: str, lo: int, hi: int) -> str | None:
        found = self.opens(name, lo, hi)
        if not found:
            return None
        return self.content(found[0], hi)[0].strip()


def _strip_harmony(text: str) -> str:
    last = None
    for match in _HARMONY_FINAL.finditer(text):
        last = match
    return text[last.end() :] if last is not None else text


def _parse_roles(raw: str) -> Any:
    raw = raw.strip()
    if not raw:
        return []
    if len(raw) > 20_000:
        raise SpecError("debate_roles is too long")
    for loader in (json.loads, ast.literal_eval):  # literal_eval evaluates literals only, never code
        try:
            value = loader(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
        if isinstance(value, str):
            return [value]
    inner = raw.strip("[]")
    return [part.strip().strip("'\"") for part in re.split(r"[,\n;]", inner) if part.strip().strip("'\"")]


def _param_value(raw: str) -> Any:
    raw = raw.strip()
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw


def _param_tags(registry: AgentRegistry) -> frozenset[str]:
    tags: set[str] = set()
    for kind in registry.kinds():
        tags.update(kind.xml_tag(p).lower() for p in kind.params.model_fields)
    return frozenset(tags)


def _agent_block(doc: _Doc, lo: int, hi: int, registry: AgentRegistry, number: int) -> dict[str, Any]:
    name = doc.field("agent_name", lo, hi)
    node: dict[str, Any] = {
        "id": doc.field("agent_id", lo, hi),
        "agent": name if name is not None else "",
        "description": doc.field("agent_description", lo, hi) or "",
        "input": doc.field("agent_input", lo, hi) or "",
        "params": {},
        "_output_id": doc.field("agent_output_id", lo, hi),
        "_number": number,
    }
    args = doc.opens("required_arguments", lo, hi)
    a_lo, a_hi = lo, hi
    if args:
        a_lo = doc.tags[args[0]].end
        a_hi = doc.content(args[0], hi, stop=frozenset({"agent", "edge", "answer"}))[1]
    kind = registry.resolve(node["agent"]) if node["agent"] else None
    if kind is not None:
        for param in kind.params.model_fields:
            tag = kind.xml_tag(param).lower()
            raw = doc.field(tag, a_lo, a_hi)
            if raw is None:
                continue
            node["params"][param] = _parse_roles(raw) if param == "roles" else _param_value(raw)
    else:
        roles = doc.field("debate_roles", a_lo, a_hi)
        if roles is not None:
            node["params"]["roles"] = _parse_roles(roles)
    return node


def detect_dom(text: str) -> Dom:
    """Guess the DoM of orchestration text: low when it names an output id but no agent id.

    Args:
        text: Orchestration text.

    Returns:
        ``low`` or ``high``.
    """
    lowered = text.lower()
    has_output = re.search(r"<\s*agent_output_id\s*>", lowered) is not None
    has_id = re.search(r"<\s*agent_id\s*>", lowered) is not None
    return "low" if has_output and not has_id else "high"


class _Notes:
    """The warnings of one reading, as plain data (the model validates them into ``SpecWarning``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[dict[str, str]] = []

    def add(self, kind: str, where: int | str, message: str) -> None:
        location = line_of(self.text, where) if isinstance(where, int) else where
        self.items.append({"kind": kind, "location": location, "message": message})


def _ignored_after(doc: _Doc, notes: _Notes, plan_end: int, skipped_agents: int, used_edge_end: int) -> None:
    """Record what follows the plan (blocks, answers, other text): ignored, never read."""
    rest = doc.text[plan_end:]
    if not rest.strip() and not skipped_agents:
        return
    tail = [t for t in doc.tags[bisect.bisect_left(doc.starts, plan_end):]
            if not t.closing and not (t.name == "edge" and t.start < used_edge_end)]
    parts = []
    if skipped_agents:
        parts.append(f"{skipped_agents} more <agent> block(s)")
    for name, label in (("edge", "<edge>"), ("answer", "<answer>"), ("thinking", "<thinking>")):
        count = sum(1 for t in tail if t.name == name)
        if count:
            parts.append(f"{count} {label} block(s)")
    what = ", ".join(parts) if parts else f"{len(rest.strip()):,} characters of text"
    notes.add("ignored_after_plan", plan_end, f"the plan ends here; what follows is ignored ({what})")


def _plan_agents(doc: _Doc, dom: Dom, edge_end: int | None, registry: AgentRegistry,
                 notes: _Notes) -> tuple[list[dict[str, Any]], int, int]:
    """The agent blocks of the first plan, where the first left-out block starts, and how many were left out.

    Low DoM: the first block. High DoM: blocks in order until one starts after the first ``<edge>`` block,
    repeats an id already taken, or follows a second ``<thinking>`` (a new copy of the plan begins).
    """
    end = len(doc.text)
    opens = doc.opens("agent")
    nodes: list[dict[str, Any]] = []
    ids: set[str] = set()
    copy_start = end
    for number, index in enumerate(opens, 1):
        start = doc.tags[index].start
        if nodes and (dom == "low" or start >= copy_start):
            return nodes, start, len(opens) - number + 1
        _, block_end, closed = doc.block(index, end, stop=_AGENT_END)
        node = _agent_block(doc, doc.tags[index].end, block_end, registry, number)
        next_start = doc.tags[opens[number]].start if number < len(opens) else end
        _check_nested_markup(doc, number, doc.tags[index].end, next_start)
        if nodes and node["id"] is not None and node["id"] in ids:
            return nodes, start, len(opens) - number + 1
        if len(nodes) >= MAX_NODES:
            raise SpecError(f"more than {MAX_NODES} <agent> blocks in one plan; a spec may have at most {MAX_NODES}")
        if not nodes:  # a <thinking> after the first agent, or the end of an <edge> block after it, ends the plan
            later = doc.opens("thinking", start)
            copy_start = doc.tags[later[0]].start if later else end
            if edge_end is not None and edge_end > start:
                copy_start = min(copy_start, edge_end)
        if not closed:
            notes.add("unclosed_block", start,
                      f"agent #{number} has no </agent>; read up to where the next block starts")
        if node["input"] in ('""', "''"):
            notes.add("quoted_empty_input", f"agent #{number}",
                      f"<agent_input>{node['input']}</agent_input> read as empty: the agent gets the whole question")
            node["input"] = ""
        node["_start"], node["_end"] = start, block_end
        nodes.append(node)
        ids.add(node["id"])
    return nodes, end, 0


def _check_nested_markup(doc: _Doc, number: int, lo: int, hi: int) -> None:
    """A value holding format tags (``<agent_input>… <answer> …</agent_input>``) would be cut at the tag and
    silently change meaning: refuse it, naming the agent, the field and the tag."""
    for tag in ("agent_input", "agent_description"):
        found = doc.opens(tag, lo, hi)
        if not found:
            continue
        start = doc.tags[found[0]].end
        close = re.compile(rf"<\s*/\s*{tag}\s*>", re.I).search(doc.text, start, hi)
        nested = MARKUP_RE.search(doc.text, start, close.start()) if close else None
        if nested:
            raise SpecError(
                f"agent #{number}: <{tag}> contains orchestration markup {nested.group(0)!r} "
                f"({line_of(doc.text, nested.start())}); values cannot hold format tags, reword them"
            )


def _first_edges(doc: _Doc, notes: _Notes) -> tuple[list[dict[str, str]], int | None]:
    """The first <edge> block's edges (<from>/<to> paired in order, an unpaired extra dropped) and its end."""
    found = doc.opens("edge")
    if not found:
        return [], None
    lo = doc.tags[found[0]].end
    _, hi, _ = doc.block(found[0], len(doc.text), stop=_AGENT_END)
    sources = [doc.content(i, hi)[0].strip() for i in doc.opens("from", lo, hi)]
    targets = [doc.content(i, hi)[0].strip() for i in doc.opens("to", lo, hi)]
    if len(sources) != len(targets):
        extra = "<from>" if len(sources) > len(targets) else "<to>"
        notes.add("unpaired_edge", "edge block 1",
                  f"{len(sources)} <from> but {len(targets)} <to>; paired in order, the unpaired {extra} dropped")
    return [{"source": s, "target": t} for s, t in zip(sources, targets)], hi


def read_orchestration(
    text: str, dom: Dom = "high", *, registry: AgentRegistry | None = None
) -> Any:
    """Read orchestration text (DESIGN §3, §11) into the plain data of a spec (not yet validated).

    The first complete orchestration is the plan; what follows it (commentary, fences, a second copy,
    repeated blocks) is ignored. Tags inside a closed ``<thinking>`` are prose. Each leniency is recorded
    in the data's ``warnings`` (see :mod:`mas_orchestra.spec.warnings`). Text that is one JSON object is read
    as our JSON spec form (what an orchestrator constrained by a JSON schema writes), with ``dom`` as its
    default DoM.

    Args:
        text: The orchestration text.
        dom: The degree of MAS to read the text as (also the default DoM of the JSON form).
        registry: Names the agent kinds and their parameter tags (default: the default registry).

    Raises:
        SpecError: Text over :data:`MAX_TEXT_CHARS`, or whose plan cannot be read (no orchestration at all, an
            agent without name or id …), listing every problem found.
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_orchestration expects str, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise SpecError(f"orchestration is {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    registry = registry or default_registry
    text = _strip_harmony(text)
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        return read_json_spec(stripped, dom=dom)  # our JSON form (JSON-schema constrained APIs)
    doc = _Doc(text, _STRUCTURE_TAGS | _param_tags(registry))
    notes = _Notes(text)
    end = len(text)
    problems: list[str] = []

    thinking = ""
    found = doc.opens("thinking")
    if found:
        thinking = doc.content(found[0], end, stop=_AGENT_END)[0].strip()
        if doc.prose_tags:
            notes.add("markup_in_thinking", "thinking",
                      f"{doc.prose_tags} tag(s) mentioned inside <thinking> are prose and create nothing")

    edges, edge_end = _first_edges(doc, notes) if dom == "high" else ([], None)
    nodes, next_start, skipped = _plan_agents(doc, dom, edge_end, registry, notes)
    plan_end = max([nodes[-1]["_end"] if nodes else 0, edge_end or 0])
    answers = [i for i in doc.opens("answer") if not any(
        n["_start"] <= doc.tags[i].start < n["_end"] for n in nodes)]

    data: dict[str, Any] = {"thinking": thinking, "dom": dom, "edges": edges, "nodes": []}
    for node in nodes:
        if not node["agent"]:
            valid = ", ".join(registry.block_names())
            problems.append(f"agent #{node['_number']}: missing <agent_name>; valid: {valid}")
    if not nodes:
        if not answers:
            problems.append(
                f"{NO_ORCHESTRATION}: no <agent> block and no <answer>"
                + (" (low DoM needs one <agent> with <agent_output_id>, or a direct <answer>)" if dom == "low" else "")
            )
        else:
            content, plan_end = doc.content(answers[0], end, stop=_AGENT_END)
            data["direct_answer"] = content.strip()
    elif dom == "high":
        written = len(nodes) + skipped
        if edge_end is None and written > 1:
            # The original counts every <agent> block in the text and refuses several without an <edge> block.
            # Running only the first would reward a plan whose wiring was never written (issue: structure runs).
            problems.append(
                f"{written} <agent> blocks but no <edge> block: high DoM connects several agents with one "
                "<edge> block (<from>X</from><to>Y</to> per link) into a graph with one sink; "
                "a single agent needs no edges"
            )
        for node in nodes:
            if node["id"] is None:
                problems.append(f"agent #{node['_number']} ({node['agent'] or '?'}): missing <agent_id>")
        for i in answers:
            if doc.tags[i].start < plan_end:
                notes.add("answer_ignored", doc.tags[i].start, "<answer> next to agents is ignored: the sink answers")
    else:
        node = nodes[0]
        region = (node["_end"], next_start)  # between the agent block and the next block (or the end)
        output_id = node["_output_id"] or doc.field("agent_output_id", *region)
        own = [i for i in answers if region[0] <= doc.tags[i].start < region[1]]
        answer, answer_end = doc.content(own[0], region[1], stop=_AGENT_END) if own else (None, 0)
        answer = answer.strip() if answer is not None else None
        if output_id is None:
            output_id = answer if answer and ID_RE.fullmatch(answer) else "A1"
            notes.add("missing_output_id", "agent #1", f"no <agent_output_id>; the agent is named {output_id!r}")
        elif answer is not None and answer != output_id:
            notes.add("answer_ignored", doc.tags[own[0]].start,
                      f"<answer> is {answer!r} but the agent's <agent_output_id> is {output_id!r}; the agent answers")
        ids_after = doc.opens("agent_output_id", *region)
        plan_end = max(node["_end"], answer_end, doc.content(ids_after[0], region[1])[1] if ids_after else 0)
        edge_opens = doc.opens("edge", 0, plan_end)
        if edge_opens:
            notes.add("edges_ignored", doc.tags[edge_opens[0]].start, "low DoM has one agent: <edge> ignored")
        node["id"] = output_id
        data["sink"] = output_id
    if problems:
        raise SpecError(problems)
    _ignored_after(doc, notes, min(plan_end, next_start), skipped, edge_end or 0)
    data["nodes"] = [{k: v for k, v in n.items() if not k.startswith("_")} for n in nodes]
    data["warnings"] = notes.items
    return data


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def spec_to_xml(spec: SpecShape, *, registry: AgentRegistry | None = None) -> str:
    """Write a spec in the orchestration text format of its DoM; parsing it gives the spec back.

    Args:
        spec: The spec.
        registry: Names the blocks and parameter tags (default: the default registry).

    Returns:
        The orchestration text.
    """
    registry = registry or default_registry
    out = [f"<thinking>{spec.thinking}</thinking>"]
    if not spec.nodes:
        out.append(f"<answer>{spec.direct_answer or ''}</answer>")
        return "\n".join(out)
    for node in spec.nodes:
        kind = registry.get(node.agent)
        out.append("<agent>")
        if spec.dom == "high":
            out.append(f"  <agent_id>{node.id}</agent_id>")
        out.append(f"  <agent_name>{kind.block}</agent_name>")
        out.append(f"  <agent_description>{node.description}</agent_description>")
        out.append("  <required_arguments>")
        out.append(f"    <agent_input>{node.input}</agent_input>")
        for param, value in node.params.items():
            tag = kind.xml_tag(param)
            out.append(f"    <{tag}>{_param_text(value)}</{tag}>")
        out.append("  </required_arguments>")
        if spec.dom == "low":
            out.append(f"  <agent_output_id>{node.id}</agent_output_id>")
        out.append("</agent>")
    if spec.dom == "low":
        out.append(f"<answer>{spec.sink}</answer>")
    elif spec.edges:
        out.append("<edge>")
        out.extend(f"  <from>{e.source}</from><to>{e.target}</to>" for e in spec.edges)
        out.append("</edge>")
    return "\n".join(out)
