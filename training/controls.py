"""The causal-controls table of a wiring run: did the trained orchestrator learn *structure*?

    python -m training.controls --run runs/wire-s0 [--run runs/wire-s1] [--low-dom-run runs/wire-low] \\
        --depths 3,4 --n 8 --samples 2 --out runs/controls

For held-out MASBench depth problems (test split: templates never seen in training) it evaluates, with the
sub-agent of the wiring recipe (``MasbenchCalculator``, one round of arithmetic per call):

- ``base``: the untrained embedded orchestrator (high DoM, the recipe's kinds, grammar and token budget);
- ``trained``: each ``--run``'s merged model (``<run>/merged``);
- ``trained, wiring ablated``: the very plans of the ``trained`` row, run again with every ``${id}`` reference
  removed (:func:`mas_orchestra.bench.evaluation.controls.areplay_with_control`); the edges stay;
- ``trained, random graph``: for each of those plans, a random valid graph with as many agents;
- ``low DoM, trained``: ``--low-dom-run`` (the same recipe at ``dom: low``, same budget): one agent per plan.

Each orchestrator arm is one ``mas-orchestra eval`` run directory under ``--out`` (resumable: a rerun skips what
is done); the two controls replay its plans (no orchestrator call) and write ``<control>.jsonl`` beside it. Each
arm is one row of the printed Markdown table: accuracy (Avg@k), agents, depth along edges, depth along
references, wired share and sub-agent calls per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mas_orchestra.bench.evaluation import evaluate
from mas_orchestra.bench.evaluation.controls import areplay_with_control
from mas_orchestra.bench.evaluation.storage import read_results
from mas_orchestra.bench.evaluation.summary import summarize
from mas_orchestra.bench.masbench.generation import generate
from mas_orchestra.config import OrchestraConfig
from mas_orchestra.registry import offered_registry
from mas_orchestra.spec.grammar import GrammarLimits

__all__ = ["Arm", "arms_for", "main", "table_row"]

SUBAGENT = "python:mas_orchestra.bench.masbench:MasbenchCalculator"


@dataclass(frozen=True)
class Arm:
    """One row of the table: an orchestrator and how its plans are run.

    Attributes:
        label: The row's label (also names its eval run directory).
        orchestrator: The orchestrator's model string (``embedded``, or ``hf:<run>/merged``).
        dom: Degree of MAS the orchestrator plans at: ``high`` or ``low``.
        control: The causal control its plans are replayed under, or ``None``.
    """

    label: str
    orchestrator: str
    dom: str = "high"
    control: str | None = None


def arms_for(runs: Sequence[str], low_dom_run: str | None = None) -> list[Arm]:
    """The orchestrator arms of the table for trained run directories (each must hold ``merged/``); the controls
    of each high-DoM arm are replayed from its results.

    Args:
        runs: Trained run directories, one arm each after the ``base`` arm.
        low_dom_run: A run directory trained at low DoM, added as a low-DoM arm.

    Raises:
        SystemExit: A run in ``runs`` has no ``merged/`` folder.
    """
    arms = [Arm("base", "embedded")]
    for run in runs:
        merged = Path(run) / "merged"
        if not merged.is_dir():
            raise SystemExit(f"error: {merged} does not exist; train with merge: true (recipes/cpu_wiring.yaml does)")
        name = Path(run).name
        arms.append(Arm(f"trained ({name})", f"hf:{merged}"))
    if low_dom_run:
        low = Path(low_dom_run)
        arms.append(Arm(f"low DoM, trained ({low.name})", f"hf:{low / 'merged'}", dom="low"))
    return arms


def table_row(label: str, depth: int, summary: dict[str, Any]) -> str:
    """One Markdown row from an eval ``summary.json``.

    Args:
        label: The arm's label (first column).
        depth: The tasks' depth (second column).
        summary: The eval's summary (accuracy, structure means, sub-agent calls per run).
    """
    shape = summary.get("structure") or {}
    calls = summary["total_subagent_calls"] / summary["runs"] if summary.get("runs") else 0.0
    return (f"| {label} | {depth} | {summary['avg_at_k']:.1%} ({round(summary['avg_at_k'] * summary['runs'])}/"
            f"{summary['runs']}) | {shape.get('agents_mean', 0):.2f} | {shape.get('depth_mean', 0):.2f} | "
            f"{shape.get('ref_depth_mean', 0):.2f} | {shape.get('wired_share', 0):.0%} | {calls:.2f} |")


def main(argv: list[str] | None = None) -> int:
    """Evaluate the arms and print the table (see the module docstring).

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status (0).
    """
    parser = argparse.ArgumentParser(prog="python -m training.controls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], help="a trained wiring run directory (repeatable)")
    parser.add_argument("--low-dom-run", default=None, help="the low-DoM arm's run directory")
    parser.add_argument("--depths", default="3,4", help="held-out MASBench depths (comma list)")
    parser.add_argument("--n", type=int, default=8, help="test problems per depth")
    parser.add_argument("--samples", type=int, default=2, help="orchestrations per problem (Avg@k)")
    parser.add_argument("--temperature", type=float, default=0.5, help="orchestrator temperature (paper's 0.5)")
    parser.add_argument("--max-tokens", type=int, default=448,
                        help="orchestrator tokens (recipes/cpu_wiring.yaml's max_completion_length; 320 before)")
    parser.add_argument("--agents", default="cot,sc", help="offered kinds (the recipe's)")
    parser.add_argument("--prompt", default="recipes/prompts/chains",
                        help="high-DoM prompt template folder (recipes/cpu_wiring.yaml's; recipes/prompts/wiring "
                             "for the cost recipe); the low-DoM arm uses our low prompt")
    parser.add_argument("--seed", type=int, default=1, help="test-problem generation seed")
    parser.add_argument("--skip-base", action="store_true", help="leave out the base arm")
    parser.add_argument("--out", default="runs/controls", help="folder of the eval run directories")
    args = parser.parse_args(argv)
    if not args.run and not args.low_dom_run and args.skip_base:
        parser.error("nothing to evaluate: give --run and/or --low-dom-run")
    arms = arms_for(args.run, args.low_dom_run)
    if args.skip_base:
        arms = arms[1:]
    out = Path(args.out)
    agents = [a.strip() for a in args.agents.split(",")]
    registry = offered_registry(None, agents=agents)
    rows = ["| arm | depth | accuracy | agents | depth (edges) | depth (refs) | wired | calls/run |",
            "|---|---|---|---|---|---|---|---|"]
    for depth in (int(d) for d in args.depths.split(",")):
        data = generate("depth", [depth], n=args.n, seed=args.seed, split="test")
        for arm in arms:
            run_dir = out / (f"depth{depth}-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", arm.label).strip("-"))
            config = OrchestraConfig(
                dom=arm.dom,  # type: ignore[arg-type]  # "high" or "low"
                orchestrator_temperature=args.temperature, orchestrator_max_tokens=args.max_tokens,
                grammar_limits=GrammarLimits(max_agents=4, direct_answer=False), agents=tuple(agents),
                prompt=args.prompt if arm.dom == "high" else None,
            )
            summary = evaluate(
                data, orchestrator=arm.orchestrator, subagent=SUBAGENT, config=config, samples=args.samples,
                out_dir=run_dir, progress=False, plot=False,
                data_name=f"masbench:depth:{depth}:n={args.n}:seed={args.seed}:split=test", concurrency=4,
            )
            rows.append(table_row(arm.label, depth, summary))
            print(rows[-1], file=sys.stderr, flush=True)
            if arm.dom != "high":
                continue
            records = list(read_results(run_dir / "results.jsonl").values())
            for control, label in (("ablate-wiring", "wiring ablated"), ("random-graph", "random graph")):
                replayed = asyncio.run(areplay_with_control(records, control, subagent=SUBAGENT, registry=registry))
                (run_dir / f"{control}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replayed))
                rows.append(table_row(f"{arm.label}, {label}", depth, summarize(replayed)))
                print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
