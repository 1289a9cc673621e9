"""What every part of an eval shares: file names, the status/grader/baseline lists, the errors and
the data rows (:func:`load_rows`, over the shared reader :func:`mas_orchestra.bench.datasets.read_rows`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mas_orchestra.bench.datasets import read_rows
from mas_orchestra.bench.grading import VALID_KINDS
from mas_orchestra.bench.masbench.official import is_official_source, load_official_source
from mas_orchestra.builtin_kinds import BASELINE_KINDS as _BASELINE_KINDS
from mas_orchestra.errors import DataError, MasOrchestraError
from mas_orchestra.status import Status

__all__ = [
    "BASELINE_KINDS",
    "CONFIG_FILE",
    "CONFIG_VERSION",
    "GRADERS",
    "IDENTITY_KEYS",
    "LOCK_FILE",
    "MAX_ORCHESTRATION_CHARS",
    "PARETO_FILE",
    "RESULTS_FILE",
    "STATUSES",
    "SUMMARY_FILE",
    "ConfigMismatchError",
    "EvalInputError",
    "load_rows",
    "model_label",
]

# One logger for the whole eval, under the name it has always had (so existing log filters keep working).
log = logging.getLogger("mas_orchestra.bench.evaluation")

RESULTS_FILE = "results.jsonl"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
PARETO_FILE = "pareto.png"
LOCK_FILE = ".lock"
MAX_ORCHESTRATION_CHARS = 20_000
CONFIG_VERSION = 1

# Each list comes from its one source, all cheap to import (no LangGraph, no ``graphs`` layer): the CLI
# imports this module for every command.
#: The statuses an eval run can end with: every :class:`Status` but ``interrupted``, which needs a
#: checkpointer (a paused thread), and eval runs have none.
STATUSES: tuple[str, ...] = tuple(s.value for s in Status if s is not Status.INTERRUPTED)
GRADERS: tuple[str, ...] = VALID_KINDS
BASELINE_KINDS: tuple[str, ...] = _BASELINE_KINDS
# The arguments that decide what a results line means; a resumed run must agree on all of them.
IDENTITY_KEYS: tuple[str, ...] = (
    "data", "orchestrator", "subagent", "dom", "grader", "judge_model", "baseline", "agents", "max_tokens",
    # None when off, so directories written before these existed still match:
    "strict", "prompt", "whole_response_fallback", "control", "direct_answer",
)


class EvalInputError(MasOrchestraError, ValueError):
    """Bad input to an eval (data file, rows, arguments); the message says what and where."""


class ConfigMismatchError(EvalInputError):
    """The run directory holds results of a run with different data, models, DoM or grader."""



def load_rows(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Read and check eval rows.

    Every row needs ``id`` (string or integer, unique), ``question`` (non-empty string) and ``answer``
    (string, number, or a list of strings for multi-answer tasks); blank lines are skipped.

    Args:
        source: A JSONL file, a ``masbench-official:<path>[:<subset>][:split=…]`` source
            (:mod:`mas_orchestra.bench.masbench.official`) or an iterable of dicts.

    Returns:
        The rows, in order.

    Raises:
        EvalInputError: A bad row (naming the file and line of the first one), or no rows at all.
    """
    try:
        if is_official_source(source):
            rows = read_rows(load_official_source(str(source)), ids="require", unique_ids=True)
        else:
            rows = read_rows(source, ids="require", unique_ids=True)
    except DataError as exc:
        # An eval reports every bad input as EvalInputError (the CLI's exit 2); the message is the reader's.
        raise EvalInputError(str(exc)) from None
    if not rows:
        raise EvalInputError(f"{Path(source)}: no rows" if isinstance(source, (str, os.PathLike))
                             else "no rows to evaluate")
    return rows


def _run_label(baseline: str | None, orchestrator: str | None) -> str:
    return baseline if baseline else f"orchestra:{orchestrator}"


def model_label(model: Any) -> str | None:
    """How a model is written in config.json: its string, or class and model name for an object.

    Args:
        model: A model string, a chat model, a pool mapping, or ``None``.

    Returns:
        The label (``None`` for no model).
    """
    if model is None:
        return None
    if isinstance(model, str):
        return model.strip()
    if isinstance(model, Mapping):  # a sub-agent model pool
        return ",".join(f"{name}={model_label(m)}" for name, m in model.items())
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return f"{type(model).__name__}:{name}" if isinstance(name, str) and name else type(model).__name__
