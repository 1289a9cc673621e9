"""The shape of a multi-agent system: how many agents, how deep, how wide, and how results really flow.

Edges say in which order agents run; only ``${id}`` references carry an upstream result into an agent's input
(an edge without a reference passes nothing). So the structure of a spec is measured twice: along its edges
(``depth``, ``width``) and along its references (``ref_depth``, ``wired``). These numbers are what a training
run logs per batch (``structure/*``), what an evaluation's ``summary.json`` reports, and what the studio plots.

- :func:`structure_of` measures one :class:`~mas_orchestra.spec.model.GraphSpec` (:func:`structure_of_data` one
  stored as plain data);
- :func:`summarize_structures` averages many (the direct answers and invalid texts are the caller's choice);
- :func:`ablate_wiring` removes every ``${id}`` reference from a spec's inputs (the edges stay): the causal
  control that shows whether a result came from the wiring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mas_orchestra.errors import SpecError
from mas_orchestra.spec.limits import PLACEHOLDER_RE, references

if TYPE_CHECKING:
    from mas_orchestra.spec.model import GraphSpec

__all__ = [
    "STRUCTURE_KEYS", "Structure", "ablate_wiring", "structure_of", "structure_of_data", "summarize_structures",
]

#: The mean keys of :func:`summarize_structures` (every batch logs all of them, zeros when nothing counted).
STRUCTURE_KEYS: tuple[str, ...] = (
    "agents_mean", "depth_mean", "ref_depth_mean", "width_mean", "edges_mean", "wired_share",
)


@dataclass(frozen=True)
class Structure:
    """The structure of one spec (a direct answer has zero agents and zero depth).

    Attributes:
        agents: agent nodes.
        edges: edges (after duplicates were dropped by validation).
        depth: agents on the longest path along edges (1 for a single agent).
        ref_depth: agents on the longest path along ``${id}`` references: the longest chain that actually
            hands a result on (1 when no agent references another).
        width: the largest set of agents no two of which are connected by a path (the most that could run at
            once).
        wired: non-source agents (agents with an incoming edge) whose input references a direct predecessor.
        non_source: agents with at least one incoming edge.
        kinds: agent nodes per kind.
    """

    agents: int
    edges: int
    depth: int
    ref_depth: int
    width: int
    wired: int
    non_source: int
    kinds: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """Plain data (for JSON records)."""
        return asdict(self)


def _longest_path(order: Sequence[str], parents: dict[str, set[str]]) -> int:
    """Nodes on the longest path of a DAG given in topological order (0 for no nodes)."""
    length: dict[str, int] = {}
    for node in order:
        length[node] = 1 + max((length[p] for p in parents.get(node, ())), default=0)
    return max(length.values(), default=0)


def _largest_antichain(order: Sequence[str], children: dict[str, set[str]]) -> int:
    """Size of the largest antichain of a DAG (Dilworth: nodes minus a maximum matching of its reachability)."""
    reach: dict[str, set[str]] = {}
    for node in reversed(order):
        below: set[str] = set()
        for child in children.get(node, ()):
            below.add(child)
            below |= reach[child]
        reach[node] = below
    match_of: dict[str, str] = {}  # right-side node -> left-side node matched to it

    def augment(node: str, seen: set[str]) -> bool:
        for other in reach[node]:
            if other in seen:
                continue
            seen.add(other)
            if other not in match_of or augment(match_of[other], seen):
                match_of[other] = node
                return True
        return False

    matched = sum(augment(node, set()) for node in order)
    return len(order) - matched


def structure_of(spec: GraphSpec) -> Structure:
    """Measure one validated spec.

    Args:
        spec: a validated spec (``GraphSpec`` construction already checked the DAG rules).

    Returns:
        Its :class:`Structure`.
    """
    return _measure(
        [(n.id, n.agent, n.input) for n in spec.nodes], [(e.source, e.target) for e in spec.edges]
    )


def structure_of_data(spec: Mapping[str, Any]) -> Structure:
    """Measure a spec stored as plain data (``GraphSpec.model_dump()``, e.g. the ``spec`` of a results record).

    Args:
        spec: a mapping with ``nodes`` (each with ``id``, ``agent``, ``input``) and ``edges`` (each with
            ``source`` and ``target``).

    Returns:
        Its :class:`Structure`.

    Raises:
        SpecError: when the edges name unknown agents or form a cycle (not a validated spec).
    """
    nodes = [(str(n.get("id")), str(n.get("agent")), str(n.get("input") or "")) for n in spec.get("nodes") or []]
    edges = [(str(e.get("source")), str(e.get("target"))) for e in spec.get("edges") or []]
    return _measure(nodes, edges)


def _measure(nodes: Sequence[tuple[str, str, str]], edge_list: Sequence[tuple[str, str]]) -> Structure:
    ids = [node_id for node_id, _, _ in nodes]
    if not ids:
        return Structure(agents=0, edges=0, depth=0, ref_depth=0, width=0, wired=0, non_source=0, kinds={})
    known = set(ids)
    parents: dict[str, set[str]] = {i: set() for i in ids}
    children: dict[str, set[str]] = {i: set() for i in ids}
    for source, target in dict.fromkeys(edge_list):
        if source not in known or target not in known:
            raise SpecError(f"edge {source} -> {target} names an agent the spec does not declare")
        parents[target].add(source)
        children[source].add(target)
    order = _topological(ids, parents, children)
    ref_parents = {node_id: {r for r in references(text) if r in known and r != node_id}
                   for node_id, _, text in nodes}
    non_source = [i for i in ids if parents[i]]
    kinds: dict[str, int] = {}
    for _, kind, _ in nodes:
        kinds[kind] = kinds.get(kind, 0) + 1
    return Structure(
        agents=len(ids),
        edges=sum(len(c) for c in children.values()),
        depth=_longest_path(order, parents),
        ref_depth=_longest_path(order, ref_parents),
        width=_largest_antichain(order, children),
        wired=sum(1 for i in non_source if ref_parents[i] & parents[i]),
        non_source=len(non_source),
        kinds=kinds,
    )


def _topological(ids: Sequence[str], parents: dict[str, set[str]], children: dict[str, set[str]]) -> list[str]:
    waiting = {i: len(parents[i]) for i in ids}
    ready = [i for i in ids if not waiting[i]]
    order: list[str] = []
    while ready:
        node = ready.pop()
        order.append(node)
        for child in children[node]:
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    if len(order) != len(ids):
        raise SpecError("the edges form a cycle: structure is measured on validated specs only")
    return order


def summarize_structures(structures: Iterable[Structure], kinds: Iterable[str] = ()) -> dict[str, float]:
    """Means over many specs: the :data:`STRUCTURE_KEYS` and ``kind_share/<kind>``.

    Args:
        structures: one per spec counted (a direct answer counts as zero agents).
        kinds: agent kinds to report even when none was used (their share is then 0).

    Returns:
        ``agents_mean``, ``depth_mean``, ``ref_depth_mean``, ``width_mean``, ``edges_mean`` (means per spec),
        ``wired_share`` (wired agents over all non-source agents of all specs) and ``kind_share/<kind>`` (that
        kind's share of all agent nodes); all 0.0 when there is nothing to count.
    """
    items = list(structures)
    n = len(items)
    out: dict[str, float] = {}
    for key, attr in (("agents_mean", "agents"), ("depth_mean", "depth"), ("ref_depth_mean", "ref_depth"),
                      ("width_mean", "width"), ("edges_mean", "edges")):
        out[key] = sum(getattr(s, attr) for s in items) / n if n else 0.0
    non_source = sum(s.non_source for s in items)
    out["wired_share"] = sum(s.wired for s in items) / non_source if non_source else 0.0
    counts: dict[str, int] = dict.fromkeys(kinds, 0)
    for s in items:
        for kind, count in s.kinds.items():
            counts[kind] = counts.get(kind, 0) + count
    total = sum(counts.values())
    for kind in sorted(counts):
        out[f"kind_share/{kind}"] = counts[kind] / total if total else 0.0
    return out


def ablate_wiring(spec: GraphSpec) -> GraphSpec:
    """The same graph with every ``${id}`` reference removed from the agents' inputs; the edges stay.

    An agent whose input was only references gets an empty input, which means the original question. Used as
    a causal control (``mas-orchestra eval --ablate-wiring``): if accuracy survives, the wiring did not matter.

    Args:
        spec: a validated high-DoM spec.

    Returns:
        A new spec (the given one is not changed).

    Raises:
        SpecError: for a low-DoM spec, which has no wiring to remove.
    """
    if spec.dom != "high":
        raise SpecError("ablate_wiring needs a high-DoM spec: a low-DoM plan has one agent and no wiring")
    nodes = []
    for node in spec.nodes:
        text = PLACEHOLDER_RE.sub("", node.input)
        nodes.append(node.model_copy(update={"input": " ".join(text.split())}))
    return spec.model_copy(update={"nodes": nodes})
