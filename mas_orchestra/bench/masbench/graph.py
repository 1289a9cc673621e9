"""MASBench quantity graphs: the constants of the benchmark and the arithmetic that generation and
verification share (every quantity is a constant or the sum / difference / product of others, mod 23)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "AXES",
    "MAX_VALUE",
    "MIN_VALUE",
    "MOD",
    "MULTI_ANSWER_AXES",
    "OPS",
    "SPLITS",
    "ancestors",
    "check_choice",
    "evaluate",
    "op_depths",
]

MOD = 23
AXES: tuple[str, ...] = ("depth", "horizon", "breadth", "parallel", "robustness")
SPLITS: tuple[str, ...] = ("train", "test")
MAX_VALUE = 20
MIN_VALUE: dict[str, int] = {"depth": 1, "horizon": 1, "breadth": 2, "parallel": 1, "robustness": 1}
OPS: tuple[str, ...] = ("add", "sub", "mul")
MULTI_ANSWER_AXES = frozenset({"horizon", "parallel"})


def check_choice(what: str, got: Any, valid: Iterable[str]) -> None:
    """Raise ``ValueError`` naming ``what`` and the valid values unless ``got`` is one of them.

    Args:
        what: What is being chosen (``"axis"``, ``"split"`` …), for the message.
        got: The value given.
        valid: The valid values.
    """
    valid = tuple(valid)
    if got not in valid:
        raise ValueError(f"unknown {what} {got!r}; valid {what}s: {', '.join(valid)}")


def apply_op(op: str, values: Sequence[int]) -> int:
    """One operation (add / sub = first minus the rest / mul) modulo 23.

    Args:
        op: ``add``, ``sub`` or ``mul``.
        values: The inputs' values.

    Raises:
        ValueError: An unknown ``op``.
    """
    if op == "add":
        return sum(values) % MOD
    if op == "sub":
        return (values[0] - sum(values[1:])) % MOD
    if op == "mul":
        return math.prod(values) % MOD
    raise ValueError(f"unknown op {op!r}; valid ops: const, {', '.join(OPS)}")


def _topo_order(graph: dict[str, dict[str, Any]]) -> list[str]:
    """Names in dependency order; ValueError on a cycle or an undefined input."""
    indeg: dict[str, int] = {}
    users: dict[str, list[str]] = {n: [] for n in graph}
    for name, node in graph.items():
        inputs = node.get("inputs", []) if node.get("op") != "const" else []
        for x in inputs:
            if x not in graph:
                raise ValueError(f"{name!r} uses undefined quantity {x!r}")
            users[x].append(name)
        indeg[name] = len(inputs)
    ready = [n for n, d in indeg.items() if d == 0]
    order: list[str] = []
    while ready:
        n = ready.pop()
        order.append(n)
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(graph):
        raise ValueError("the graph has a cycle")
    return order


def evaluate(graph: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The value (mod 23) of every quantity in ``graph``.

    Args:
        graph: The quantities by name: ``const`` ones with a ``value``, the others with an ``op`` and ``inputs``.
    """
    values: dict[str, int] = {}
    for name in _topo_order(graph):
        node = graph[name]
        if node["op"] == "const":
            values[name] = int(node["value"]) % MOD
        else:
            values[name] = apply_op(node["op"], [values[x] for x in node["inputs"]])
    return values


def op_depths(graph: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Operations on the longest chain ending at each quantity (a constant is 0).

    Args:
        graph: The quantities by name, each with an ``op`` and (unless ``const``) its ``inputs``.
    """
    depth: dict[str, int] = {}
    for name in _topo_order(graph):
        node = graph[name]
        depth[name] = 0 if node["op"] == "const" else 1 + max(depth[x] for x in node["inputs"])
    return depth


def ancestors(graph: dict[str, dict[str, Any]], name: str) -> set[str]:
    """``name`` and every quantity it depends on.

    Args:
        graph: The quantities by name, each with an ``op`` and (unless ``const``) its ``inputs``.
        name: The quantity.
    """
    seen = {name}
    stack = [name]
    while stack:
        node = graph[stack.pop()]
        for x in node.get("inputs", []) if node["op"] != "const" else []:
            if x not in seen:
                seen.add(x)
                stack.append(x)
    return seen
