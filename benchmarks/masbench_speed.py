"""Time MASBench generation and verification at the paper's split sizes (DESIGN §8).

Usage: python benchmarks/masbench_speed.py [--split test|train] [--seed 0]
Prints rows/s per axis; the target is well under 10 s for any 1,200-row split.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from mas_orchestra.bench import masbench

# (rows, values) per axis and split; test values are depth 2-12, others 2-8. Train uses the same ranges.
PAPER = {
    "depth": ({"train": 3993, "test": 1195}, list(range(2, 13))),
    "horizon": ({"train": 2174, "test": 567}, list(range(2, 9))),
    "breadth": ({"train": 2000, "test": 676}, list(range(2, 9))),
    "parallel": ({"train": 1807, "test": 567}, list(range(2, 9))),
    "robustness": ({"train": 3000, "test": 600}, list(range(2, 9))),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=masbench.SPLITS, default="test")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    total_rows, total_s = 0, 0.0
    for axis, (sizes, values) in PAPER.items():
        size = sizes[args.split]
        start = time.perf_counter()
        rows = masbench.generate(axis, values, math.ceil(size / len(values)), args.seed, args.split)[:size]
        gen_s = time.perf_counter() - start
        start = time.perf_counter()
        problems = masbench.verify(rows)
        ver_s = time.perf_counter() - start
        total_rows += len(rows)
        total_s += gen_s
        print(
            f"{axis:<11} {len(rows):>5} rows  generate {gen_s:6.2f}s ({len(rows) / gen_s:7.0f} rows/s)  "
            f"verify {ver_s:5.2f}s  problems {len(problems)}"
        )
    print(f"{'all':<11} {total_rows:>5} rows  generate {total_s:6.2f}s ({total_rows / total_s:7.0f} rows/s)")


if __name__ == "__main__":
    main()
