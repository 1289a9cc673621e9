"""The embedded model with and without a local MCP calculator: accuracy, calls and tool calls on MASBench depth-2.

Both conditions run the same problems with the same embedded model as orchestrator and sub-agents (constrained
decoding on, as by default); the tool condition offers the calculator server's tools (tests/mcp_servers/
calculator.py over stdio), so the orchestrator may give ``ToolAgent`` nodes the calculator. Numbers on a 135M
model are small and noisy; they show what the pieces do, not what a real model gains.

``--fixed`` skips the orchestrator: each problem runs one agent, a ToolAgent given ``calculate`` or a CoT agent.

    python benchmarks/mcp_tools_embedded.py [--n 4] [--dom low] [--max-tokens 96] [--fixed [--turns 3]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "mcp_servers" / "calculator.py"


async def _record(name: str, row: dict[str, Any], outcome: Any, agents: list[str], started: float,
                  **extra: Any) -> dict[str, Any]:
    """One problem's line: graded answer, calls, tool calls and wall time (printed as it is made)."""
    from mas_orchestra.bench.grading import agrade

    correct = bool(outcome.answer) and await agrade(outcome.answer or "", row["answer"], "math") >= 1.0
    record = {
        "id": row["id"], "status": outcome.status.value, "answer": outcome.answer, "truth": row["answer"],
        "correct": correct, "agents": agents, "llm_calls": outcome.usage.llm_calls,
        "tool_calls": outcome.usage.tool_calls, "tool_errors": outcome.usage.tool_errors, **extra,
        "wall_s": round(time.perf_counter() - started, 2),
    }
    print(json.dumps({"condition": name, **record}), flush=True)
    return record


def _summary(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    return {
        "condition": name, "n": n, "accuracy": sum(r["correct"] for r in results) / n,
        "ok_rate": sum(r["status"] == "ok" for r in results) / n,
        "mean_llm_calls": sum(r["llm_calls"] for r in results) / n,
        "mean_tool_calls": sum(r["tool_calls"] for r in results) / n,
        "tool_agent_share": sum("tools" in r["agents"] for r in results) / n,
        "mean_wall_s": sum(r["wall_s"] for r in results) / n, "runs": results,
    }


async def _condition(name: str, rows: list[dict[str, Any]], model: Any, mcp: Any, args: argparse.Namespace) -> dict:
    from mas_orchestra.config import OrchestraConfig
    from mas_orchestra.runtime import Orchestra
    from mas_orchestra.settings import RunSettings

    config = OrchestraConfig(dom=args.dom, orchestrator_max_tokens=args.orchestrator_tokens)
    settings = RunSettings(timeout=args.timeout, call_timeout=args.call_timeout)
    orchestra = Orchestra(model, model, config=config, settings=settings, mcp=mcp)
    results = []
    for row in rows:
        started = time.perf_counter()
        outcome = await orchestra.arun(row["question"])
        kinds = [n.agent for n in outcome.spec.nodes] if outcome.spec else []
        results.append(await _record(name, row, outcome, kinds, started))
    return _summary(name, results)


async def _fixed(name: str, rows: list[dict[str, Any]], model: Any, tools: list[Any], args: argparse.Namespace) -> dict:
    """One agent per problem, chosen here rather than by the orchestrator: a ToolAgent given the calculator, or
    a CoT agent without it (the same sub-agent model and constrained decoding)."""
    from mas_orchestra.offers import with_tools
    from mas_orchestra.registry import default_registry
    from mas_orchestra.runtime import execute_spec
    from mas_orchestra.spec import spec_from_data

    registry = with_tools(default_registry, tools) if tools else default_registry
    node: dict[str, Any] = {"id": "A", "agent": "cot", "input": ""}
    if tools:
        node = {"id": "A", "agent": "tools", "input": "", "params": {"tools": ["calculate"], "max_turns": args.turns}}
    spec = spec_from_data({"dom": "low", "nodes": [node]}, registry=registry)
    results = []
    for row in rows:
        started = time.perf_counter()
        outcome = await execute_spec(spec, row["question"], model=model, registry=registry, timeout=args.timeout,
                                     call_timeout=args.call_timeout)
        result = outcome.node_results.get("A")
        calls = (result.details.get("tool_calls") or []) if result is not None else []
        tool_log = [{k: c[k] for k in ("args", "ok", "error")} for c in calls]
        results.append(await _record(name, row, outcome, [node["agent"]], started, tool_log=tool_log))
    return _summary(name, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4, help="MASBench depth-2 problems")
    parser.add_argument("--max-tokens", type=int, default=96, help="sub-agent max new tokens")
    parser.add_argument("--orchestrator-tokens", type=int, default=256)
    parser.add_argument("--dom", default="high")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--call-timeout", type=float, default=120)
    parser.add_argument("--only", choices=["none", "mcp"], default=None, help="run one condition only")
    parser.add_argument("--fixed", action="store_true",
                        help="one fixed agent per problem (ToolAgent with the calculator vs CoT), no orchestrator")
    parser.add_argument("--turns", type=int, default=3, help="tool agent turns (--fixed)")
    parser.add_argument("--arithmetic", action="store_true",
                        help="plain arithmetic questions ('What is 37 * 48 + 19?') instead of MASBench depth-2")
    parser.add_argument("--out", default="runs/mcp_tools_embedded.json")
    args = parser.parse_args()

    from mas_orchestra.bench.masbench.generation import generate
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    rows = generate("depth", [2], args.n, 0)
    if args.arithmetic:
        import random

        rng = random.Random(0)
        rows = []
        for i in range(args.n):
            a, b, c = rng.randint(12, 99), rng.randint(12, 99), rng.randint(1, 99)
            rows.append({"id": f"arith-{i}", "question": f"What is {a} * {b} + {c}? Use the calculator.",
                         "answer": str(a * b + c)})
    model = load_embedded_chat_model(max_new_tokens=args.max_tokens)
    mcp = {"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}}
    conditions = [("no tools", None), ("mcp calculator", mcp)]
    if args.only:
        conditions = [conditions[0] if args.only == "none" else conditions[1]]
    if args.fixed:
        from agents.tools import load_mcp_tools

        tools = load_mcp_tools(mcp, timeout=60)
        fixed = [("CoT, no tool", []), ("ToolAgent + MCP calculator", tools)]
        if args.only:
            fixed = [fixed[0] if args.only == "none" else fixed[1]]
        summary = [asyncio.run(_fixed(name, rows, model, t, args)) for name, t in fixed]
    else:
        summary = [asyncio.run(_condition(name, rows, model, cfg, args)) for name, cfg in conditions]
    for s in summary:
        print(f"{s['condition']:<16} n={s['n']} accuracy={s['accuracy']:.2f} ok={s['ok_rate']:.2f} "
              f"llm_calls={s['mean_llm_calls']:.1f} tool_calls={s['mean_tool_calls']:.2f} "
              f"tool_agent_share={s['tool_agent_share']:.2f} wall={s['mean_wall_s']:.1f}s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
