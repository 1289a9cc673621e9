"""Spec shapes and helpers shared by the benchmarks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mas_orchestra.spec import GraphSpec, spec_from_data


def chain(n: int, kind: str = "cot") -> GraphSpec:
    nodes = [{"id": f"N{i}", "agent": kind, "input": f"step {i}" + (f" after ${{N{i - 1}}}" if i else "")} for i in range(n)]
    return spec_from_data({"nodes": nodes, "edges": [{"source": f"N{i}", "target": f"N{i + 1}"} for i in range(n - 1)]})


def fan_in(width: int, kind: str = "cot") -> GraphSpec:
    nodes = [{"id": f"P{i}", "agent": kind, "input": f"part {i}"} for i in range(width)]
    nodes.append({"id": "J", "agent": "cot", "input": "join " + " ".join(f"${{P{i}}}" for i in range(width))})
    return spec_from_data({"nodes": nodes, "edges": [{"source": f"P{i}", "target": "J"} for i in range(width)]})


def diamond() -> GraphSpec:
    return spec_from_data({
        "nodes": [
            {"id": "A", "agent": "cot"},
            {"id": "B", "agent": "cot", "input": "left ${A}"},
            {"id": "C", "agent": "cot", "input": "right ${A}"},
            {"id": "D", "agent": "cot", "input": "join ${B} ${C}"},
        ],
        "edges": [{"source": "A", "target": "B"}, {"source": "A", "target": "C"},
                  {"source": "B", "target": "D"}, {"source": "C", "target": "D"}],
    })


def layered(n: int, width: int = 5) -> GraphSpec:
    """``n`` nodes in layers of ``width``, each node fed by every node of the previous layer's first two."""
    nodes, edges = [], []
    for i in range(n - 1):
        layer = i // width
        nodes.append({"id": f"N{i}", "agent": "cot", "input": f"task {i}"})
        if layer:
            for p in (layer - 1) * width, (layer - 1) * width + 1:
                if p < i:
                    edges.append({"source": f"N{p}", "target": f"N{i}"})
    nodes.append({"id": "SINK", "agent": "cot", "input": "combine"})
    has_out = {e["source"] for e in edges}
    edges.extend({"source": f"N{i}", "target": "SINK"} for i in range(n - 1) if f"N{i}" not in has_out)
    return spec_from_data({"nodes": nodes, "edges": edges})


def timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Best-of-``repeat`` wall seconds of a sync call (best-of reduces noise from other load)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def atimed(make: Callable[[], Awaitable[Any]], repeat: int = 3) -> float:
    async def once() -> float:
        start = time.perf_counter()
        await make()
        return time.perf_counter() - start

    return min(asyncio.run(once()) for _ in range(repeat))
