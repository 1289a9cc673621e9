"""Evaluations: run an orchestrator (or a single-agent baseline) over a JSONL data set, grade, account, plot.

Command line (registered on ``mas-orchestra`` by :func:`add_cli`)::

    mas-orchestra eval --data FILE.jsonl [--orchestrator M] [--subagent M] [--dom high|low]
                       [--samples K] [--limit N] [--concurrency C] [--grader math|exact|f1|mcq|judge]
                       [--judge-model M] [--out DIR] [--timeout S] [--baseline cot|sc|debate|reflexion|search]
                       [--search SPEC] [--temperature T] [--json] [--no-progress] [--force]
    mas-orchestra pareto DIR [DIR ...] [--out FILE.png]

Models are model strings (``embedded``, ``openai:gpt-4o-mini``, ``vllm:<m>@<url>``,
``python:module:attr`` …, see :mod:`mas_orchestra.models`); both default to ``embedded``. With
``--baseline KIND`` no orchestrator is used: every question runs the one-node spec of that block on
the sub-agent model (the paper's CoT / SC / Debate / Reflexion / Search rows). ``--temperature`` is the
orchestrator's sampling temperature, or the block's temperature in baseline mode.

Python API: :func:`aevaluate` / :func:`evaluate` (returns the summary dict), :func:`load_rows`,
:func:`read_results`, :func:`summarize`, :func:`pareto_plot`, :func:`discover_run_dirs`.

The run directory (``--out``, default ``runs/<data-stem>-<YYYYmmdd-HHMMSS>``) holds:

* ``results.jsonl`` — one line per (question id, sample): ``id``, ``sample``, ``question``, ``status``,
  ``valid``, ``answer``, ``truth``, ``correct``, ``usage`` (RunUsage), ``spec`` (GraphSpec or null),
  ``error``, ``failed_node``, ``grade_error``, ``orchestration`` (raw text, at most 20,000 characters;
  ``orchestration_chars`` is the full length). Each line is appended, flushed and fsync'ed as its run
  finishes, so a killed eval loses nothing that finished. Rerunning with the same ``--out`` resumes: pairs
  already in the file are skipped, so a larger ``--limit`` or ``--samples`` runs only the new pairs. An
  unterminated last line (the process died mid-write) is cut off and its pair re-run.
* ``config.json`` — the run's arguments. A rerun whose data file, models, DoM, grader, judge model or
  baseline differ is refused (:class:`ConfigMismatchError`, exit 2) unless ``--force``/``force=True``,
  which keeps the existing lines as done and records the new arguments (to start afresh, use a new
  directory).
* ``summary.json`` — recomputed from every line of ``results.jsonl`` at the end of each invocation.
* ``pareto.png`` — accuracy (avg@k) against mean cost and against mean LLM calls per question-sample,
  one point per run directory next to this one (siblings with a ``summary.json``) plus this one.

Exit codes of ``eval``: 0 when the eval finished (whatever the accuracy), 2 for bad input (missing data
file, a row without ``id``/``question``/``answer``, a config mismatch, a missing API key or extra),
130 when interrupted (what finished is kept).

A run directory is locked (``flock`` on ``.lock``) while an eval writes to it, so two evals cannot
interleave their lines; the lock dies with the process, so a killed eval never leaves a stale lock.

Layout of this package (its public names are re-exported here):
:mod:`~mas_orchestra.bench.evaluation.common` (file names, literal lists, errors, :func:`load_rows`),
:mod:`~mas_orchestra.bench.evaluation.storage` (``results.jsonl``, lock, config check),
:mod:`~mas_orchestra.bench.evaluation.summary` (:func:`summarize`, :func:`format_summary`),
:mod:`~mas_orchestra.bench.evaluation.plots` (:func:`pareto_plot`), :mod:`~mas_orchestra.bench.evaluation.runner`
(:func:`aevaluate`, :func:`evaluate`) and :mod:`~mas_orchestra.bench.evaluation.cli` (:func:`add_cli`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.lazy import lazy_exports

if TYPE_CHECKING:
    from mas_orchestra.bench.evaluation.cli import add_cli
    from mas_orchestra.bench.evaluation.common import (
        BASELINE_KINDS,
        GRADERS,
        STATUSES,
        ConfigMismatchError,
        EvalInputError,
        load_rows,
    )
    from mas_orchestra.bench.evaluation.plots import discover_run_dirs, pareto_plot
    from mas_orchestra.bench.evaluation.runner import aevaluate, evaluate
    from mas_orchestra.bench.evaluation.storage import read_results
    from mas_orchestra.bench.evaluation.summary import format_summary, summarize

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

# Imported on first use: the runner loads the runtime (LangGraph), which ``mas-orchestra eval --help`` does not need.
__getattr__, __dir__ = lazy_exports(__name__, {
    "mas_orchestra.bench.evaluation.cli": ["add_cli"],
    "mas_orchestra.bench.evaluation.common": ["BASELINE_KINDS", "GRADERS", "STATUSES", "ConfigMismatchError",
                                              "EvalInputError", "load_rows"],
    "mas_orchestra.bench.evaluation.plots": ["discover_run_dirs", "pareto_plot"],
    "mas_orchestra.bench.evaluation.runner": ["aevaluate", "evaluate"],
    "mas_orchestra.bench.evaluation.storage": ["read_results"],
    "mas_orchestra.bench.evaluation.summary": ["format_summary", "summarize"],
})
