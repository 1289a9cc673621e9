"""Offline demo models for trying the studio without any model server (``python:`` model strings).

``python:mas_orchestra.studio.demo:orchestrator`` writes a four-agent plan for any question (two solvers
and a self-consistency vote feeding a judge) and ``scripted:<answer>`` answers every sub-agent call. These
are the only ``python:`` model strings the studio accepts unless it is started with ``--allow-python-models``.
"""

from __future__ import annotations

from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel

__all__ = ["DEMO_ORCHESTRATOR", "PLAN", "orchestrator"]

#: The model string of :func:`orchestrator`.
DEMO_ORCHESTRATOR = "python:mas_orchestra.studio.demo:orchestrator"

PLAN = spec_from_data(
    {
        "thinking": "Solve it twice independently, vote once, then let a judge reconcile the three.",
        "nodes": [
            {"id": "SOLVE_A", "agent": "cot", "description": "Solve directly", "input": "Solve the problem."},
            {"id": "SOLVE_B", "agent": "cot", "description": "Solve another way",
             "input": "Solve the problem by checking each quantity."},
            {"id": "VOTE", "agent": "sc", "description": "Sample and vote", "input": "Solve the problem."},
            {"id": "JUDGE", "agent": "cot", "description": "Reconcile",
             "input": "Compare ${SOLVE_A}, ${SOLVE_B} and ${VOTE}; give the answer they support."},
        ],
        "edges": [{"source": s, "target": "JUDGE"} for s in ("SOLVE_A", "SOLVE_B", "VOTE")],
    }
).to_xml()


def orchestrator() -> ScriptedChatModel:
    """An orchestrator that writes :data:`PLAN` for any question."""
    return ScriptedChatModel(replies=[PLAN], model_name="demo-orchestrator")
