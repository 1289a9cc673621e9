"""Checkpointing overhead per node: a compiled chain with no checkpointer vs InMemorySaver vs SQLite.

Second part: whole ``Orchestra`` runs (orchestrator + six-node chain, 50 ms per model call) without a
checkpointer vs on an in-memory thread vs on a SQLite thread, to put the per-node cost next to a model call.

Zero-latency scripted model, so the numbers are the framework's own cost per node (a real model call is
100-10,000x longer). Every configuration runs the same chain on fresh threads, in interleaved rounds in
one process; ``ratio`` = per-node time with the checkpointer / without. SQLite is measured with
LangGraph's default durability (``async``: a superstep's checkpoint is written while the next runs) and
with ``sync`` (written before the next superstep starts; what ``Orchestra`` threads use, so a kill -9
loses no finished node), with SQLite's ``synchronous=NORMAL`` (our default) and ``FULL``. With a PostgreSQL
URL (``--postgres URL``, default ``$MAS_TEST_POSTGRES_URL``) the same chain and the same Orchestra runs are also
measured on PostgreSQL (``durability=sync``), interleaved with the others in the same rounds, and the
PostgreSQL / SQLite ratio per node is printed.

    python benchmarks/checkpoint_overhead.py [--quick] [--postgres postgresql://user:pw@127.0.0.1:5432/db]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import chain
from mas_orchestra.compile import compile_spec
from mas_orchestra.runtime.checkpoint import memory_checkpointer, open_async_sqlite_checkpointer
from mas_orchestra.testing import ScriptedChatModel


async def _measure(n: int, runs: int, rounds: int, postgres: str | None = None) -> dict[str, float]:
    spec = chain(n)
    model = ScriptedChatModel()
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            open_async_sqlite_checkpointer(Path(tmp) / "bench.sqlite") as sqlite_saver,
            open_async_sqlite_checkpointer(Path(tmp) / "full.sqlite", synchronous="FULL") as full_saver,
            contextlib.AsyncExitStack() as stack,
        ):
            graphs: dict[str, tuple[Any, str | None]] = {
                "none": (compile_spec(spec, model), None),
                "memory": (compile_spec(spec, model, checkpointer=memory_checkpointer()), None),
                "sqlite (durability=async)": (compile_spec(spec, model, checkpointer=sqlite_saver), None),
                "sqlite (durability=sync)": (compile_spec(spec, model, checkpointer=sqlite_saver), "sync"),
                "sqlite synchronous=FULL (durability=sync)": (
                    compile_spec(spec, model, checkpointer=full_saver), "sync"),
            }
            if postgres:
                from mas_orchestra.runtime.postgres import open_async_postgres_checkpointer

                pg_saver = await stack.enter_async_context(open_async_postgres_checkpointer(postgres))
                graphs["postgres (durability=sync)"] = (compile_spec(spec, model, checkpointer=pg_saver), "sync")
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


async def _measure_orchestra(n: int, delay: float, runs: int, postgres: str | None = None) -> dict[str, float]:
    """Whole Orchestra runs (orchestrator + n-node chain, ``delay`` s per model call): plain vs on threads."""
    from mas_orchestra.runtime import Orchestra
    from mas_orchestra.testing import cot_reply

    text = chain(n).to_xml()
    with tempfile.TemporaryDirectory() as tmp:
        setups = {
            "none": None,
            "memory thread": memory_checkpointer(),
            "sqlite thread": str(Path(tmp) / "orchestra.sqlite"),
        }
        if postgres:
            setups["postgres thread"] = postgres
        totals = dict.fromkeys(setups, 0.0)
        for _ in range(runs):
            for name, saver in setups.items():
                orchestra = Orchestra(
                    ScriptedChatModel(replies=[text], delay=delay, model_name="orch"),
                    ScriptedChatModel(replies=[cot_reply("1")], delay=delay, model_name="sub"),
                    checkpointer=saver,
                )
                start = time.perf_counter()
                outcome = await orchestra.arun("q")
                totals[name] += time.perf_counter() - start
                assert outcome.ok, outcome.error
    return {name: total / runs for name, total in totals.items()}


def run(quick: bool = False, postgres: str | None = None) -> list[dict[str, Any]]:
    n, runs, rounds = 20, (3 if quick else 10), (2 if quick else 3)
    per_node = asyncio.run(_measure(n, runs, rounds, postgres))
    base = per_node["none"]
    rows = [
        {
            "benchmark": "checkpoint", "case": f"per node, chain-{n}, {name}", "us_per_node": round(us, 1),
            "added_us_per_node": round(us - base, 1), "ratio": round(us / base, 2), "runs": rounds * runs,
        }
        for name, us in per_node.items()
    ]
    nodes, delay = 6, 0.05
    whole = asyncio.run(_measure_orchestra(nodes, delay, 3 if quick else 8, postgres))
    for name, seconds in whole.items():
        rows.append({
            "benchmark": "checkpoint", "case": f"Orchestra run, chain-{nodes}, {delay * 1e3:.0f} ms/call, {name}",
            # the whole-run difference: per-run costs (opening the SQLite file, the four outer steps) included
            "wall_s": round(seconds, 4), "added_ms_per_run": round((seconds - whole["none"]) * 1e3, 1),
            "ratio": round(seconds / whole["none"], 3),
        })
    pg, lite = per_node.get("postgres (durability=sync)"), per_node["sqlite (durability=sync)"]
    if pg is not None:
        rows.append({
            "benchmark": "checkpoint", "case": f"per node, chain-{n}, postgres / sqlite (both durability=sync)",
            "us_per_node": round(pg, 1), "added_us_per_node": round(pg - lite, 1), "ratio": round(pg / lite, 2),
            "runs": rounds * runs,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgres", default=os.environ.get("MAS_TEST_POSTGRES_URL"), metavar="URL",
                        help="also measure PostgreSQL at this URL (default $MAS_TEST_POSTGRES_URL; unset: skipped)")
    args = parser.parse_args()
    rows = run(quick=args.quick, postgres=args.postgres)
    for row in rows:
        if "us_per_node" in row:
            size = f"{row['us_per_node']:>9.1f} us/node (+{row['added_us_per_node']:.1f} us/node)"
        else:
            size = f"{row['wall_s']:>9.4f} s/run (+{row['added_ms_per_run']:.1f} ms/run)"
        print(f"{row['case']:<60} {size}  ratio {row['ratio']:.3f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
