"""Sub-agent factories for the multi-process training test, importable as ``python:tests.ddp_models:<name>``."""

from __future__ import annotations

import os

from mas_orchestra.testing import ScriptedChatModel, cot_reply

__all__ = ["unreachable_on_rank_1"]


def unreachable_on_rank_1() -> ScriptedChatModel:
    """Answers 4 on every rank but rank 1, where building the sub-agent fails (its endpoint is misconfigured on
    that node, say) while rank 0 goes on to load the model and waits for rank 1 in the first collective."""
    if int(os.environ.get("RANK", "0")) == 1:
        raise ConnectionError("rank 1 cannot reach its sub-agent endpoint (injected failure)")
    return ScriptedChatModel(replies=[cot_reply("4")], model_name="scripted-rank-0")
