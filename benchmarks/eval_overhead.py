"""Eval harness overhead per question, against calling ``Orchestra.arun`` directly.

Usage: python benchmarks/eval_overhead.py [--questions 500] [--concurrency 8] [--grader math] [--repeats 5]

Both sides use the same zero-latency scripted models (the orchestrator writes a one-node CoT spec, the
sub-agent answers the gold answer) and the same concurrency, in the same process. The "direct" loop only
runs ``Orchestra.arun`` per question under a semaphore; ``aevaluate`` adds grading, one fsync'ed JSON line
per run, resume bookkeeping, the summary and (unless --plot) no plot. The ratio column is eval time /
direct time; "overhead ms/q" is the difference per question. Best of ``--repeats`` for each side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from mas_orchestra.bench.evaluation import aevaluate
from mas_orchestra.runtime import Orchestra
from mas_orchestra.testing import ScriptedChatModel, cot_reply

ONE_NODE = (
    "<agent><agent_id>A</agent_id><agent_name>CoTAgent</agent_name>"
    "<required_arguments><agent_input></agent_input></required_arguments></agent>"
)


def _rows(n: int) -> list[dict[str, str]]:
    return [{"id": f"b{i}", "question": f"What is {i} + 1?", "answer": "7"} for i in range(n)]


def _models() -> tuple[ScriptedChatModel, ScriptedChatModel]:
    return ScriptedChatModel(replies=[ONE_NODE]), ScriptedChatModel(replies=[cot_reply("7")])


async def _direct(rows: list[dict[str, str]], concurrency: int) -> float:
    orch, sub = _models()
    orchestra = Orchestra(orch, sub)
    sem = asyncio.Semaphore(concurrency)

    async def one(question: str) -> None:
        async with sem:
            outcome = await orchestra.arun(question)
            assert outcome.ok, outcome.error

    start = time.perf_counter()
    await asyncio.gather(*(one(r["question"]) for r in rows))
    return time.perf_counter() - start


async def _eval(rows: list[dict[str, str]], concurrency: int, grader: str, plot: bool) -> float:
    orch, sub = _models()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary = await aevaluate(rows, orchestrator=orch, subagent=sub, out_dir=Path(tmp) / "run",
                                  concurrency=concurrency, grader=grader, progress=False, plot=plot)
        elapsed = time.perf_counter() - start
    assert summary["avg_at_k"] == 1.0 and summary["runs"] == len(rows), summary
    return elapsed


async def _main(args: argparse.Namespace) -> None:
    rows = _rows(args.questions)
    await _eval(rows[:8], args.concurrency, args.grader, False)  # warm up imports and the grading worker
    directs, evals = [], []
    for _ in range(args.repeats):  # alternate the two sides so background load hits both alike
        directs.append(await _direct(rows, args.concurrency))
        evals.append(await _eval(rows, args.concurrency, args.grader, args.plot))
    direct, evald = min(directs), min(evals)
    n = len(rows)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{n} questions, concurrency {args.concurrency}, grader {args.grader}, best of {args.repeats}, "
          f"{os.cpu_count()} CPUs, load average {load:.1f}")
    print(f"{'mode':<18}{'questions/s':>12}{'ms/question':>13}{'ratio':>8}{'overhead ms/q':>15}")
    print(f"{'Orchestra.arun':<18}{n / direct:>12.1f}{1000 * direct / n:>13.2f}{1.0:>8.2f}{0.0:>15.2f}")
    print(f"{'aevaluate':<18}{n / evald:>12.1f}{1000 * evald / n:>13.2f}{evald / direct:>8.2f}"
          f"{1000 * (evald - direct) / n:>15.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--grader", default="math", choices=["math", "exact", "f1", "mcq", "judge"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plot", action="store_true", help="also draw pareto.png (timed)")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
