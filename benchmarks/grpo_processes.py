"""Two training processes vs one on CPU: wall seconds per GRPO step and rollouts per second, side by side.

Both runs use ``recipes/cpu_ddp.yaml`` (tiny random orchestrator, constrained decoding, scripted sub-agent) with
the same global batch of 8 completions per step (2 prompts x 4): two processes x 2 per device x 2 accumulation
steps (``accelerate launch --multi_gpu --num_processes 2 --num_cpu_threads_per_process 1``), vs one process x 2
x 4 (``python -m training.grpo``, torch's default threads). The runs alternate (1, 2, 1, 2 ... processes) so
that a busy machine slows both alike; per step: the step times ``run_summary.json`` records (the first step of
each run, with its warm-up, is reported apart). ``ratio`` = one-process wall per step / two-process.

    python benchmarks/grpo_processes.py [--steps 3] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "cpu_ddp.yaml"
GLOBAL_BATCH = 8


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(processes: int, out: Path, steps: int) -> list[str]:
    common = ["-m", "training.grpo", "--config", str(RECIPE), "--output-dir", str(out), "--max-steps", str(steps),
              "--save-steps", "1000"]
    if processes == 1:
        return [sys.executable, *common, "--gradient-accumulation-steps", "4"]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--num_cpu_threads_per_process", "1", "--main_process_port", str(_port()), *common]


def _one(processes: int, steps: int, tmp: Path, index: int) -> dict[str, Any]:
    out = tmp / f"p{processes}-{index}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(_command(processes, out, steps), capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{processes}-process run failed: {done.stderr[-3000:]}")
    summary = json.loads((out / "run_summary.json").read_text())
    walls = [s["wall_s"] for s in summary["step_times"]]
    cpus = [s["cpu_s"] for s in summary["step_times"]]
    return {"processes": processes, "first_step_s": walls[0], "later_steps_s": walls[1:], "later_cpu_s": cpus[1:],
            "launch_to_exit_s": time.perf_counter() - started, "torch_threads": summary["torch_threads"]}


def run(steps: int = 3, rounds: int = 1) -> list[dict[str, Any]]:
    results: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(rounds):
            for processes in (1, 2):
                results[processes].append(_one(processes, steps, Path(tmp), index))
    rows = []
    for processes, runs in results.items():
        later = [w for r in runs for w in r["later_steps_s"]]
        per_step = statistics.mean(later) if later else statistics.mean(r["first_step_s"] for r in runs)
        rows.append({
            "benchmark": "grpo_processes", "case": f"{processes} process(es), 8 rollouts/step",
            "wall_s_per_step": round(per_step, 2), "rollouts_per_s": round(GLOBAL_BATCH / per_step, 3),
            "first_step_s": round(statistics.mean(r["first_step_s"] for r in runs), 2),
            "launch_to_exit_s": round(statistics.mean(r["launch_to_exit_s"] for r in runs), 1),
            "torch_threads_per_process": runs[0]["torch_threads"], "steps_measured": len(later),
            # CPU seconds of rank 0 per step (all its threads): less sensitive to a busy machine than wall time
            "rank0_cpu_s_per_step": round(statistics.mean(c for r in runs for c in r["later_cpu_s"]), 1)
            if later else None,
        })
    rows[0]["ratio"] = 1.0
    rows[1]["ratio"] = round(rows[0]["wall_s_per_step"] / rows[1]["wall_s_per_step"], 3)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    rows = run(args.steps, args.rounds)
    for row in rows:
        print(f"{row['case']:<36} {row['wall_s_per_step']:>8.2f} s/step  {row['rollouts_per_s']:>7.3f} rollouts/s  "
              f"rank-0 CPU {row['rank0_cpu_s_per_step']} s/step  first step {row['first_step_s']:.1f} s  "
              f"speed-up {row['ratio']:.3f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
