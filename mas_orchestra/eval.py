"""Evaluations: run an orchestrator (or a single-agent baseline) over a JSONL data set, grade, account, plot.

The import path the README, the notebooks and the tests use. The code lives in the package
:mod:`mas_orchestra.evaluation` (whose docstring documents the command line, the Python API and the run
directory); this module re-exports every name the single ``eval`` module had, as the same objects.

Assigning a name here (``monkeypatch.setattr(mas_orchestra.eval, "_GRADE_SLACK_S", 0.0)``) also assigns it
in each :mod:`mas_orchestra.evaluation` module that defines or imported it, so patching this module still
changes what the eval does, as it did when all of this was one module.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from mas_orchestra.datasets import scalar_text as _scalar_text
from mas_orchestra.errors import MissingExtraError
from mas_orchestra.evaluation import cli as _cli
from mas_orchestra.evaluation import common as _common
from mas_orchestra.evaluation import plots as _plots
from mas_orchestra.evaluation import runner as _runner
from mas_orchestra.evaluation import storage as _storage
from mas_orchestra.evaluation import summary as _summary
from mas_orchestra.evaluation.cli import (
    _cmd_eval,
    _cmd_pareto,
    _default_out,
    _input_errors,
    _positive_float,
    _positive_int,
    add_cli,
)
from mas_orchestra.evaluation.common import (
    BASELINE_KINDS,
    CONFIG_FILE,
    CONFIG_VERSION,
    GRADERS,
    IDENTITY_KEYS,
    LOCK_FILE,
    MAX_ORCHESTRATION_CHARS,
    PARETO_FILE,
    RESULTS_FILE,
    STATUSES,
    SUMMARY_FILE,
    ConfigMismatchError,
    EvalInputError,
    _run_label,
    load_rows,
    log,
)
from mas_orchestra.evaluation.plots import _frontier, discover_run_dirs, pareto_plot
from mas_orchestra.evaluation.runner import (
    _BASELINE_DEBATE_ROLES,
    _GRADE_SLACK_S,
    Runner,
    _baseline_spec,
    _check_arguments,
    _failed_outcome,
    _make_runner,
    _model_label,
    _ModelCache,
    _progress_bar,
    _record,
    _run_pending,
    aevaluate,
    evaluate,
)
from mas_orchestra.evaluation.storage import (
    _check_config,
    _cut_partial_tail,
    _dir_lock,
    _key,
    _ResultWriter,
    _write_json,
    read_results,
)
from mas_orchestra.evaluation.summary import _VALID_STATUSES, _is_valid, _mean, format_summary, summarize

__all__ = [
    "BASELINE_KINDS",
    "GRADERS",
    "STATUSES",
    "ConfigMismatchError",
    "EvalInputError",
    "add_cli",
    "aevaluate",
    "discover_run_dirs",
    "evaluate",
    "load_rows",
    "pareto_plot",
    "read_results",
    "summarize",
]

# The re-exported private names above are part of what this module always offered (tests use some);
# naming them here keeps linters from calling the imports unused.
_REEXPORTED = (
    MissingExtraError, _scalar_text, _cmd_eval, _cmd_pareto, _default_out, _input_errors, _positive_float,
    _positive_int, CONFIG_FILE, CONFIG_VERSION, IDENTITY_KEYS, LOCK_FILE, MAX_ORCHESTRATION_CHARS, PARETO_FILE,
    RESULTS_FILE, SUMMARY_FILE, _run_label, log, _frontier, _BASELINE_DEBATE_ROLES, _GRADE_SLACK_S, Runner,
    _baseline_spec, _check_arguments, _failed_outcome, _make_runner, _model_label, _ModelCache, _progress_bar,
    _record, _run_pending, _check_config, _cut_partial_tail, _dir_lock, _key, _ResultWriter, _write_json,
    _VALID_STATUSES, _is_valid, _mean, format_summary,
)

_IMPLEMENTATION: tuple[types.ModuleType, ...] = (_common, _storage, _summary, _plots, _runner, _cli)


class _EvalModule(types.ModuleType):
    """This module's type: an assignment or deletion also reaches the implementation modules holding the name."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        for module in _IMPLEMENTATION:
            if name in vars(module):
                setattr(module, name, value)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        for module in _IMPLEMENTATION:
            if name in vars(module):
                delattr(module, name)


sys.modules[__name__].__class__ = _EvalModule
