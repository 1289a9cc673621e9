"""A spec as the page draws it: nodes (kind, sub-task, sink) and edges labelled with the ``${id}`` data flow.

The layout itself (layers, crossing reduction, coordinates) is dagre's, in the browser.
"""

from __future__ import annotations

import re
from typing import Any

from mas_orchestra.spec import GraphSpec

__all__ = ["graph_of", "spec_graph_or_problems"]

_REFERENCE = re.compile(r"\$\{\s*([A-Za-z0-9_]+)\s*\}")


def graph_of(spec: GraphSpec) -> dict[str, Any]:
    """``{"nodes": [...], "edges": [...], "sink", "direct_answer"}`` of a validated spec.

    An edge's ``label`` is the placeholder through which the target reads the source's output
    (``${A}``); an edge whose target does not name its source in the input only orders the two nodes.

    Args:
        spec: The validated spec.
    """
    inputs = {node.id: node.input for node in spec.nodes}
    nodes = [
        {
            "id": node.id, "agent": node.agent, "description": node.description, "input": node.input,
            "params": node.params, "sink": node.id == spec.sink,
        }
        for node in spec.nodes
    ]
    edges = []
    for edge in spec.edges:
        named = edge.source in set(_REFERENCE.findall(inputs.get(edge.target, "")))
        edges.append({"source": edge.source, "target": edge.target, "label": f"${{{edge.source}}}" if named else ""})
    return {"nodes": nodes, "edges": edges, "sink": spec.sink, "direct_answer": spec.direct_answer}


def spec_graph_or_problems(data: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The graph of a stored spec (a dict), or ``None`` and the problems that kept it from validating.

    Args:
        data: The stored spec (empty: no graph, no problems).
    """
    from mas_orchestra.errors import SpecError
    from mas_orchestra.spec import spec_from_data

    if not data:
        return None, []
    try:
        return graph_of(spec_from_data(data)), []
    except SpecError as exc:
        return None, list(exc.problems)
