"""Run every benchmark and print one table (``ratio`` column measured side by side in the same run).

    python -m benchmarks [--quick] [--out runs/benchmarks.json] [--only concurrency,overhead,...]

In-process benchmarks return rows; the standalone scripts (search, rollouts, eval overhead, MASBench
generation) run as subprocesses with ``--quick`` and their output is kept verbatim in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IN_PROCESS = ("concurrency", "overhead", "checkpoint_overhead", "tool_agent_overhead")
# name -> (script, arguments for --quick, arguments for a full run)
SCRIPTS = {
    "search": ("benchmarks/search_bench.py", ["--quick"], []),
    "rollouts": ("benchmarks/rollout_bench.py", ["--quick"], []),
    "eval": ("benchmarks/eval_overhead.py", ["--questions", "200", "--repeats", "3"], []),
    "masbench": ("benchmarks/masbench_speed.py", [], []),
    "parse": ("benchmarks/parse_scaling.py", ["--repeats", "3"], []),
    # grammar compile times only with --quick; the full run decodes 5 + 5 questions per DoM on the embedded model
    "constrained": ("benchmarks/constrained_decoding.py", ["--compile-only", "--caps", "1,2,4,8"], ["--n", "5"]),
    # batched vs one-call-at-a-time generation, prefix-cache TTFT, SC wall, jump-forward (embedded model)
    "batched": ("benchmarks/batched_generation.py", ["--quick"], []),
    # `mas-orchestra [SUBCOMMAND] --help` start-up in fresh processes against `python -c pass`
    "cli_startup": ("benchmarks/cli_startup.py", ["--repeat", "3"], []),
    # decode passes on the training thread against a worker thread (embedded model, 4 rows)
    "decode_thread": ("benchmarks/decode_thread.py", ["--rounds", "2", "--passes", "10"], []),
    # the main job against one plain call of the same model: accuracy, calls, wall (embedded model, 20 questions)
    "first_run": ("benchmarks/first_run.py", ["--limit", "2"], []),
}
KEY_COLUMNS = ("wall_s", "critical_path_s", "sequential_s", "speedup_vs_sequential", "ours_us", "bare_langgraph_us",
               "parse_xml_ms", "validate_ms", "compile_ms", "us_per_node", "added_us_per_node", "added_ms_per_run",
               "ours_ms", "bare_langchain_ms")


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'benchmark':<12} {'case':<40} {'ratio':>7}  details"]
    for row in rows:
        details = ", ".join(f"{k}={row[k]}" for k in KEY_COLUMNS if k in row)
        lines.append(f"{row['benchmark']:<12} {row['case']:<40} {row.get('ratio', ''):>7}  {details}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes; finishes in a few minutes on 2 cores")
    parser.add_argument("--out", default="runs/benchmarks.json", help="where to write the JSON results")
    parser.add_argument("--only", default=None, help=f"comma list of {', '.join((*IN_PROCESS, *SCRIPTS))}")
    args = parser.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else set(IN_PROCESS) | set(SCRIPTS)
    rows: list[dict[str, Any]] = []
    outputs: dict[str, Any] = {}
    started = time.perf_counter()
    for name in IN_PROCESS:
        if name in wanted:
            module = __import__(f"benchmarks.{name}", fromlist=["run"])
            rows.extend(module.run(quick=args.quick))
    print(_table(rows), flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    for name, (script, quick_args, full_args) in SCRIPTS.items():
        if name not in wanted or not (ROOT / script).is_file():
            continue
        command = [script, *(quick_args if args.quick else full_args)]
        cmd = [sys.executable, *command]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            text, code = proc.stdout + proc.stderr[-2000:], proc.returncode
        except subprocess.TimeoutExpired:
            text, code = "timed out after 900 s", -1
        outputs[name] = {"command": " ".join(command), "returncode": code, "seconds": round(time.perf_counter() - t0, 1),
                         "output": text}
        print(f"\n== {name} ({outputs[name]['seconds']} s, rc={code}) ==\n{text.strip()}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"quick": args.quick, "rows": rows, "scripts": outputs,
                               "total_s": round(time.perf_counter() - started, 1)}, indent=2))
    print(f"\nresults written to {out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
