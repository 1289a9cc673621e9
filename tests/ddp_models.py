"""Sub-agent factories for the multi-process training test, importable as ``python:tests.ddp_models:<name>``."""

from __future__ import annotations

import os
import sys

from mas_orchestra.testing import ScriptedChatModel, cot_reply

__all__ = ["dies_on_rank_1"]


def dies_on_rank_1() -> ScriptedChatModel:
    """Answers 4 on every rank but rank 1, whose process dies at its first sub-agent call (like an OOM kill)."""
    rank = int(os.environ.get("RANK", "0"))

    def reply(_messages: object, _index: int) -> str:
        if rank == 1:
            print("rank 1 sub-agent died (injected failure)", file=sys.stderr, flush=True)
            os._exit(17)
        return cot_reply("4")

    return ScriptedChatModel(replies=reply, model_name="scripted-dies-on-rank-1")
