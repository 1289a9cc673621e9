"""Checkpointing overhead per node: a compiled chain with no checkpointer vs InMemorySaver vs SQLite.

Zero-latency scripted model, so the numbers are the framework's own cost per node (a real model call is
100-10,000x longer). Every configuration runs the same chain on fresh threads, in interleaved rounds in
one process; ``ratio`` = per-node time with the checkpointer / without. SQLite is measured with
LangGraph's default durability (``async``: a superstep's checkpoint is written while the next runs) and
with ``sync`` (written before the next superstep starts; what ``Orchestra`` threads use, so a kill -9
loses no finished node).

    python benchmarks/checkpoint_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import chain
from mas_orchestra.checkpoint import memory_checkpointer, open_async_sqlite_checkpointer
from mas_orchestra.compile import compile_spec
from mas_orchestra.testing import ScriptedChatModel


async def _measure(n: int, runs: int, rounds: int) -> dict[str, float]:
    spec = chain(n)
    model = ScriptedChatModel()
    with tempfile.TemporaryDirectory() as tmp:
        async with open_async_sqlite_checkpointer(Path(tmp) / "bench.sqlite") as sqlite_saver:
            graphs: dict[str, tuple[Any, str | None]] = {
                "none": (compile_spec(spec, model), None),
                "memory": (compile_spec(spec, model, checkpointer=memory_checkpointer()), None),
                "sqlite (durability=async)": (compile_spec(spec, model, checkpointer=sqlite_saver), None),
                "sqlite (durability=sync)": (compile_spec(spec, model, checkpointer=sqlite_saver), "sync"),
            }
            totals = dict.fromkeys(graphs, 0.0)

            async def one(graph: Any, durability: str | None, checkpointed: bool) -> None:
                config = {"configurable": {"thread_id": uuid.uuid4().hex}} if checkpointed else {}
                kwargs = {"durability": durability} if durability else {}
                await graph.ainvoke({"question": "q"}, config, **kwargs)

            for name, (graph, durability) in graphs.items():  # warm up
                await one(graph, durability, name != "none")
            for _ in range(rounds):
                for name, (graph, durability) in graphs.items():
                    start = time.perf_counter()
                    for _ in range(runs):
                        await one(graph, durability, name != "none")
                    totals[name] += time.perf_counter() - start
    return {name: total / (rounds * runs * n) * 1e6 for name, total in totals.items()}


def run(quick: bool = False) -> list[dict[str, Any]]:
    n, runs, rounds = 20, (3 if quick else 10), (2 if quick else 3)
    per_node = asyncio.run(_measure(n, runs, rounds))
    base = per_node["none"]
    return [
        {
            "benchmark": "checkpoint", "case": f"per node, chain-{n}, {name}", "us_per_node": round(us, 1),
            "added_us_per_node": round(us - base, 1), "ratio": round(us / base, 2), "runs": rounds * runs,
        }
        for name, us in per_node.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = run(quick=args.quick)
    for row in rows:
        print(f"{row['case']:<45} {row['us_per_node']:>9.1f} us/node  (+{row['added_us_per_node']:.1f})  "
              f"ratio {row['ratio']:.2f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
