"""Overhead: our compiled nodes vs. bare LangGraph nodes doing the same model call; compile time by size."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from benchmarks.common import chain, layered, timed
from mas_orchestra.compile import compile_spec
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel


class _Bare(TypedDict, total=False):
    question: str
    answers: dict[str, str]


def bare_chain(n: int, model: ScriptedChatModel) -> Any:
    """The same shape as ``chain(n)`` with plain LangGraph nodes that call the model once each."""
    builder = StateGraph(_Bare)
    prev = START
    for i in range(n):
        async def node(state: _Bare, i: int = i) -> dict[str, Any]:
            reply = await model.ainvoke([HumanMessage(content=f"step {i}: {state['question']}")])
            return {"answers": {**state.get("answers", {}), f"N{i}": str(reply.content)}}

        builder.add_node(f"N{i}", node)
        builder.add_edge(prev, f"N{i}")
        prev = f"N{i}"
    builder.add_edge(prev, END)
    return builder.compile()


def _per_node_us(graph: Any, n: int, runs: int) -> float:
    async def go() -> float:
        await graph.ainvoke({"question": "q"})  # warm up
        start = time.perf_counter()
        for _ in range(runs):
            await graph.ainvoke({"question": "q"})
        return (time.perf_counter() - start) / runs / n * 1e6

    return asyncio.run(go())


def run(quick: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    n, runs = 20, (10 if quick else 30)
    ours = _per_node_us(compile_spec(chain(n), ScriptedChatModel()), n, runs)
    bare = _per_node_us(bare_chain(n, ScriptedChatModel()), n, runs)
    rows.append({
        "benchmark": "overhead", "case": f"per node, chain-{n}, zero-latency model",
        "ours_us": round(ours, 1), "bare_langgraph_us": round(bare, 1), "ratio": round(ours / bare, 2),
    })
    for size in (5, 50, 200):
        spec = layered(size)
        data = spec.model_dump()
        validate_s = timed(lambda d=data: spec_from_data(d), repeat=3)
        compile_s = timed(lambda s=spec: compile_spec(s, ScriptedChatModel()), repeat=3)
        xml = spec.to_xml()
        from mas_orchestra.spec import parse_orchestration

        parse_s = timed(lambda t=xml: parse_orchestration(t), repeat=3)
        rows.append({
            "benchmark": "compile", "case": f"{size}-node spec", "parse_xml_ms": round(parse_s * 1e3, 2),
            "validate_ms": round(validate_s * 1e3, 2), "compile_ms": round(compile_s * 1e3, 2),
            "ratio": round(compile_s / validate_s, 2), "edges": len(spec.edges),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
