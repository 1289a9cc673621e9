"""Tool agent overhead: our ``ToolAgent`` (and a compiled one-node spec around it) vs. a bare LangChain tool-calling
agent (``langchain.agents.create_agent``) on the same scripted model, measured side by side in one run.

Every run is the same conversation: the model calls ``add`` once, reads the result and answers (two model
calls, one tool call), with a zero-latency scripted model — so the time is the loop's own cost.

    python benchmarks/tool_agent_overhead.py [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from agents.tools import ToolAgent
from mas_orchestra.compile import compile_spec
from mas_orchestra.offers import with_tools
from mas_orchestra.registry import default_registry
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel, cot_reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _reply(messages: list[Any], index: int) -> AIMessage | str:
    if isinstance(messages[-1], ToolMessage):
        return cot_reply(str(messages[-1].content).split()[0])
    return AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": 17, "b": 25}, "id": f"c{index}",
                                              "type": "tool_call"}])


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(replies=_reply, tool_calling=True)


async def _per_run_ms(call: Any, runs: int) -> float:
    await call()  # warm up
    started = time.perf_counter()
    for _ in range(runs):
        await call()
    return (time.perf_counter() - started) / runs * 1e3


def run(quick: bool = False, runs: int | None = None) -> list[dict[str, Any]]:
    from langchain.agents import create_agent

    runs = runs or (50 if quick else 200)
    bare_graph = create_agent(_model(), tools=[add])
    agent = ToolAgent(_model(), [add])
    registry = with_tools(default_registry, [add])
    spec = spec_from_data({"nodes": [{"id": "T", "agent": "ToolAgent", "input": "", "params": {"tools": ["add"]}}]},
                          registry=registry)
    compiled = compile_spec(spec, _model(), registry=registry)

    async def bare() -> None:
        out = await bare_graph.ainvoke({"messages": [HumanMessage(content="What is 17 + 25?")]})
        assert "42" in str(out["messages"][-1].content)

    async def ours() -> None:
        assert (await agent.arun("What is 17 + 25?")).answer == "42"

    async def ours_compiled() -> None:
        assert (await compiled.ainvoke({"question": "What is 17 + 25?"}))["final_answer"] == "42"

    async def measure() -> tuple[float, float, float]:
        # Interleaved rounds, so that load from other processes hits all three alike.
        totals = [0.0, 0.0, 0.0]
        rounds = 5
        for _ in range(rounds):
            for i, call in enumerate((bare, ours, ours_compiled)):
                totals[i] += await _per_run_ms(call, max(1, runs // rounds))
        return totals[0] / rounds, totals[1] / rounds, totals[2] / rounds

    bare_ms, ours_ms, compiled_ms = asyncio.run(measure())
    case = "2 model calls + 1 tool call"
    return [
        {"benchmark": "tool_agent", "case": f"ToolAgent.arun vs create_agent, {case}",
         "ours_ms": round(ours_ms, 3), "bare_langchain_ms": round(bare_ms, 3), "ratio": round(ours_ms / bare_ms, 2)},
        {"benchmark": "tool_agent", "case": f"compiled ToolAgent node vs create_agent, {case}",
         "ours_ms": round(compiled_ms, 3), "bare_langchain_ms": round(bare_ms, 3),
         "ratio": round(compiled_ms / bare_ms, 2)},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    for row in run(runs=args.runs):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
