"""The graph spec: a declarative multi-agent system, validated before anything runs.

``GraphSpec`` is a pydantic model (and so a JSON / function-calling schema). Constructing one runs
every structural check; :func:`parse_spec` and :func:`parse_orchestration` turn any failure into a
:class:`~mas_orchestra.errors.SpecError` that lists every problem with its location.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict, deque
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from mas_orchestra.errors import SpecError
from mas_orchestra.registry import AgentRegistry, default_registry

__all__ = [
    "MAX_INPUT_CHARS",
    "MAX_NODES",
    "PLACEHOLDER_RE",
    "AgentNode",
    "Edge",
    "GraphSpec",
    "parse_spec",
    "references",
    "spec_from_data",
]

MAX_NODES = 256
MAX_INPUT_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 2_000
MAX_THINKING_CHARS = 200_000
ID_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
PLACEHOLDER_RE = re.compile(r"\$\{\s*([^{}\s]*)\s*\}")
# State keys of the compiled graph; LangGraph forbids node names equal to them.
RESERVED_IDS = frozenset({"question", "results", "final_answer", "direct_answer"})
# Tags of the orchestration format; text fields may not contain them (they would not round-trip).
_MARKUP_RE = re.compile(
    r"<\s*/?\s*(agent|agent_id|agent_name|agent_description|required_arguments|agent_input|"
    r"debate_roles|edge|from|to|agent_output_id|answer|thinking)\s*>",
    re.I,
)


def references(text: str) -> list[str]:
    """The ids referenced as ``${id}`` in a text, in order of appearance."""
    return [m.group(1) for m in PLACEHOLDER_RE.finditer(text)]


class AgentNode(BaseModel):
    """One sub-agent: an instance of a registered agent kind."""

    model_config = ConfigDict(str_strip_whitespace=True, extra="forbid")

    id: str = Field(..., description="Unique id, letters, digits and '_' (e.g. 'WS_1').")
    agent: str = Field(
        ..., description="Agent kind: cot, sc, reflexion, debate, search (block names and aliases accepted)."
    )
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS, description="Short purpose.")
    input: str = Field(
        "",
        max_length=MAX_INPUT_CHARS,
        description="The sub-task; may reference upstream outputs as ${ID}. Empty = the original question.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Kind parameters, e.g. roles for debate, samples for sc."
    )


class Edge(BaseModel):
    """Data flows from ``source`` to ``target``."""

    model_config = ConfigDict(str_strip_whitespace=True, extra="forbid")

    source: str
    target: str


class GraphSpec(BaseModel):
    """A whole multi-agent system: agents, the DAG between them and its single sink."""

    model_config = ConfigDict(str_strip_whitespace=True, extra="forbid")

    nodes: list[AgentNode] = Field(default_factory=list, max_length=MAX_NODES)
    edges: list[Edge] = Field(default_factory=list, max_length=MAX_NODES * (MAX_NODES - 1) // 2)
    sink: str | None = Field(None, description="The node whose answer is the system's answer.")
    direct_answer: str | None = Field(
        None, max_length=MAX_INPUT_CHARS, description="Low DoM: answered without any agent."
    )
    thinking: str = Field("", max_length=MAX_THINKING_CHARS)
    dom: Literal["high", "low"] = Field("high", description="Degree of MAS the spec was written for.")

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> GraphSpec:
        registry = (info.context or {}).get("registry") if info is not None else None
        problems = check_spec(self, registry or default_registry)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # -- conveniences -------------------------------------------------------------------------

    def node(self, node_id: str) -> AgentNode:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"no node {node_id!r}; nodes: {', '.join(n.id for n in self.nodes)}")

    def predecessors(self, node_id: str) -> list[str]:
        return [e.source for e in self.edges if e.target == node_id]

    def topological_order(self) -> list[str]:
        return _topological(self)[0]

    def layers(self) -> list[list[str]]:
        """Nodes grouped by depth: each layer can run concurrently once the previous ones finished."""
        depth: dict[str, int] = {}
        for node_id in self.topological_order():
            preds = self.predecessors(node_id)
            depth[node_id] = 1 + max((depth[p] for p in preds), default=-1)
        out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for node_id, d in depth.items():
            out[d].append(node_id)
        return out

    def spec_hash(self) -> str:
        """Stable short hash of the structure (nodes, edges, parameters), for tracing metadata."""
        payload = self.model_dump(exclude={"thinking"})
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def agent_counts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for node in self.nodes:
            counts[node.agent] += 1
        return dict(counts)

    def to_xml(self, *, registry: AgentRegistry | None = None) -> str:
        """The orchestration text of this spec, in the original format of its DoM."""
        from mas_orchestra.xml_format import spec_to_xml

        return spec_to_xml(self, registry=registry)

    def to_mermaid(self, *, registry: AgentRegistry | None = None) -> str:
        """A Mermaid flowchart of the spec."""
        registry = registry or default_registry
        lines = ["flowchart TD"]
        if not self.nodes:
            text = " ".join((self.direct_answer or "").split()).replace('"', "'")[:80]  # one line, as Mermaid needs
            lines.append(f'    answer(["direct answer: {text}"])')
            return "\n".join(lines)
        for node in self.nodes:
            kind = registry.resolve(node.agent)
            label = f"{node.id} · {kind.block if kind else node.agent}"
            shape = f'(["{label}"])' if node.id == self.sink else f'["{label}"]'
            lines.append(f"    {node.id}{shape}")
        lines.extend(f"    {e.source} --> {e.target}" for e in self.edges)
        return "\n".join(lines)

    @classmethod
    def from_text(
        cls, text: str, *, dom: Literal["high", "low"] | None = None, registry: AgentRegistry | None = None
    ) -> GraphSpec:
        """Parse JSON (our schema) or the orchestration text format, whichever ``text`` is.

        Without ``dom``, text with an ``<agent_output_id>`` and no ``<agent_id>`` is read as low DoM.
        ``registry`` (default: the default registry) says which agent kinds and parameter tags exist, so a
        spec naming a user-registered kind loads with the registry that kind was registered in.
        """
        if text.lstrip().startswith("{"):
            return parse_spec(text, registry=registry, dom=dom)  # dom: for JSON that states none
        from mas_orchestra.xml_format import detect_dom, parse_orchestration

        return parse_orchestration(text, dom=dom or detect_dom(text), registry=registry)

    @classmethod
    def from_file(
        cls, path: str | Path, *, dom: Literal["high", "low"] | None = None, registry: AgentRegistry | None = None
    ) -> GraphSpec:
        """Read a spec from a ``.json`` or orchestration-text (``.xml``/``.txt``) file (see :meth:`from_text`)."""
        return cls.from_text(Path(path).read_text(encoding="utf-8"), dom=dom, registry=registry)

    def to_file(self, path: str | Path, *, registry: AgentRegistry | None = None) -> Path:
        """Write JSON for ``.json`` paths, the orchestration text otherwise (rendered with ``registry``)."""
        path = Path(path)
        text = self.model_dump_json(indent=2) if path.suffix == ".json" else self.to_xml(registry=registry)
        path.write_text(text + "\n", encoding="utf-8")
        return path


# -- validation -------------------------------------------------------------------------------


def _topological(spec: GraphSpec) -> tuple[list[str], set[str]]:
    """Kahn's order over declared nodes; the second value holds nodes left on cycles."""
    ids = [n.id for n in spec.nodes]
    known = set(ids)
    indeg = dict.fromkeys(ids, 0)
    succ: dict[str, list[str]] = defaultdict(list)
    for e in spec.edges:
        if e.source in known and e.target in known and e.source != e.target:
            succ[e.source].append(e.target)
            indeg[e.target] += 1
    queue = deque(i for i in ids if indeg[i] == 0)
    order: list[str] = []
    while queue:
        cur = queue.popleft()
        order.append(cur)
        for nxt in succ[cur]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                queue.append(nxt)
    return order, known - set(order)


def _find_cycle(spec: GraphSpec, remaining: set[str]) -> list[str]:
    """One cycle among ``remaining`` nodes (iterative, so a deep graph cannot overflow the stack)."""
    succ: dict[str, list[str]] = defaultdict(list)
    for e in spec.edges:
        if e.source in remaining and e.target in remaining and e.source != e.target:
            succ[e.source].append(e.target)
    start = min(remaining, key=[n.id for n in spec.nodes].index)
    path, seen = [start], {start: 0}
    while True:  # every node left by Kahn's algorithm has a successor that is also left
        nxt = succ[path[-1]][0]
        if nxt in seen:
            return [*path[seen[nxt] :], nxt]
        seen[nxt] = len(path)
        path.append(nxt)


def _ancestors(spec: GraphSpec, order: list[str]) -> dict[str, set[str]]:
    preds: dict[str, set[str]] = defaultdict(set)
    for e in spec.edges:
        preds[e.target].add(e.source)
    result: dict[str, set[str]] = {}
    for node_id in order:
        acc: set[str] = set()
        for p in preds[node_id]:
            acc.add(p)
            acc |= result.get(p, set())
        result[node_id] = acc
    return result


def check_spec(spec: GraphSpec, registry: AgentRegistry) -> list[str]:
    """Every violation of the spec rules, each with its location (empty list = valid).

    Normalises as it goes: agent aliases become canonical kind names, parameters are validated
    against the kind's model (and stored as given, so round trips stay lossless).
    """
    problems: list[str] = []
    ids = [n.id for n in spec.nodes]
    seen: set[str] = set()
    for node in spec.nodes:
        where = f"agent {node.id!r}"
        if not ID_RE.fullmatch(node.id):
            problems.append(f"{where}: bad id; use 1-64 letters, digits or '_'")
        elif node.id.startswith("__") or node.id in RESERVED_IDS:
            problems.append(f"{where}: id is reserved; choose another (reserved: {sorted(RESERVED_IDS)})")
        if node.id in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(node.id)
        kind = registry.resolve(node.agent)
        if kind is None:
            problems.append(f"{where}: unknown agent {node.agent!r}; valid: {', '.join(registry.block_names())}")
        else:
            node.agent = kind.name
            try:
                checked = kind.params.model_validate(node.params)
            except ValidationError as exc:
                for err in exc.errors():
                    loc = ".".join(str(p) for p in err["loc"]) or "params"
                    tag = kind.xml_tag(str(err["loc"][0])) if err["loc"] else "params"
                    problems.append(f"{where} ({kind.block}): parameter {loc!r} (<{tag}>): {err['msg']}")
            else:
                node.params = checked.model_dump(include=set(node.params))
        for field_name in ("input", "description"):
            marked = _MARKUP_RE.search(getattr(node, field_name))
            if marked:
                problems.append(f"{where}: {field_name} contains orchestration markup {marked.group(0)!r}")
    for text, where in ((spec.thinking, "thinking"), (spec.direct_answer or "", "answer")):
        marked = _MARKUP_RE.search(text)
        if marked:
            problems.append(f"{where}: contains orchestration markup {marked.group(0)!r}")

    if not spec.nodes:
        if spec.direct_answer is None:
            problems.append("no agents and no direct answer: declare at least one <agent> or an <answer>")
        if spec.edges:
            problems.append("edges given but no agents declared")
        if spec.sink is not None:
            problems.append(f"sink {spec.sink!r} given but no agents declared")
        return problems
    if spec.direct_answer is not None:
        problems.append("a direct answer cannot be combined with agents; give one or the other")
    if spec.dom == "low":
        if len(spec.nodes) > 1:
            problems.append(f"low DoM allows exactly one agent, found {len(spec.nodes)}: {', '.join(ids)}")
        if spec.edges:
            problems.append("low DoM allows no edges")

    known = set(ids)
    pairs: set[tuple[str, str]] = set()
    for i, e in enumerate(spec.edges, 1):
        where = f"edge {i} ({e.source} -> {e.target})"
        for end, value in (("from", e.source), ("to", e.target)):
            if value not in known:
                problems.append(f"{where}: <{end}> names undeclared agent {value!r}")
        if e.source == e.target:
            problems.append(f"{where}: self-loop")
        if (e.source, e.target) in pairs:
            problems.append(f"{where}: duplicate edge")
        pairs.add((e.source, e.target))
    if len(spec.nodes) > 1 and not spec.edges:
        problems.append(f"{len(spec.nodes)} agents but no edges: connect them into one graph with one sink")
        return problems

    order, on_cycles = _topological(spec)
    if on_cycles:
        problems.append("cycle: " + " -> ".join(_find_cycle(spec, on_cycles)))
        return problems
    has_out = {e.source for e in spec.edges if e.source in known}
    sinks = [i for i in ids if i not in has_out]
    if len(sinks) != 1:
        problems.append(
            f"the graph needs exactly one sink (an agent with no outgoing edge), found {len(sinks)}: "
            f"{', '.join(sinks) or 'none'}"
        )
    elif spec.sink is not None and spec.sink != sinks[0]:
        problems.append(f"sink {spec.sink!r} is not the graph's sink {sinks[0]!r}")
    else:
        spec.sink = sinks[0]
    ancestors = _ancestors(spec, order)
    for node in spec.nodes:
        for ref in references(node.input):
            where = f"agent {node.id!r}: input references ${{{ref}}}"
            if ref not in known:
                problems.append(f"{where}, which is not a declared agent")
            elif ref == node.id:
                problems.append(f"{where}, its own output")
            elif ref not in ancestors.get(node.id, set()):
                problems.append(
                    f"{where}, but there is no edge path {ref} -> {node.id}; "
                    f"add <from>{ref}</from><to>{node.id}</to>"
                )
    return problems


def _problems_of(exc: ValidationError) -> list[str]:
    problems: list[str] = []
    for err in exc.errors():
        loc = err.get("loc", ())
        msg = str(err.get("msg", ""))
        if not loc and err.get("type") == "value_error":
            problems.extend(msg.removeprefix("Value error, ").split("\n"))
            continue
        where = _location(loc)
        problems.append(f"{where}: {msg}")
    return problems


def _location(loc: tuple[Any, ...]) -> str:
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        rest = ".".join(str(p) for p in loc[2:])
        return f"agent #{loc[1] + 1}" + (f" field {rest!r}" if rest else "")
    if len(loc) >= 2 and loc[0] == "edges" and isinstance(loc[1], int):
        rest = ".".join(str(p) for p in loc[2:])
        return f"edge {loc[1] + 1}" + (f" field {rest!r}" if rest else "")
    return ".".join(str(p) for p in loc) or "spec"


def spec_from_data(data: Any, *, registry: AgentRegistry | None = None) -> GraphSpec:
    """Validate a mapping into a :class:`GraphSpec`, raising :class:`SpecError` with all problems."""
    if not isinstance(data, dict):
        raise SpecError(f"spec must be a JSON object, got {type(data).__name__}")
    try:
        return GraphSpec.model_validate(data, context={"registry": registry or default_registry})
    except ValidationError as exc:
        raise SpecError(_problems_of(exc)) from None
    except RecursionError:
        raise SpecError("spec is nested too deeply") from None


def parse_spec(
    text: str | bytes, *, registry: AgentRegistry | None = None, dom: Literal["high", "low"] | None = None
) -> GraphSpec:
    """Parse our JSON spec format; every failure is a :class:`SpecError`. ``dom``: the DoM of a spec that
    does not state one (default: the schema's, high)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise TypeError(f"parse_spec expects str, got {type(text).__name__}")
    from mas_orchestra.xml_format import MAX_TEXT_CHARS

    if len(text) > MAX_TEXT_CHARS:
        raise SpecError(f"spec text is {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError("JSON is nested too deeply") from None
    if dom is not None and isinstance(data, dict):
        data.setdefault("dom", dom)
    return spec_from_data(data, registry=registry)
