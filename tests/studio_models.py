"""Models for the studio tests, importable as ``python:tests.studio_models:<factory>`` by a studio started
with ``--allow-python-models``."""

from __future__ import annotations

from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel

__all__ = ["CHAIN", "chain_orchestrator", "hanging_subagent", "slow_subagent"]

CHAIN = spec_from_data(
    {
        "nodes": [
            {"id": "FIRST", "agent": "cot", "input": "Find the first part."},
            {"id": "SECOND", "agent": "cot", "input": "Use ${FIRST} to finish."},
        ],
        "edges": [{"source": "FIRST", "target": "SECOND"}],
    }
).to_xml()


def chain_orchestrator() -> ScriptedChatModel:
    """Writes the two-node chain FIRST -> SECOND for any question."""
    return ScriptedChatModel(replies=[CHAIN], model_name="studio-chain-orchestrator")


def hanging_subagent() -> ScriptedChatModel:
    """A sub-agent whose calls take an hour (a call time-out must cut them)."""
    return ScriptedChatModel(delay=3600.0, model_name="studio-hanging")


def slow_subagent() -> ScriptedChatModel:
    """A sub-agent that answers 7 after 1.5 s per call (long enough to disconnect mid-run)."""
    return ScriptedChatModel(delay=1.5, replies=["<thinking>slow</thinking><answer>7</answer>"], model_name="studio-slow")
