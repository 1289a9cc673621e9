"""Accuracy against cost for a cost-aware run (``recipes/cpu_wiring_cost.yaml``): is the trained orchestrator on
the Pareto front of its model pool?

    python -m training.pareto --run runs/wire-cost [--run runs/wire-s0] --depths 3 --n 8 --samples 2 \\
        --out runs/pareto

On held-out MASBench depth problems, with the pool of the cost recipe (``fast``: one round of arithmetic per
call, ``strong``: two, priced by ``--prices``), it evaluates:

- ``<run> (pool)``: each run's merged orchestrator offered the pool (it names a model per agent);
- ``<run>, all fast`` / ``<run>, all strong``: the very same plans with every agent set to one model (replayed,
  no orchestrator call): the always-fast and always-strong systems of those plans;
- ``base (pool)``: the untrained orchestrator offered the pool.

Each arm gets an eval directory with ``summary.json`` under ``--out`` (so ``mas-orchestra pareto`` plots them;
``pareto.png`` is drawn there) and one row of the printed Markdown table: accuracy, mean cost per run, sub-agent
calls per run and the share of agents that named ``strong``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from mas_orchestra.bench.evaluation import evaluate
from mas_orchestra.bench.evaluation.controls import areplay
from mas_orchestra.bench.evaluation.plots import pareto_plot
from mas_orchestra.bench.evaluation.storage import read_results
from mas_orchestra.bench.evaluation.summary import summarize
from mas_orchestra.bench.masbench import MasbenchCalculator
from mas_orchestra.bench.masbench.generation import generate
from mas_orchestra.config import OrchestraConfig
from mas_orchestra.offers import POOL_PARAM, with_pool
from mas_orchestra.registry import AgentRegistry, offered_registry
from mas_orchestra.runtime.pricing import register_price
from mas_orchestra.spec import GraphSpec
from mas_orchestra.spec.grammar import GrammarLimits
from training.pools import price_table

__all__ = ["force_model", "main", "pool_models"]

FAST = "python:mas_orchestra.bench.masbench:MasbenchCalculator"
STRONG = "python:mas_orchestra.bench.masbench:TwoRoundCalculator"


def pool_models() -> dict[str, MasbenchCalculator]:
    """The cost recipe's pool: ``fast`` (one round per call) and ``strong`` (two rounds per call)."""
    return {"fast": MasbenchCalculator(), "strong": MasbenchCalculator(rounds=2, model_name="masbench-calculator-2")}


def force_model(spec: GraphSpec, name: str) -> GraphSpec:
    """``spec`` with every agent's pool model set to ``name``.

    Args:
        spec: The orchestration.
        name: A model pool name.
    """
    nodes = [n.model_copy(update={"params": {**n.params, POOL_PARAM: name}}) for n in spec.nodes]
    return spec.model_copy(update={"nodes": nodes})


async def _replay(records: list[dict[str, Any]], name: str, registry: AgentRegistry,
                  models: dict[str, Any]) -> list[dict[str, Any]]:
    """The same plans again with every agent on the pool model ``name``."""
    return await areplay(records, lambda spec, _key: force_model(spec, name), label=f"all {name}",
                         subagent=models["fast"], registry=registry)


def _strong_share(records: list[dict[str, Any]]) -> float:
    nodes = [n for r in records for n in ((r.get("spec") or {}).get("nodes") or [])]
    return sum((n.get("params") or {}).get(POOL_PARAM) == "strong" for n in nodes) / len(nodes) if nodes else 0.0


def _row(label: str, depth: int, summary: dict[str, Any], records: list[dict[str, Any]]) -> str:
    calls = summary["total_subagent_calls"] / summary["runs"] if summary.get("runs") else 0.0
    return (f"| {label} | {depth} | {summary['avg_at_k']:.1%} | ${summary['mean_cost_usd'] * 1e6:.0f} per M runs | "
            f"{calls:.2f} | {_strong_share(records):.0%} |")


def main(argv: list[str] | None = None) -> int:
    """Evaluate the arms, write their summaries and ``pareto.png``, print the table (see the module docstring).

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status (0).
    """
    parser = argparse.ArgumentParser(prog="python -m training.pareto", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], help="a trained run directory with merged/ (repeat)")
    parser.add_argument("--prices", default="fast=1:1,strong=5:5", help="USD per million tokens, as the recipe")
    parser.add_argument("--depths", default="3", help="held-out MASBench depths (comma list)")
    parser.add_argument("--n", type=int, default=8, help="test problems per depth")
    parser.add_argument("--samples", type=int, default=2, help="orchestrations per problem")
    parser.add_argument("--temperature", type=float, default=0.5, help="orchestrator temperature")
    parser.add_argument("--max-tokens", type=int, default=352, help="orchestrator tokens (the recipe's budget)")
    parser.add_argument("--prompt", default="recipes/prompts/wiring", help="prompt template folder (the recipe's)")
    parser.add_argument("--seed", type=int, default=1, help="test-problem generation seed")
    parser.add_argument("--out", default="runs/pareto", help="folder of the arms' directories")
    args = parser.parse_args(argv)
    models = pool_models()
    prices = price_table(args.prices)
    for name, model in models.items():
        if name in prices:
            register_price(model.model_name, *prices[name])
    registry = with_pool(offered_registry(None, agents=["cot", "sc"]), models)
    out = Path(args.out)
    rows = ["| arm | depth | accuracy | mean cost | calls/run | agents on strong |", "|---|---|---|---|---|---|"]
    arms = [("base", "embedded"), *((Path(r).name, f"hf:{Path(r) / 'merged'}") for r in args.run)]
    for depth in (int(d) for d in args.depths.split(",")):
        data = generate("depth", [depth], n=args.n, seed=args.seed, split="test")
        for label, orchestrator in arms:
            run_dir = out / f"depth{depth}-{label}-pool"
            config = OrchestraConfig(
                orchestrator_temperature=args.temperature, orchestrator_max_tokens=args.max_tokens,
                grammar_limits=GrammarLimits(max_agents=4, direct_answer=False), agents=("cot", "sc"),
                prompt=args.prompt,
            )
            summary = evaluate(
                data, orchestrator=orchestrator, subagent={"fast": FAST, "strong": STRONG}, config=config,
                samples=args.samples, out_dir=run_dir, progress=False, plot=False, concurrency=4,
                data_name=f"masbench:depth:{depth}:n={args.n}:seed={args.seed}:split=test",
            )
            records = list(read_results(run_dir / "results.jsonl").values())
            rows.append(_row(f"{label} (pool)", depth, summary, records))
            for name in ("fast", "strong"):
                replayed = asyncio.run(_replay(records, name, registry, models))
                forced = summarize(replayed, config={"label": f"{label}, all {name}"})
                forced_dir = out / f"depth{depth}-{label}-all-{name}"
                forced_dir.mkdir(parents=True, exist_ok=True)
                (forced_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replayed))
                (forced_dir / "summary.json").write_text(json.dumps(forced, indent=1))
                rows.append(_row(f"{label}, all {name}", depth, forced, replayed))
        pareto_plot(sorted(p for p in out.iterdir() if p.name.startswith(f"depth{depth}-")),
                    out / f"pareto-depth{depth}.png")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
