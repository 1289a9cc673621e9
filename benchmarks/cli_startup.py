"""Start-up time of the command line: ``mas-orchestra [SUBCOMMAND] --help`` in fresh processes.

Each case runs ``--repeat`` times in a new interpreter, interleaved with the others so that load changes hit all
of them alike; the median wall is printed next to a bare ``python -c pass`` (the interpreter's own start-up) and
to importing what a running command loads (the runtime: LangGraph, LangChain, the agents), which ``--help`` no
longer does. The target is ``--help`` in at most 1 s.

    python benchmarks/cli_startup.py [--repeat 5] [--module]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ["", "validate", "draw", "convert", "schema", "plot-training", "run", "eval", "pareto", "masbench",
               "studio"]


def _command_line(module: bool) -> list[str]:
    """The installed ``mas-orchestra`` script next to this interpreter, else (or with ``module``)
    ``python -m mas_orchestra``, which imports the checkout this file is in."""
    script = Path(sys.executable).parent / "mas-orchestra"
    return [str(script)] if script.is_file() and not module else [sys.executable, "-m", "mas_orchestra"]


def _cases(module: bool) -> dict[str, list[str]]:
    cli = _command_line(module)
    cases = {"python -c pass": [sys.executable, "-c", "pass"]}
    for command in SUBCOMMANDS:
        cases[f"mas-orchestra {command} --help".replace("  ", " ")] = [*cli, *command.split(), "--help"]
    cases["import the runtime (what run loads)"] = [sys.executable, "-c", "import mas_orchestra.runtime.orchestra"]
    return cases


def _wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - started


def run(repeat: int = 5, module: bool = False) -> list[dict[str, Any]]:
    cases = _cases(module)
    walls: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, argv in cases.items():
            walls[name].append(_wall(argv))
    bare = statistics.median(walls["python -c pass"])
    return [{"benchmark": "cli_startup", "case": name, "wall_s": round(statistics.median(times), 3),
             "ratio": round(statistics.median(times) / bare, 1)} for name, times in walls.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (the median is printed)")
    parser.add_argument("--module", action="store_true",
                        help="run `python -m mas_orchestra` from this checkout instead of the installed script "
                        "(to time another checkout with the same environment)")
    args = parser.parse_args()
    rows = run(args.repeat, args.module)
    print(f"{'case':<42} {'median wall':>11}  {'x python -c pass':>16}")
    for row in rows:
        print(f"{row['case']:<42} {row['wall_s']:>9.3f} s  {row['ratio']:>15.1f}x")
    helps = [row["wall_s"] for row in rows if row["case"].endswith("--help")]
    print(f"slowest --help: {max(helps):.3f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
