"""Concurrency: compiled graphs vs. the same specs run one agent at a time (as the original did).

A fixed-latency scripted model makes the critical path computable: wall / critical path shows how
close execution gets to the ideal (goal ≤ 1.15), sequential / wall the speed-up over the original.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agents import CallSettings
from agents.base import AgentResult
from benchmarks.common import atimed, chain, diamond, fan_in
from mas_orchestra.compile import compile_spec, render_task
from mas_orchestra.registry import BuildContext, default_registry
from mas_orchestra.spec import GraphSpec, spec_from_data
from mas_orchestra.testing import ScriptedChatModel

CALLS_ON_PATH = {"cot": 1, "sc": 1, "reflexion": 1, "search": 1}


def _node_path_calls(node: Any) -> int:
    if node.agent == "debate":
        return node.params.get("rounds", 5) + 1
    return CALLS_ON_PATH.get(node.agent, 1)


def critical_path_calls(spec: GraphSpec) -> int:
    best: dict[str, int] = {}
    for node_id in spec.topological_order():
        preds = spec.predecessors(node_id)
        best[node_id] = _node_path_calls(spec.node(node_id)) + max((best[p] for p in preds), default=0)
    return max(best.values())


def total_calls(spec: GraphSpec) -> int:
    total = 0
    for node in spec.nodes:
        if node.agent == "sc":
            total += node.params.get("samples", 5)
        elif node.agent == "debate":
            total += node.params.get("rounds", 5) * len(node.params["roles"]) + 1
        else:
            total += 1
    return total


async def run_sequentially(spec: GraphSpec, model: Any, question: str) -> str:
    """The original's execution: topological order, one agent at a time, sequential samples and turns."""
    results: dict[str, AgentResult] = {}
    for node_id in spec.topological_order():
        node = spec.node(node_id)
        kind = default_registry.get(node.agent)
        agent = kind.factory(model, kind.params.model_validate(node.params), BuildContext(node_id, CallSettings()))
        if hasattr(agent, "max_parallel"):
            agent.max_parallel = 1
        results[node_id] = await agent.arun(render_task(node, question, results))
    assert spec.sink is not None
    return results[spec.sink].answer


def shapes() -> dict[str, GraphSpec]:
    return {
        "chain-4": chain(4),
        "diamond-4": diamond(),
        "fan-in-8": fan_in(8),
        "sc-5 (internal)": spec_from_data({"nodes": [{"id": "S", "agent": "sc", "params": {"samples": 5}}]}),
        "debate-3x2 (internal)": spec_from_data(
            {"nodes": [{"id": "D", "agent": "debate", "params": {"roles": ["a", "b", "c"], "rounds": 2}}]}
        ),
        "fan-in-4 of sc-3": fan_in(4, "sc"),
    }


def run(quick: bool = False) -> list[dict[str, Any]]:
    latency = 0.05 if quick else 0.1
    rows = []
    for name, spec in shapes().items():
        model = ScriptedChatModel(delay=latency)
        graph = compile_spec(spec, model)
        wall = atimed(lambda g=graph: g.ainvoke({"question": "q"}), repeat=2 if quick else 3)
        seq = atimed(lambda s=spec: run_sequentially(s, ScriptedChatModel(delay=latency), "q"), repeat=1)
        ideal = critical_path_calls(spec) * latency
        rows.append({
            "benchmark": "concurrency", "case": name, "wall_s": round(wall, 4), "critical_path_s": round(ideal, 4),
            "sequential_s": round(seq, 4), "ratio": round(wall / ideal, 3), "speedup_vs_sequential": round(seq / wall, 2),
            "calls": total_calls(spec),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
