"""MASBench verification: re-derive every answer and axis property of a row from its graph."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from mas_orchestra.bench.masbench.graph import AXES, MOD, MULTI_ANSWER_AXES, OPS, ancestors, evaluate, op_depths

__all__ = ["verify"]

def _check_graph(graph: Any) -> list[str]:
    if not isinstance(graph, dict) or not graph:
        return ["graph must be a non-empty object"]
    problems = []
    for name, node in graph.items():
        op = node.get("op") if isinstance(node, dict) else None
        if op == "const":
            v = node.get("value")
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MOD:
                problems.append(f"{name!r}: const value must be an int in 0..{MOD - 1}")
        elif op in OPS:
            inputs = node.get("inputs")
            if not isinstance(inputs, list) or not inputs or len(set(inputs)) != len(inputs):
                problems.append(f"{name!r}: inputs must be a non-empty list of distinct names")
        else:
            problems.append(f"{name!r}: op must be const, {', '.join(OPS)}")
    return problems


def _verify_row(row: dict[str, Any]) -> list[str]:
    axis, value, graph = row.get("axis"), row.get("value"), row.get("graph")
    if axis not in AXES:
        return [f"axis {axis!r} is not one of {', '.join(AXES)}"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [f"value {value!r} is not a positive integer"]
    problems = _check_graph(graph)
    if problems or not isinstance(graph, dict):  # (the check rejects a non-dict; this tells the type checker)
        return problems
    try:
        values = evaluate(graph)
    except ValueError as exc:
        return [str(exc)]
    targets = row.get("targets")
    if not isinstance(targets, list) or not targets or any(t not in graph for t in targets):
        return ["targets must be a non-empty list of quantities in the graph"]
    expected = [str(values[t]) for t in targets]
    answer = row.get("answer")
    if axis in MULTI_ANSWER_AXES:
        if answer != expected:
            problems.append(f"answer {answer!r} != re-derived {expected!r}")
    elif len(targets) != 1 or answer != expected[0]:
        problems.append(f"answer {answer!r} != re-derived {expected[0]!r}")

    question = row.get("question", "")
    missing = [name for name in graph if name not in question]
    if missing:
        problems.append(f"question does not name {len(missing)} quantities, e.g. {missing[0]!r}")

    depth = op_depths(graph)
    if axis == "depth" and depth[targets[0]] != value:
        problems.append(f"target depth {depth[targets[0]]} != value {value}")
    if axis == "breadth":
        widest = max((len(n["inputs"]) for n in graph.values() if n["op"] != "const"), default=0)
        if widest != value:
            problems.append(f"largest fan-in {widest} != value {value}")
    if axis in MULTI_ANSWER_AXES and len(targets) != value:
        problems.append(f"{len(targets)} targets != value {value}")
    if axis == "parallel":
        seen: set[str] = set()
        for t in targets:
            anc = ancestors(graph, t)
            if anc & seen:
                problems.append(f"problem for {t!r} shares quantities with an earlier one")
            seen |= anc
    if axis == "horizon":
        for prev, t in itertools.pairwise(targets):
            if prev not in ancestors(graph, t):
                problems.append(f"{t!r} does not depend on the previous target {prev!r}")
    distractors = row.get("distractors", [])
    if axis == "robustness":
        if len(distractors) != value:
            problems.append(f"{len(distractors)} distractors != value {value}")
        names = [d.get("quantity") for d in distractors]
        if len(set(names)) != len(names):
            problems.append("two distractors name the same quantity")
        for d in distractors:
            name, claimed = d.get("quantity"), d.get("claimed")
            if name not in graph:
                problems.append(f"distractor names unknown quantity {name!r}")
            elif claimed == values[name]:
                problems.append(f"distractor for {name!r} claims the true value {claimed}")
            elif f"the {name} is {claimed}" not in question:
                problems.append(f"distractor for {name!r} is not stated in the question")
    elif distractors:
        problems.append("only robustness rows carry distractors")
    return problems


def verify(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Re-derive every answer and axis property from ``graph``/``targets``; one message per problem.

    Args:
        rows: Generated rows (as :func:`~mas_orchestra.bench.masbench.generate` writes them).

    Returns:
        The problems found; an empty list means every row is consistent.
    """
    problems: list[str] = []
    seen_ids: set[str] = set()
    for i, row in enumerate(rows):
        rid = row.get("id", f"#{i}") if isinstance(row, dict) else f"#{i}"
        if not isinstance(row, dict):
            problems.append(f"{rid}: not an object")
            continue
        if rid in seen_ids:
            problems.append(f"{rid}: duplicate id")
        seen_ids.add(rid)
        problems.extend(f"{rid}: {p}" for p in _verify_row(row))
    return problems
