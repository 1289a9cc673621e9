"""MCP tool calls per second over stdio: a session (a server process) per call vs one session per run.

The server is tests/mcp_servers/calculator.py (FastMCP over stdio); the tool is ``add``. "per call" is what a
call outside a run does (and what every call did before runs kept their sessions): start the server, initialise,
call, stop. "per run" is a run's calls inside :func:`agents.tools.mcp.mcp_run_sessions`: the first call starts
the server, the rest reuse its session; the block's end stops it (the time of starting and stopping is included).
Both are measured in the same process, one after the other, and printed side by side.

    python benchmarks/mcp_session_reuse.py [--per-call 8] [--per-run 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
SERVER = ROOT / "tests" / "mcp_servers" / "calculator.py"


async def measure(per_call: int, per_run: int) -> None:
    from agents.tools.mcp import aload_mcp_tools, mcp_run_sessions

    tools = {t.name: t for t in await aload_mcp_tools({"mcpServers": {"calc": {
        "command": sys.executable, "args": [str(SERVER)]}}}, timeout=60)}
    add = tools["add"]
    started = time.perf_counter()
    for i in range(per_call):
        await add.ainvoke({"a": i, "b": 1})
    each = time.perf_counter() - started
    started = time.perf_counter()
    async with mcp_run_sessions() as sessions:
        for i in range(per_run):
            await add.ainvoke({"a": i, "b": 1})
    shared = time.perf_counter() - started
    print(f"{'mode':<28} {'calls':>6} {'seconds':>8} {'calls/s':>9} {'processes':>9}")
    print(f"{'a session per call (before)':<28} {per_call:>6} {each:>8.2f} {per_call / each:>9.2f} {per_call:>9}")
    print(f"{'one session per run (after)':<28} {per_run:>6} {shared:>8.2f} {per_run / shared:>9.2f} "
          f"{sessions.started:>9}")
    print(f"speed-up (calls/s after / before): {(per_run / shared) / (per_call / each):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-call", type=int, default=8, help="calls with a session each (8)")
    parser.add_argument("--per-run", type=int, default=200, help="calls sharing one run's session (200)")
    args = parser.parse_args()
    asyncio.run(measure(args.per_call, args.per_run))


if __name__ == "__main__":
    main()
