"""Models for the served-graph test, importable as ``python:tests.served_models:<factory>`` by the server.

The orchestrator always writes a four-node fan-in (``P0``, ``P1``, ``P2`` → ``J``); sub-agents are the
local OpenAI-compatible echo server, chosen per run through ``configurable["subagent"]``.
"""

from __future__ import annotations

from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel

__all__ = ["CHAIN6", "FAN_IN", "ONE_AGENT", "chain_orchestrator", "one_agent_orchestrator", "orchestrator", "slow_subagent"]

FAN_IN = spec_from_data(
    {
        "nodes": [
            *({"id": f"P{i}", "agent": "cot", "input": f"part {i}"} for i in range(3)),
            {"id": "J", "agent": "cot", "input": "combine ${P0} ${P1} ${P2}"},
        ],
        "edges": [{"source": f"P{i}", "target": "J"} for i in range(3)],
    }
).to_xml()


def orchestrator() -> ScriptedChatModel:
    """An orchestrator that writes :data:`FAN_IN` for any question."""
    return ScriptedChatModel(replies=[FAN_IN], model_name="scripted-orchestrator")


CHAIN6 = spec_from_data(
    {
        "nodes": [{"id": "S0", "agent": "cot", "input": "step 0"}]
        + [{"id": f"S{i}", "agent": "cot", "input": f"step {i} after ${{S{i - 1}}}"} for i in range(1, 6)],
        "edges": [{"source": f"S{i - 1}", "target": f"S{i}"} for i in range(1, 6)],
    }
).to_xml()


def chain_orchestrator() -> ScriptedChatModel:
    """An orchestrator that writes a six-node chain S0 -> … -> S5 (one sub-agent request per node)."""
    return ScriptedChatModel(replies=[CHAIN6], model_name="scripted-orchestrator")


def one_agent_orchestrator() -> ScriptedChatModel:
    """An orchestrator that delegates every question to one CoT agent ``A``."""
    return ScriptedChatModel(replies=[ONE_AGENT], model_name="scripted-orchestrator")


def slow_subagent() -> ScriptedChatModel:
    """A sub-agent that takes 30 s per call (what a per-call time-out must cut short)."""
    return ScriptedChatModel(delay=30.0, model_name="scripted-slow")


ONE_AGENT = spec_from_data({"nodes": [{"id": "A", "agent": "cot", "input": "solve it"}]}).to_xml()
