"""Reward throughput and memory: how fast the GRPO reward executes batches of multi-agent systems.

    python -m benchmarks.rollout_bench --quick          # < 2 min: 128/512 completions; GRPO step numbers read
                                                        # from a finished run (--from-run, default
                                                        # runs/grpo-smoke/run_summary.json) instead of run
    python -m benchmarks.rollout_bench                  # 128/512/2048 + 2 real GRPO steps on CPU (~10 min)
    python -m benchmarks.rollout_bench --sizes 128,512,2048 --quick    # the full table, no GRPO run

Part 1 — throughput: a batch of N completions, each the same 4-agent graph (3 parallel CoT + a join),
scored by ``make_outcome_reward`` with a scripted sub-agent model:
  * zero latency: pure framework cost (parse, compile, LangGraph run, grading) → completions/s;
  * fixed latency L per sub-agent call: with C rollouts at once and a critical path of 2 calls per graph,
    latency alone needs ceil(N / C) × 2 × L seconds — printed next to the measured time as a ratio
    (1.0 = latency perfectly overlapped; the excess is the CPU cost measured in the zero-latency run).
Peak Python heap of one batch that keeps every slot busy (tracemalloc, measured in a separate run because
tracing slows the interpreter) divided by the rollouts in flight = memory per in-flight rollout; and the
process's peak RSS.

Part 2 — one real GRPO step on the embedded SmolLM2 (CPU): wall and CPU seconds per optimizer step, peak RSS,
measured by running ``training.grpo.main`` with a scripted sub-agent in a fresh process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel, cot_reply
from training.rewards import make_outcome_reward

REPO = Path(__file__).resolve().parents[1]
GRAPH = spec_from_data({
    "nodes": [
        {"id": "A", "agent": "cot", "input": "part a"},
        {"id": "B", "agent": "cot", "input": "part b"},
        {"id": "C", "agent": "cot", "input": "part c"},
        {"id": "J", "agent": "cot", "input": "join ${A}, ${B} and ${C}"},
    ],
    "edges": [{"source": s, "target": "J"} for s in "ABC"],
}).to_xml()
CALLS_PER_GRAPH, PARALLEL_WIDTH, DEPTH = 4, 3, 2


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def score(n: int, latency: float, concurrency: int, trace_memory: bool = False) -> dict[str, float]:
    model = ScriptedChatModel(replies=[cot_reply("4")], delay=latency)
    reward = make_outcome_reward(subagent=model, concurrency=concurrency, settings=RunSettings(timeout=600.0))
    prompts = [[{"role": "user", "content": "# Task\nWhat is 2 + 2?"}]] * n
    kwargs = {"prompts": prompts, "completions": [GRAPH] * n, "answer": [["4"]] * n,
              "question": ["What is 2 + 2?"] * n}
    if trace_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    out = asyncio.run(reward(**kwargs))
    wall = time.perf_counter() - t0
    peak_heap = tracemalloc.get_traced_memory()[1] if trace_memory else 0
    if trace_memory:
        tracemalloc.stop()
    assert out == [1.0] * n, "every rollout must be correct"
    in_flight = min(n, concurrency)
    return {"n": n, "latency": latency, "wall_s": wall, "per_s": n / wall, "calls": model.calls,
            "peak_calls_in_flight": model.peak_in_flight, "peak_heap_mb": peak_heap / 2**20,
            "heap_kb_per_rollout": peak_heap / 1024 / in_flight if trace_memory else 0.0}


def latency_bound(n: int, latency: float, concurrency: int) -> float:
    """Lower bound on wall time from latency alone: rollouts run in waves of `concurrency`, each wave's
    critical path is DEPTH calls (the 3 parallel branches overlap)."""
    waves = -(-n // concurrency)
    return waves * DEPTH * latency


def throughput(sizes: list[int], latency: float, concurrency: int) -> list[dict[str, float]]:
    score(8, 0.0, concurrency)  # warm-up: imports, grading worker
    # memory: one traced batch that fills every slot (latency keeps all `concurrency` rollouts in flight);
    # traced separately because tracemalloc slows the interpreter and would distort the timings
    mem = score(concurrency, latency, concurrency, trace_memory=True)
    rows = []
    print(f"\nreward throughput: {CALLS_PER_GRAPH}-agent graph (3 parallel + join), {concurrency} rollouts at once, "
          f"sub-agent latency {latency} s in the latency runs")
    print(f"{'N':>6} {'0-lat s':>8} {'compl/s':>8} {'lat s':>7} {'bound s':>8} {'ratio':>6} {'lat compl/s':>11} "
          f"{'peak calls':>10}")
    for n in sizes:
        zero = score(n, 0.0, concurrency)
        lat = score(n, latency, concurrency)
        bound = latency_bound(n, latency, concurrency)
        row = {"n": n, "zero_latency_s": zero["wall_s"], "completions_per_s": zero["per_s"],
               "latency_s": lat["wall_s"], "latency_bound_s": bound, "ratio": lat["wall_s"] / bound,
               "latency_completions_per_s": lat["per_s"], "peak_calls_in_flight": lat["peak_calls_in_flight"],
               "latency": latency}
        rows.append(row)
        print(f"{n:>6} {zero['wall_s']:>8.2f} {zero['per_s']:>8.1f} {lat['wall_s']:>7.2f} {bound:>8.2f} "
              f"{row['ratio']:>6.2f} {lat['per_s']:>11.1f} {lat['peak_calls_in_flight']:>10}")
    print("bound = ceil(N / concurrency) x critical path (2 calls) x latency; ratio = measured / bound")
    print(f"memory: peak Python heap {mem['peak_heap_mb']:.1f} MiB with {concurrency} rollouts in flight = "
          f"{mem['heap_kb_per_rollout']:.0f} KiB per in-flight rollout (tracemalloc); "
          f"peak RSS of this process {_rss_mb():.0f} MiB")
    for row in rows:
        row["heap_kb_per_rollout"] = mem["heap_kb_per_rollout"]
    return rows


def grpo_step(steps: int = 2) -> dict[str, float]:
    """Run training.grpo on the embedded model in a fresh process; returns CPU s/step, wall s/step, peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "training.grpo", "--subagent", "scripted:4", "--max-steps", str(steps),
               "--output-dir", str(out)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"training.grpo failed:\n{proc.stderr[-4000:]}")
        summary = json.loads((out / "run_summary.json").read_text())
    times = summary["step_times"]
    result = {
        "steps": len(times),
        "cpu_s_per_step": sum(t["cpu_s"] for t in times) / len(times),
        "wall_s_per_step": sum(t["wall_s"] for t in times) / len(times),
        "peak_rss_mb": summary["peak_rss_mb"],
        "total_s": time.perf_counter() - t0,
    }
    print(f"\nGRPO on the embedded SmolLM2-135M (CPU, {os.cpu_count()} cores; defaults: 1 prompt x 4 completions of "
          f"<= 128 tokens per step, scripted sub-agent):")
    for t in times:
        print(f"  step {t['step']}: wall {t['wall_s']:.1f} s, CPU {t['cpu_s']:.1f} s")
    print(f"  mean CPU s/step {result['cpu_s_per_step']:.1f}, wall s/step {result['wall_s_per_step']:.1f}, "
          f"peak RSS {result['peak_rss_mb']:.0f} MiB, whole run {result['total_s']:.0f} s")
    return result


def from_run(folder: str) -> dict[str, float] | None:
    """GRPO step numbers from the run_summary.json a finished ``python -m training.grpo`` run left."""
    path = Path(folder) / "run_summary.json"
    if not path.is_file():
        print(f"\nno {path}: run `python -m training.grpo` first (or drop --quick) for the GRPO step numbers")
        return None
    summary = json.loads(path.read_text())
    times = summary["step_times"]
    result = {
        "steps": len(times),
        "cpu_s_per_step": sum(t["cpu_s"] for t in times) / len(times),
        "wall_s_per_step": sum(t["wall_s"] for t in times) / len(times),
        "peak_rss_mb": summary["peak_rss_mb"],
        "total_s": summary["wall_s"],
        "source": str(path),
    }
    print(f"\nGRPO steps of the run in {folder} ({summary['device']}):")
    for t in times:
        print(f"  step {t['step']}: wall {t['wall_s']:.1f} s, CPU {t['cpu_s']:.1f} s")
    print(f"  mean CPU s/step {result['cpu_s_per_step']:.1f}, wall s/step {result['wall_s_per_step']:.1f}, "
          f"peak RSS {result['peak_rss_mb']:.0f} MiB, whole run {result['total_s']:.0f} s")
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="128/512 only, GRPO numbers read from --from-run instead of run (< 2 min)")
    p.add_argument("--from-run", default=str(REPO / "runs" / "grpo-smoke"),
                   help="folder of a finished training.grpo run whose run_summary.json --quick reports")
    p.add_argument("--sizes", default=None, help="comma list of batch sizes (default 128,512,2048)")
    p.add_argument("--latency", type=float, default=0.05, help="seconds per sub-agent call in the latency runs")
    p.add_argument("--concurrency", type=int, default=128, help="rollouts executed at once (the paper: 128)")
    p.add_argument("--grpo-step", action="store_true", help="run the GRPO steps even with --quick")
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    sizes_text = args.sizes if args.sizes is not None else ("128,512" if args.quick else "128,512,2048")
    sizes = [int(s) for s in sizes_text.split(",") if s.strip()]
    results: dict = {"cpu_count": os.cpu_count()}
    if sizes:
        results["throughput"] = throughput(sizes, args.latency, args.concurrency)
    if args.grpo_step or not args.quick:
        results["grpo"] = grpo_step()
    else:
        results["grpo"] = from_run(args.from_run)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
