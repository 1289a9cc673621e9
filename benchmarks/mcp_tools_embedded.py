"""The embedded model with and without a local MCP calculator: accuracy, calls and tool calls on MASBench depth-2.

Both conditions run the same problems with the same embedded model as orchestrator and sub-agents (constrained
decoding on, as by default); the tool condition offers the calculator server's tools (tests/mcp_servers/
calculator.py over stdio), so the orchestrator may give ``ToolAgent`` nodes the calculator. Numbers on a 135M
model are small and noisy; they show what the pieces do, not what a real model gains.

    python benchmarks/mcp_tools_embedded.py [--n 4] [--max-tokens 96] [--out runs/mcp_tools_embedded.json]
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


async def _condition(name: str, rows: list[dict[str, Any]], model: Any, mcp: Any, args: argparse.Namespace) -> dict:
    from mas_orchestra.bench.grading import agrade
    from mas_orchestra.runtime import Orchestra

    orchestra = Orchestra(model, model, dom=args.dom, mcp=mcp, timeout=args.timeout, call_timeout=args.call_timeout,
                          orchestrator_max_tokens=args.orchestrator_tokens)
    results = []
    for row in rows:
        started = time.perf_counter()
        outcome = await orchestra.arun(row["question"])
        correct = bool(outcome.answer) and await agrade(outcome.answer or "", row["answer"], "math") >= 1.0
        kinds = [n.agent for n in outcome.spec.nodes] if outcome.spec else []
        results.append({
            "id": row["id"], "status": outcome.status.value, "answer": outcome.answer, "truth": row["answer"],
            "correct": correct, "agents": kinds, "llm_calls": outcome.usage.llm_calls,
            "tool_calls": outcome.usage.tool_calls, "tool_errors": outcome.usage.tool_errors,
            "wall_s": round(time.perf_counter() - started, 2),
        })
        print(json.dumps({"condition": name, **results[-1]}), flush=True)
    n = len(results)
    return {
        "condition": name, "n": n, "accuracy": sum(r["correct"] for r in results) / n,
        "ok_rate": sum(r["status"] == "ok" for r in results) / n,
        "mean_llm_calls": sum(r["llm_calls"] for r in results) / n,
        "mean_tool_calls": sum(r["tool_calls"] for r in results) / n,
        "tool_agent_share": sum("tools" in r["agents"] for r in results) / n,
        "mean_wall_s": sum(r["wall_s"] for r in results) / n, "runs": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4, help="MASBench depth-2 problems")
    parser.add_argument("--max-tokens", type=int, default=96, help="sub-agent max new tokens")
    parser.add_argument("--orchestrator-tokens", type=int, default=256)
    parser.add_argument("--dom", default="high")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--call-timeout", type=float, default=120)
    parser.add_argument("--only", choices=["none", "mcp"], default=None, help="run one condition only")
    parser.add_argument("--out", default="runs/mcp_tools_embedded.json")
    args = parser.parse_args()

    from mas_orchestra.bench.masbench.generation import generate
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    rows = generate("depth", [2], args.n, 0)
    model = load_embedded_chat_model(max_new_tokens=args.max_tokens)
    mcp = {"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}}
    conditions = [("no tools", None), ("mcp calculator", mcp)]
    if args.only:
        conditions = [conditions[0] if args.only == "none" else conditions[1]]
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
