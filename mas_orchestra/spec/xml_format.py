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
from typing import TYPE_CHECKING, Any

from mas_orchestra.errors import SpecError
from mas_orchestra.registry import AgentRegistry, default_registry
from mas_orchestra.spec.json_format import read_json_spec
from mas_orchestra.spec.limits import MAX_NODES, MAX_TEXT_CHARS, Dom

if TYPE_CHECKING:
    from mas_orchestra.spec.model import GraphSpec

__all__ = ["detect_dom", "read_orchestration", "spec_to_xml"]

_MAX_TAGS = 20_000
_HARMONY_FINAL = "assistantfinal"
_TAG_RE = re.compile(r"<\s*(/?)\s*([A-Za-z_][A-Za-z0-9_]*)\s*>")
_STRUCTURE_TAGS = frozenset({
    "thinking", "agent", "agent_id", "agent_name", "agent_description", "required_arguments",
    "agent_input", "debate_roles", "edge", "from", "to", "agent_output_id", "answer",
})
_AGENT_END = frozenset({"agent", "edge", "answer"})


@dataclass(frozen=True)
class _Tag:
    start: int
    end: int
    name: str
    closing: bool


class _Doc:
    """Tokenised orchestration text: only tags the format knows count; any other ``<x>`` is text."""

    def __init__(self, text: str, known: frozenset[str]) -> None:
        self.text = text
        self.tags = [
            _Tag(m.start(), m.end(), m.group(2).lower(), bool(m.group(1)))
            for m in _TAG_RE.finditer(text)
            if m.group(2).lower() in known
        ]

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

    def content(self, index: int, hi: int, stop: frozenset[str] | None = None) -> tuple[str, int]:
        """Text after tag ``index`` up to its close, else up to the next known (or ``stop``) tag, else ``hi``."""
        tag = self.tags[index]
        for later in self.tags[index + 1 :]:
            if later.start >= hi:
                break
            if later.name == tag.name and later.closing:
                return self.text[tag.end : later.start], later.end
            if stop is None or (later.name in stop and not later.closing):
                return self.text[tag.end : later.start], later.start
        return self.text[tag.end : hi], hi

    def field(self, name: str, lo: int, hi: int) -> str | None:
        found = self.opens(name, lo, hi)
        if not found:
            return None
        return self.content(found[0], hi)[0].strip()


def _strip_harmony(text: str) -> str:
    idx = text.lower().rfind(_HARMONY_FINAL)
    return text[idx + len(_HARMONY_FINAL) :] if idx >= 0 else text


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
    """Guess the DoM of orchestration text: low when it names an output id but no agent id."""
    lowered = text.lower()
    has_output = re.search(r"<\s*agent_output_id\s*>", lowered) is not None
    has_id = re.search(r"<\s*agent_id\s*>", lowered) is not None
    return "low" if has_output and not has_id else "high"


def read_orchestration(
    text: str, dom: Dom = "high", *, registry: AgentRegistry | None = None
) -> Any:
    """Read orchestration text (DESIGN §3) into the plain data of a spec (not yet validated).

    Text that is one JSON object is read as our JSON spec form (what an orchestrator constrained by a JSON
    schema writes), with ``dom`` as its default DoM. Raises :class:`SpecError` for text whose structure
    cannot be read (missing ids, unpaired edges …), listing every problem found.
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
    end = len(text)
    problems: list[str] = []
    if len(doc.tags) > _MAX_TAGS:
        raise SpecError(f"orchestration has {len(doc.tags):,} tags; the limit is {_MAX_TAGS:,}")

    thinking = ""
    found = doc.opens("thinking")
    if found:
        thinking = doc.content(found[0], end, stop=_AGENT_END)[0].strip()

    nodes: list[dict[str, Any]] = []
    agent_tags = doc.opens("agent")
    if len(agent_tags) > MAX_NODES:
        raise SpecError(f"{len(agent_tags)} <agent> blocks; a spec may have at most {MAX_NODES} agents")
    if len(doc.opens("edge")) > MAX_NODES:
        raise SpecError(f"too many <edge> blocks (more than {MAX_NODES})")
    for number, index in enumerate(agent_tags, 1):
        lo = doc.tags[index].end
        hi = doc.content(index, end, stop=_AGENT_END)[1]
        nodes.append(_agent_block(doc, lo, hi, registry, number))
    agent_spans = [
        (doc.tags[i].start, doc.content(i, end, stop=_AGENT_END)[1]) for i in agent_tags
    ]

    def outside_agents(pos: int) -> bool:
        return not any(lo <= pos < hi for lo, hi in agent_spans)

    answer_tags = [i for i in doc.opens("answer") if outside_agents(doc.tags[i].start)]
    answer = doc.content(answer_tags[-1], end, stop=_AGENT_END)[0].strip() if answer_tags else None

    edges: list[dict[str, str]] = []
    for number, index in enumerate(doc.opens("edge"), 1):
        lo = doc.tags[index].end
        hi = doc.content(index, end, stop=frozenset({"agent", "edge", "answer"}))[1]
        sources = [doc.content(i, hi)[0].strip() for i in doc.opens("from", lo, hi)]
        targets = [doc.content(i, hi)[0].strip() for i in doc.opens("to", lo, hi)]
        if len(sources) != len(targets):
            problems.append(
                f"edge block {number}: {len(sources)} <from> but {len(targets)} <to>; they are paired in order"
            )
        edges.extend({"source": s, "target": t} for s, t in zip(sources, targets))

    data: dict[str, Any] = {"thinking": thinking, "dom": dom, "edges": edges, "nodes": []}
    for node in nodes:
        where = f"agent #{node['_number']}"
        if not node["agent"]:
            problems.append(f"{where}: missing <agent_name>; valid: {', '.join(registry.block_names())}")
    if dom == "high":
        for node in nodes:
            if node["id"] is None:
                problems.append(f"agent #{node['_number']} ({node['agent'] or '?'}): missing <agent_id>")
        if not nodes:
            if answer is None:
                problems.append("no <agent> blocks found (and no <answer>)")
            else:
                data["direct_answer"] = answer
    else:
        if edges:
            problems.append("low DoM allows no <edge>")
        if len(nodes) > 1:
            problems.append(f"low DoM allows exactly one <agent>, found {len(nodes)}")
        if not nodes:
            if answer is None:
                problems.append("low DoM needs one <agent> with <agent_output_id>, or a direct <answer>")
            else:
                data["direct_answer"] = answer
        else:
            node = nodes[0]
            output_id = node["_output_id"] or doc.field("agent_output_id", 0, end) or node["id"]
            if output_id is None:
                problems.append("agent #1: missing <agent_output_id>")
            elif answer is not None and answer != output_id:
                problems.append(f"<answer> is {answer!r} but the agent's <agent_output_id> is {output_id!r}")
            node["id"] = output_id
            if output_id is not None:
                data["sink"] = output_id
    if problems:
        raise SpecError(problems)
    data["nodes"] = [
        {k: v for k, v in n.items() if not k.startswith("_")} for n in nodes
    ]
    return data


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def spec_to_xml(spec: GraphSpec, *, registry: AgentRegistry | None = None) -> str:
    """Write a spec in the orchestration text format of its DoM; parsing it gives the spec back."""
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
