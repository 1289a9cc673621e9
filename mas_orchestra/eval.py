"""Documented import path of evaluations: re-exports :mod:`mas_orchestra.bench.evaluation`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.bench.evaluation import (
    BASELINE_KINDS,
    GRADERS,
    STATUSES,
    ConfigMismatchError,
    EvalInputError,
    add_cli,
    aevaluate,
    discover_run_dirs,
    evaluate,
    format_summary,
    load_rows,
    pareto_plot,
    read_results,
    summarize,
)

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
    "format_summary",
    "load_rows",
    "pareto_plot",
    "read_results",
    "summarize",
]
