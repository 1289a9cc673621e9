"""The structural rules of a spec: every violation, each with its location.

:func:`check_spec` is what :class:`~mas_orchestra.spec.model.GraphSpec` runs when it is built. It reads the
spec's fields (normalising each node's kind name and parameters, filling in the sink), so it takes any
:class:`SpecShape`: this module does not import the model that imports it, not even for type hints.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from mas_orchestra.registry import AgentRegistry
from mas_orchestra.spec.limits import ID_RE, MARKUP_RE, RESERVED_IDS, THINKING_CLOSE_RE, references

__all__ = ["EdgeShape", "NodeShape", "SpecShape", "check_spec", "problems_of", "topological_order"]


class NodeShape(Protocol):
    """The fields of a spec node the rules read; ``agent`` and ``params`` are normalised in place."""

    agent: str
    params: dict[str, Any]

    @property
    def id(self) -> str:
        """The node's id."""

    @property
    def input(self) -> str:
        """The node's input text (may reference ``${id}`` of earlier nodes)."""

    @property
    def description(self) -> str:
        """The node's short purpose."""


class EdgeShape(Protocol):
    """The two ends of a spec edge."""

    @property
    def source(self) -> str:
        """The id the edge starts at."""

    @property
    def target(self) -> str:
        """The id the edge ends at."""


class SpecShape(Protocol):
    """The fields of a spec the rules read; :class:`~mas_orchestra.spec.model.GraphSpec` has them.

    ``sink`` is filled in when the spec leaves it out.
    """

    sink: str | None

    @property
    def nodes(self) -> Sequence[NodeShape]:
        """The agent nodes."""

    @property
    def edges(self) -> Sequence[EdgeShape]:
        """The edges between them."""

    @property
    def direct_answer(self) -> str | None:
        """The answer of a spec without agents (``None`` otherwise)."""

    @property
    def thinking(self) -> str:
        """The orchestrator's reasoning before the spec."""

    @property
    def dom(self) -> str:
        """The degree of multi-agentness it was written for."""


def topological_order(spec: SpecShape) -> tuple[list[str], set[str]]:
    """Kahn's order over declared nodes; the second value holds nodes left on cycles.

    Args:
        spec: The spec.

    Returns:
        ``(order, nodes left on cycles)``.
    """
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


def _find_cycle(spec: SpecShape, remaining: set[str]) -> list[str]:
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


def _ancestors(spec: SpecShape, order: list[str]) -> dict[str, set[str]]:
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


def check_spec(spec: SpecShape, registry: AgentRegistry) -> list[str]:
    """Every violation of the spec rules, each with its location (empty list = valid).

    Normalises as it goes: agent aliases become canonical kind names, parameters are validated
    against the kind's model (and stored as given, so round trips stay lossless).

    Args:
        spec: The spec being validated (normalised in place).
        registry: Which agent kinds exist and what parameters they take.

    Returns:
        The problems, each naming where it is.
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
            marked = MARKUP_RE.search(getattr(node, field_name))
            if marked:
                problems.append(f"{where}: {field_name} contains orchestration markup {marked.group(0)!r}")
    # Tags mentioned in thinking are prose (the reader skips them); only a closing tag would end it early.
    if THINKING_CLOSE_RE.search(spec.thinking):
        problems.append("thinking: contains '</thinking>', which would end it early; remove it")
    marked = MARKUP_RE.search(spec.direct_answer or "")
    if marked:
        problems.append(f"answer: contains orchestration markup {marked.group(0)!r}")

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
    for i, e in enumerate(spec.edges, 1):
        where = f"edge {i} ({e.source} -> {e.target})"
        for end, value in (("from", e.source), ("to", e.target)):
            if value not in known:
                problems.append(f"{where}: <{end}> names undeclared agent {value!r}")
        if e.source == e.target:
            problems.append(f"{where}: self-loop")
    if len(spec.nodes) > 1 and not spec.edges:
        problems.append(f"{len(spec.nodes)} agents but no edges: connect them into one graph with one sink")
        return problems

    order, on_cycles = topological_order(spec)
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


def problems_of(exc: ValidationError) -> list[str]:
    """The problems of a failed ``GraphSpec`` validation, one per violation, each with its location.

    Args:
        exc: The pydantic ``ValidationError``.

    Returns:
        The problems.
    """
    problems: list[str] = []
    for err in exc.errors():
        loc = err.get("loc", ())
        msg = str(err.get("msg", ""))
        if not loc and err.get("type") == "value_error":
            problems.extend(msg.removeprefix("Value error, ").split("\n"))
            continue
        problems.append(f"{_location(loc)}: {msg}")
    return problems


def _location(loc: tuple[Any, ...]) -> str:
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        rest = ".".join(str(p) for p in loc[2:])
        return f"agent #{loc[1] + 1}" + (f" field {rest!r}" if rest else "")
    if len(loc) >= 2 and loc[0] == "edges" and isinstance(loc[1], int):
        rest = ".".join(str(p) for p in loc[2:])
        return f"edge {loc[1] + 1}" + (f" field {rest!r}" if rest else "")
    return ".".join(str(p) for p in loc) or "spec"
