"""How a run ends: the :class:`Status` values, in one small module.

:mod:`mas_orchestra.runtime` produces them (and re-exports :class:`Status`); the eval and the training
rewards count them. Kept apart from the runtime so that importing the values loads no LangGraph.
"""

from __future__ import annotations

import enum

__all__ = ["Status"]


class Status(str, enum.Enum):
    """How a run ended (a ``str`` enum: ``Status.OK == "ok"``).

    Attributes:
        OK: The graph ran to its end; ``Outcome.answer`` is the sink's answer.
        INVALID_SPEC: The orchestration did not parse or validate (``Outcome.error`` lists the problems).
        COMPILE_ERROR: The spec could not be compiled (e.g. a search node without a backend).
        EXEC_ERROR: The orchestrator or a sub-agent failed (``Outcome.failed_node`` names the node).
        TIMEOUT: The run exceeded ``RunSettings.timeout``; ``Outcome.finished_nodes`` says what had finished.
        INTERRUPTED: Paused for approval on a checkpointed thread; resume it to go on.
    """

    OK = "ok"
    INVALID_SPEC = "invalid_spec"
    COMPILE_ERROR = "compile_error"
    EXEC_ERROR = "exec_error"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"  # paused for approval on a checkpointed thread; resume it to go on
