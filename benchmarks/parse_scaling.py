"""Parsing stays linear in the text length: degenerate repetition loops of 45 and 10,000 agent blocks.

    python benchmarks/parse_scaling.py [--repeats 5]

Times ``parse_orchestration`` on a loop of 45 and of 10,000 identical low- and high-DoM agent blocks (what a
degenerate generation writes), side by side in one run, and prints the time per KB of each and the ratio of
the 10,000-block time to the 45-block time next to the ratio of their lengths, with a 1,000-block point:
linear parsing keeps the time per KB flat from 1,000 to 10,000 blocks (a 45-block text, a few KB, stays in
the CPU caches and reads faster per KB). Numbers depend on the machine; compare the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import time

from mas_orchestra import parse_orchestration

_BLOCKS = {
    "low": ("<agent><agent_name>CoTAgent</agent_name><agent_description>solve</agent_description><required_arguments>"
            "<agent_input></agent_input></required_arguments><agent_output_id>x</agent_output_id></agent>\n"),
    "high": "<agent><agent_id>A</agent_id><agent_name>CoTAgent</agent_name></agent>\n",
}


def loop_text(blocks: int, dom: str) -> str:
    return "<thinking>loop</thinking>\n" + _BLOCKS[dom] * blocks


def best_time(text: str, dom: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        parse_orchestration(text, dom=dom)  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - started)
    return best


def run(repeats: int = 5) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for dom in ("low", "high"):
        small, mid, large = loop_text(45, dom), loop_text(1_000, dom), loop_text(10_000, dom)
        t_small, t_mid, t_large = (best_time(t, dom, repeats) for t in (small, mid, large))
        rows.append({
            "benchmark": "parse", "case": f"{dom} DoM loop 45 vs 10,000 blocks",
            "chars_45": len(small), "chars_10000": len(large),
            "ms_45": round(t_small * 1e3, 3), "ms_10000": round(t_large * 1e3, 2),
            "us_per_kb_45": round(t_small * 1e6 / (len(small) / 1024), 1),
            "us_per_kb_1000": round(t_mid * 1e6 / (len(mid) / 1024), 1),
            "us_per_kb_10000": round(t_large * 1e6 / (len(large) / 1024), 1),
            "length_ratio": round(len(large) / len(small), 1),
            "ratio": round(t_large / t_small, 1),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    for row in run(args.repeats):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
