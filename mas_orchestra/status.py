"""How a run ends: the :class:`Status` values, in one small module.

:mod:`mas_orchestra.runtime` produces them (and re-exports :class:`Status`); the eval and the training
rewards count them. Kept apart from the runtime so that importing the values loads no LangGraph.
"""

from __future__ import annotations

import enum

__all__ = ["Status"]


class Status(str, enum.Enum):
    """How a run ended."""

    OK = "ok"
    INVALID_SPEC = "invalid_spec"
    COMPILE_ERROR = "compile_error"
    EXEC_ERROR = "exec_error"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"  # paused for approval on a checkpointed thread; resume it to go on
