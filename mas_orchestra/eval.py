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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import importlib.util
import json
import logging
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mas_orchestra.errors import MasOrchestraError, MissingExtraError, install_command

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

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
PARETO_FILE = "pareto.png"
LOCK_FILE = ".lock"
MAX_ORCHESTRATION_CHARS = 20_000
CONFIG_VERSION = 1

# Kept as literals (checked against the runtime/grading/graphs modules in the tests) so importing this
# module, which the CLI does for every command, stays cheap and never imports the ``graphs`` layer.
STATUSES: tuple[str, ...] = ("ok", "invalid_spec", "compile_error", "exec_error", "timeout")
GRADERS: tuple[str, ...] = ("math", "exact", "f1", "mcq", "judge")
BASELINE_KINDS: tuple[str, ...] = ("cot", "sc", "reflexion", "debate", "search")
# Same roles as graphs.baselines.DEFAULT_DEBATE_ROLES (mas_orchestra may not import graphs).
_BASELINE_DEBATE_ROLES = ("Careful solver", "Critical reviewer")
# The arguments that decide what a results line means; a resumed run must agree on all of them.
IDENTITY_KEYS: tuple[str, ...] = ("data", "orchestrator", "subagent", "dom", "grader", "judge_model", "baseline")
_VALID_STATUSES = frozenset({"ok", "exec_error", "timeout"})
# Slack on top of the Math-Verify timeout: a fresh grading worker may take up to 120 s to import sympy,
# and a judge model call needs a network round trip. Past it, the grade is False with the error recorded.
_GRADE_SLACK_S = 150.0


class EvalInputError(MasOrchestraError, ValueError):
    """Bad input to an eval (data file, rows, arguments); the message says what and where."""


class ConfigMismatchError(EvalInputError):
    """The run directory holds results of a run with different data, models, DoM or grader."""


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


def _scalar_text(value: Any) -> str | None:
    """A row value as text: strings as they are, numbers written out; anything else is not an answer."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # bool is an int, but True is no answer to a math problem
        return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    return None


def _check_row(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise EvalInputError(f"{where}: a row must be a JSON object, got {type(obj).__name__}")
    missing = [key for key in ("id", "question", "answer") if obj.get(key) is None]
    if missing:
        raise EvalInputError(f"{where}: row without {', '.join(repr(k) for k in missing)}")
    row_id = _scalar_text(obj["id"])
    if row_id is None or not row_id.strip():
        raise EvalInputError(f"{where}: 'id' must be a non-empty string or integer, got {obj['id']!r}")
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise EvalInputError(f"{where}: 'question' must be a non-empty string")
    raw = obj["answer"]
    answer: str | list[str]
    if isinstance(raw, list):
        parts = [_scalar_text(a) for a in raw]
        if not parts or any(p is None or not p.strip() for p in parts):
            raise EvalInputError(f"{where}: 'answer' list must hold non-empty strings")
        answer = [p for p in parts if p is not None]
    else:
        text = _scalar_text(raw)
        if text is None or not text.strip():
            raise EvalInputError(f"{where}: 'answer' must be a non-empty string, number or list of strings")
        answer = text
    row = dict(obj)
    row.update(id=row_id, question=question, answer=answer)
    return row


def _add_unique(row: dict[str, Any], where: str, where_of: dict[str, str]) -> dict[str, Any]:
    # Ids key the resume: two rows with one id would make one of them look already done.
    if row["id"] in where_of:
        raise EvalInputError(f"{where}: duplicate id {row['id']!r} (first at {where_of[row['id']]})")
    where_of[row["id"]] = where
    return row


def load_rows(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Read and check eval rows from a JSONL file (or an iterable of dicts).

    Every row needs ``id`` (string or integer, unique), ``question`` (non-empty string) and ``answer``
    (string, number, or a list of strings for multi-answer tasks); blank lines are skipped. Raises
    :class:`EvalInputError` naming the file and line of the first bad row.
    """
    rows: list[dict[str, Any]] = []
    where_of: dict[str, str] = {}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise EvalInputError(f"{path}: no such data file")
        try:
            with path.open(encoding="utf-8") as handle:
                for lineno, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    where = f"{path}:{lineno}"
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise EvalInputError(f"{where}: not valid JSON ({exc.msg})") from None
                    rows.append(_add_unique(_check_row(obj, where), where, where_of))
        except UnicodeDecodeError as exc:
            raise EvalInputError(f"{path}: not UTF-8 text ({exc.reason})") from None
        if not rows:
            raise EvalInputError(f"{path}: no rows")
        return rows
    for index, obj in enumerate(source, 1):
        where = f"row {index}"
        rows.append(_add_unique(_check_row(obj, where), where, where_of))
    if not rows:
        raise EvalInputError("no rows to evaluate")
    return rows


# --------------------------------------------------------------------------------------------------
# results.jsonl
# --------------------------------------------------------------------------------------------------


def _key(record: Mapping[str, Any]) -> tuple[str, int]:
    return str(record["id"]), int(record["sample"])


def read_results(path: str | os.PathLike[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """The records of a ``results.jsonl`` by (id, sample), in file order (a repeated pair: last wins).

    An unterminated last line (the writer was killed mid-line) is ignored, and so is, with a warning,
    any line that is not a JSON record with ``id`` and ``sample``.
    """
    file = Path(path)
    if not file.is_file():
        return {}
    data = file.read_bytes()
    records: dict[tuple[str, int], dict[str, Any]] = {}
    lines = data.split(b"\n")
    # After the last b"\n" is either b"" (a clean file) or a partial line: never a finished record.
    for lineno, raw in enumerate(lines[:-1], 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            key = _key(record)
        except (ValueError, KeyError, TypeError):
            log.warning("%s:%d: skipping an unreadable results line", file, lineno)
            continue
        records.pop(key, None)  # re-insert so the order is that of the last occurrence
        records[key] = record
    return records


def _cut_partial_tail(path: Path) -> int:
    """Remove an unterminated last line so new lines are not glued onto it; returns bytes removed."""
    if not path.is_file():
        return 0
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        # Scan back in blocks for the last newline; the tail is at most one record long.
        pos, block = size, 1 << 16
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            handle.seek(start)
            chunk = handle.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning("%s: removed an unterminated last line (%d bytes); its run is done again", path, size - keep)
    return size - keep


class _ResultWriter:
    """Appends one JSON line per finished run: flushed at once, then fsync'ed."""

    def __init__(self, path: Path) -> None:
        self._handle = path.open("a", encoding="utf-8")

    async def write(self, record: Mapping[str, Any]) -> None:
        # The line is written and flushed synchronously, in the event loop thread, as one write(): lines
        # never interleave, and once flush() returns the line is in the kernel, so a killed process keeps
        # it (a kill mid-write leaves at most one unterminated line, which the next run cuts off). The
        # fsync, so that a machine crash keeps it too, takes milliseconds on a real disk: it runs in a
        # thread so it never stalls the other runs in flight.
        self._handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._handle.flush()
        await asyncio.to_thread(os.fsync, self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


@contextlib.contextmanager
def _dir_lock(out_dir: Path) -> Any:
    """Hold an exclusive lock on the run directory, or raise EvalInputError if another eval holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locking, as before
        yield
        return
    handle = (out_dir / LOCK_FILE).open("a")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise EvalInputError(f"{out_dir}: another eval is writing to this run directory") from None
        yield
    finally:
        handle.close()  # closing releases the lock


def _write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically (temp file + rename), so a kill never leaves half a config or summary."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, ensure_ascii=False, default=str)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------------


def _is_valid(record: Mapping[str, Any]) -> bool:
    if "valid" in record:
        return bool(record["valid"])
    return record.get("status") in _VALID_STATUSES and record.get("spec") is not None


def _mean(total: float, count: int) -> float:
    return total / count if count else 0.0


def summarize(
    records: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any] | None = None,
    elapsed_s: float | None = None,
) -> dict[str, Any]:
    """Metrics over results records (see the module docstring); ``config`` keys are copied in.

    ``avg_at_k`` is the mean correctness over all runs, ``pass_at_k`` the share of questions with at
    least one correct sample, ``valid_rate`` the share of runs whose orchestration parsed and compiled.
    Means are per run (one question-sample).
    """
    recs = list(records)
    runs = len(recs)
    per_question: dict[str, list[bool]] = defaultdict(list)
    status_counts = dict.fromkeys(STATUSES, 0)
    histogram: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    cost = wall = 0.0
    valid = correct = grade_errors = n_specs = n_agents = 0
    for rec in recs:
        ok = bool(rec.get("correct"))
        per_question[str(rec.get("id"))].append(ok)
        correct += ok
        status = str(rec.get("status"))
        status_counts[status] = status_counts.get(status, 0) + 1
        valid += _is_valid(rec)
        grade_errors += rec.get("grade_error") is not None
        usage = rec.get("usage") or {}
        for field in ("llm_calls", "orchestrator_calls", "subagent_calls", "format_retries", "input_tokens",
                      "output_tokens", "total_tokens"):
            totals[field] += int(usage.get(field) or 0)
        cost += float(usage.get("cost_usd") or 0.0)
        wall += float(usage.get("wall_s") or 0.0)
        spec = rec.get("spec")
        if spec:
            n_specs += 1
            nodes = spec.get("nodes") or []
            n_agents += len(nodes)
            histogram.update(str(node.get("agent")) for node in nodes)
    n = len(per_question)
    summary: dict[str, Any] = {
        "n": n,
        "samples": int(config["samples"]) if config and config.get("samples") else
        max((len(v) for v in per_question.values()), default=0),
        "runs": runs,
        "avg_at_k": _mean(correct, runs),
        "pass_at_k": _mean(sum(any(v) for v in per_question.values()), n),
        "valid_rate": _mean(valid, runs),
        "status_counts": status_counts,
        "grade_errors": grade_errors,
        "mean_llm_calls": _mean(totals["llm_calls"], runs),
        "total_llm_calls": totals["llm_calls"],
        "total_orchestrator_calls": totals["orchestrator_calls"],
        "total_subagent_calls": totals["subagent_calls"],
        "total_format_retries": totals["format_retries"],
        "format_retries_per_subagent_call": _mean(totals["format_retries"], totals["subagent_calls"]),
        "mean_total_tokens": _mean(totals["total_tokens"], runs),
        "total_input_tokens": totals["input_tokens"],
        "total_output_tokens": totals["output_tokens"],
        "total_tokens": totals["total_tokens"],
        "total_cost_usd": cost,
        "mean_cost_usd": _mean(cost, runs),
        "total_wall_s": wall,
        "mean_wall_s": _mean(wall, runs),
        "elapsed_s": elapsed_s,
        "agent_histogram": dict(sorted(histogram.items())),
        "mean_agents_per_spec": _mean(n_agents, n_specs),
    }
    if config:
        for key in ("label", "data", "orchestrator", "subagent", "dom", "grader", "judge_model", "baseline",
                    "search", "limit", "timeout", "temperature", "constrained"):
            summary[key] = config.get(key)
    return summary


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------


def _model_label(model: Any) -> str | None:
    """How a model is written in config.json: its string, or class and model name for an object."""
    if model is None:
        return None
    if isinstance(model, str):
        return model.strip()
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return f"{type(model).__name__}:{name}" if isinstance(name, str) and name else type(model).__name__


def _run_label(baseline: str | None, orchestrator: str | None) -> str:
    return baseline if baseline else f"orchestra:{orchestrator}"


def _baseline_spec(kind: str, temperature: float | None) -> Any:
    """The one-node baseline spec, as graphs.baselines.baseline_spec builds it (that layer is above us)."""
    from mas_orchestra.registry import default_registry
    from mas_orchestra.spec import spec_from_data

    agent = default_registry.get(kind)
    params: dict[str, Any] = {}
    if agent.name == "debate":
        params["roles"] = list(_BASELINE_DEBATE_ROLES)
    if temperature is not None and "temperature" in agent.params.model_fields:
        params["temperature"] = temperature
    return spec_from_data({"dom": "low", "nodes": [{"id": agent.name, "agent": agent.name, "input": "",
                                                     "params": params}]})


class _ModelCache:
    """Resolve each model string once, so ``--orchestrator embedded --subagent embedded`` loads one model."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def __call__(self, model: Any) -> Any:
        from mas_orchestra.models import resolve_model

        if not isinstance(model, str):
            return resolve_model(model)
        key = model.strip()
        if key not in self._cache:
            self._cache[key] = resolve_model(key)
        return self._cache[key]


Runner = Callable[[str], Awaitable[Any]]


def _make_runner(
    *,
    orchestrator: Any,
    subagent: Any,
    dom: str,
    baseline: str | None,
    search: Any,
    timeout: float | None,
    temperature: float | None,
    max_retries: int,
    call_timeout: float | None,
    models: _ModelCache,
    constrained: Any = None,
) -> Runner:
    """One Orchestra (or one resolved sub-agent model for a baseline), reused for every question."""
    from mas_orchestra.runtime import Orchestra, execute_spec

    sub_model = models(subagent)
    if baseline:
        spec = _baseline_spec(baseline, temperature)

        async def run_baseline(question: str) -> Any:
            return await execute_spec(spec, question, model=sub_model, search=search, timeout=timeout,
                                      max_retries=max_retries, call_timeout=call_timeout, constrained=constrained)

        return run_baseline
    orchestra = Orchestra(
        models(orchestrator), sub_model, dom,  # type: ignore[arg-type]
        search=search, timeout=timeout, call_timeout=call_timeout, max_retries=max_retries,
        orchestrator_temperature=temperature, constrained=constrained,
    )
    return orchestra.arun


def _failed_outcome(question: str, exc: BaseException) -> Any:
    from mas_orchestra.runtime import Outcome, Status

    return Outcome(status=Status.EXEC_ERROR, question=question, error=f"eval: {type(exc).__name__}: {exc}")


def _record(row: Mapping[str, Any], sample: int, outcome: Any, correct: bool, grade_error: str | None) -> dict:
    orchestration = outcome.orchestration or ""
    return {
        "id": row["id"],
        "sample": sample,
        "question": row["question"],
        "status": outcome.status.value,
        "valid": bool(outcome.valid),
        "answer": outcome.answer,
        "truth": row["answer"],
        "correct": bool(correct),
        "usage": outcome.usage.model_dump(mode="json"),
        "spec": outcome.spec.model_dump(mode="json") if outcome.spec is not None else None,
        "error": outcome.error,
        "failed_node": outcome.failed_node,
        "grade_error": grade_error,
        "orchestration": orchestration[:MAX_ORCHESTRATION_CHARS],
        "orchestration_chars": len(orchestration),
    }


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        log.warning("tqdm is not installed (%s); no progress bar", install_command("eval"))
        return None
    return tqdm(total=total, initial=initial, desc="eval", unit="run", file=sys.stderr, dynamic_ncols=True,
                leave=True)


def _check_arguments(
    grader: str, dom: str, samples: int, concurrency: int, baseline: str | None, limit: int | None,
    timeout: float | None, judge: Any,
) -> None:
    if grader not in GRADERS:
        raise EvalInputError(f"unknown grader {grader!r}; valid graders: {', '.join(GRADERS)}")
    if dom not in ("high", "low"):
        raise EvalInputError(f"dom must be 'high' or 'low', got {dom!r}")
    for name, value in (("samples", samples), ("concurrency", concurrency)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise EvalInputError(f"{name} must be an integer >= 1, got {value!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise EvalInputError(f"limit must be an integer >= 1, got {limit!r}")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise EvalInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if baseline is not None and baseline not in BASELINE_KINDS:
        raise EvalInputError(f"unknown baseline {baseline!r}; valid: {', '.join(BASELINE_KINDS)}")
    if grader == "judge" and judge is None:
        raise EvalInputError("grader 'judge' needs a judge model (--judge-model M / judge=...)")
    if grader == "math" and importlib.util.find_spec("math_verify") is None:
        raise MissingExtraError("grader 'math' (Math-Verify)", "grading", "math_verify")


def _check_config(out_dir: Path, config: dict[str, Any], force: bool) -> dict[str, Any]:
    """Compare with the directory's config.json; returns the config to write (keeps ``created``)."""
    path = out_dir / CONFIG_FILE
    if not path.is_file():
        return config
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if not force:
            raise ConfigMismatchError(f"{path}: unreadable ({exc}); pass --force to overwrite it") from None
        return config
    diffs = [f"{key}: {old.get(key)!r} -> {config.get(key)!r}" for key in IDENTITY_KEYS
             if old.get(key) != config.get(key)]
    if diffs and not force:
        raise ConfigMismatchError(
            f"{out_dir} holds results of a different run ({'; '.join(diffs)}); use another --out, "
            "or pass --force to add to it anyway"
        )
    if diffs:
        log.warning("%s: config changed with force (%s); existing results are kept", out_dir, "; ".join(diffs))
    return {**config, "created": old.get("created", config["created"])}


async def aevaluate(
    rows: str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    *,
    orchestrator: Any = None,
    subagent: Any,
    dom: str = "high",
    samples: int = 1,
    concurrency: int = 8,
    grader: str = "math",
    judge: Any = None,
    out_dir: str | os.PathLike[str],
    timeout: float | None = None,
    baseline: str | None = None,
    search: Any = None,
    progress: bool = True,
    temperature: float | None = None,
    limit: int | None = None,
    force: bool = False,
    data_name: str | None = None,
    max_retries: int = 3,
    call_timeout: float | None = None,
    grade_timeout: float = 10.0,
    plot: bool = True,
    constrained: Any = None,
) -> dict[str, Any]:
    """Evaluate ``rows`` (a JSONL path or dicts) and return the summary (also written to ``out_dir``).

    ``orchestrator``/``subagent``/``judge``: model strings or chat models (``orchestrator`` defaults to
    ``embedded``; it is unused when ``baseline`` names a block). ``samples`` runs per question;
    ``concurrency`` bounds the question-samples running at once; ``limit`` keeps the first rows;
    ``timeout`` bounds one run in seconds; ``search`` is a backend or a backend string
    (``bm25:<corpus.jsonl>``, ``ddg``, ``tavily``). Existing results in ``out_dir`` are resumed (see the
    module docstring); ``force`` accepts a directory written with other identity arguments.
    ``data_name`` names in-memory rows in config.json (a path names itself). ``plot=False`` skips
    pareto.png. ``constrained``: constrained decoding of orchestrations and sub-agent replies, as
    :class:`~mas_orchestra.runtime.Orchestra` takes it (None: on for local models).

    Raises :class:`EvalInputError` (bad rows/arguments, :class:`ConfigMismatchError`),
    ``MissingCredentialsError`` / ``MissingExtraError`` / ``ValueError`` from model or backend strings.
    A failing run or grading never raises: it is recorded in its line.
    """
    started = time.perf_counter()
    _check_arguments(grader, dom, samples, concurrency, baseline, limit, timeout, judge)
    if baseline == "search" and search is None:
        raise EvalInputError("baseline 'search' needs a search backend: --search bm25:<corpus.jsonl>|ddg|tavily")
    if isinstance(rows, (str, os.PathLike)):
        data_label: str = str(Path(rows).resolve())
    else:
        data_label = data_name or "<rows>"
    all_rows = load_rows(rows)
    plan_rows = all_rows[:limit] if limit is not None else all_rows
    if orchestrator is None and not baseline:
        orchestrator = "embedded"
    orch_label = None if baseline else _model_label(orchestrator)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    config: dict[str, Any] = {
        "version": CONFIG_VERSION,
        "label": _run_label(baseline, orch_label),
        "data": data_label,
        "orchestrator": orch_label,
        "subagent": _model_label(subagent),
        "dom": None if baseline else dom,
        "grader": grader,
        "judge_model": _model_label(judge) if grader == "judge" else None,
        "baseline": baseline,
        "search": _model_label(search),
        "samples": samples,
        "limit": limit,
        "rows": len(plan_rows),
        "concurrency": concurrency,
        "timeout": timeout,
        "temperature": temperature,
        "constrained": constrained,
        "grade_timeout": grade_timeout,
        "created": now,
        "updated": now,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / RESULTS_FILE
    with _dir_lock(out):
        config = _check_config(out, config, force)
        _write_json(out / CONFIG_FILE, config)
        _cut_partial_tail(results_path)
        done = read_results(results_path)
        plan = [(row, s) for row in plan_rows for s in range(samples)]
        pending = [(row, s) for row, s in plan if (row["id"], s) not in done]
        log.info("%s: %d runs planned, %d already done, %d to run", out, len(plan), len(plan) - len(pending),
                 len(pending))
        if pending:
            await _run_pending(
                pending, plan, done, results_path, orchestrator=orchestrator, subagent=subagent, dom=dom,
                baseline=baseline, search=search, timeout=timeout, temperature=temperature,
                max_retries=max_retries, call_timeout=call_timeout, concurrency=concurrency, grader=grader,
                judge=judge, grade_timeout=grade_timeout, progress=progress, constrained=constrained,
            )
        summary = summarize(read_results(results_path).values(), config=config,
                            elapsed_s=time.perf_counter() - started)
        summary["out_dir"] = str(out)
        _write_json(out / SUMMARY_FILE, summary)
    if plot:
        try:
            pareto_plot(discover_run_dirs(out), out / PARETO_FILE)
        except MissingExtraError as exc:
            log.warning("no %s: %s", PARETO_FILE, exc)
        except Exception as exc:  # a plot is never a reason to lose an eval's summary
            log.warning("could not draw %s: %r", out / PARETO_FILE, exc)
    return summary


async def _run_pending(
    pending: list[tuple[dict[str, Any], int]],
    plan: list[tuple[dict[str, Any], int]],
    done: dict[tuple[str, int], dict[str, Any]],
    results_path: Path,
    *,
    orchestrator: Any,
    subagent: Any,
    dom: str,
    baseline: str | None,
    search: Any,
    timeout: float | None,
    temperature: float | None,
    max_retries: int,
    call_timeout: float | None,
    concurrency: int,
    grader: str,
    judge: Any,
    grade_timeout: float,
    progress: bool,
    constrained: Any = None,
) -> None:
    from mas_orchestra.grading import agrade

    models = _ModelCache()
    if isinstance(search, str):
        from agents.search import make_backend

        search = make_backend(search)
    judge_model = models(judge) if grader == "judge" else None
    runner = _make_runner(
        orchestrator=orchestrator, subagent=subagent, dom=dom, baseline=baseline, search=search, timeout=timeout,
        temperature=temperature, max_retries=max_retries, call_timeout=call_timeout, models=models,
        constrained=constrained,
    )
    deadline = grade_timeout + _GRADE_SLACK_S

    async def grade(answer: str | None, row: Mapping[str, Any]) -> tuple[bool, str | None]:
        if answer is None:  # nothing to grade: a failed run is simply wrong
            return False, None
        try:
            ok = await asyncio.wait_for(
                agrade(answer, row["answer"], grader, question=row["question"], judge=judge_model,
                       timeout=grade_timeout),
                deadline,
            )
        except (asyncio.TimeoutError, TimeoutError):
            return False, f"grading timed out after {deadline:.0f} s"
        except Exception as exc:  # a judge API failure or a bad truth is recorded, never fatal
            return False, f"{type(exc).__name__}: {exc}"
        return bool(ok), None

    plan_keys = {(row["id"], s) for row, s in plan}
    finished = sum(key in plan_keys for key in done)
    n_correct = sum(bool(rec.get("correct")) for key, rec in done.items() if key in plan_keys)
    bar = _progress_bar(len(plan), finished, progress)
    if bar is not None and finished:
        bar.set_postfix_str(f"acc={n_correct / finished:.1%}", refresh=False)
    writer = _ResultWriter(results_path)
    work = iter(pending)

    async def worker() -> None:
        nonlocal finished, n_correct
        # Pulling from one shared iterator: at most `concurrency` runs in flight, in data order, without
        # creating a task per pending pair up front.
        for row, sample in work:
            try:
                outcome = await runner(row["question"])
            except Exception as exc:  # the runtime promises outcomes; a bug there must not sink the eval
                log.warning("run %s/%d raised %r", row["id"], sample, exc)
                outcome = _failed_outcome(row["question"], exc)
            correct, grade_error = await grade(outcome.answer, row)
            await writer.write(_record(row, sample, outcome, correct, grade_error))
            finished += 1
            n_correct += correct
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"acc={n_correct / finished:.1%}")

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, len(pending)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        if bar is not None:
            bar.close()


def evaluate(
    rows: str | os.PathLike[str] | Iterable[Mapping[str, Any]], **kwargs: Any
) -> dict[str, Any]:
    """Synchronous :func:`aevaluate` (not from inside a running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aevaluate(rows, **kwargs))
    raise RuntimeError("evaluate() called inside a running event loop; use `await aevaluate(...)`")


# --------------------------------------------------------------------------------------------------
# Pareto plot
# --------------------------------------------------------------------------------------------------


def discover_run_dirs(out_dir: str | os.PathLike[str]) -> list[Path]:
    """``out_dir`` and its siblings (same parent) that hold a ``summary.json``, sorted by name."""
    out = Path(out_dir)
    found = {out.resolve()} if (out / SUMMARY_FILE).is_file() else set()
    parent = out.resolve().parent
    if parent.is_dir():
        found.update(d.resolve() for d in parent.iterdir() if d.is_dir() and (d / SUMMARY_FILE).is_file())
    if not found:
        found.add(out.resolve())
    return sorted(found)


def _frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated points: each more accurate than every cheaper one, by increasing x."""
    best = -math.inf
    front = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front


def pareto_plot(run_dirs: Iterable[str | os.PathLike[str]], out_path: str | os.PathLike[str]) -> Path:
    """Draw accuracy (avg@k, %) against mean cost and against mean LLM calls per question-sample.

    One labelled point per run directory with a readable ``summary.json`` (others are skipped with a
    warning); the dashed line is the Pareto frontier. Returns the PNG's path. Needs matplotlib
    (``pip install 'mas-orchestra[eval]'``); it is driven through the Agg canvas directly, never pyplot,
    so no display or global backend state is involved.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError("the Pareto plot", "eval", "matplotlib") from exc
    points: list[tuple[str, dict[str, Any]]] = []
    for run_dir in run_dirs:
        path = Path(run_dir) / SUMMARY_FILE
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("pareto: skipping %s (%s)", path, exc)
            continue
        label = summary.get("label") or _run_label(summary.get("baseline"), summary.get("orchestrator"))
        points.append((str(label), {**summary, "_dir": Path(run_dir).name}))
    counts = Counter(label for label, _ in points)
    labelled = [(f"{label} [{s['_dir']}]" if counts[label] > 1 else label, s) for label, s in points]

    fig = Figure(figsize=(12, 5), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, key, xlabel in (
        (axes[0], "mean_cost_usd", "mean cost per question-sample (USD)"),
        (axes[1], "mean_llm_calls", "mean LLM calls per question-sample"),
    ):
        xy = [(float(s.get(key) or 0.0), 100.0 * float(s.get("avg_at_k") or 0.0)) for _, s in labelled]
        stacked: Counter[tuple[float, float]] = Counter()
        for (label, _), (x, y) in zip(labelled, xy):
            ax.scatter([x], [y], s=40, zorder=3)
            # Runs often coincide (every local model costs $0): stack their labels instead of overprinting.
            offset = 5 + 11 * stacked[x, y]
            stacked[x, y] += 1
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, offset), fontsize=8)
        ax.margins(x=0.25)  # room for the labels of the right-most points
        front = _frontier(xy)
        if len(front) > 1:
            ax.step([p[0] for p in front], [p[1] for p in front], where="post", linestyle="--", color="grey",
                    linewidth=1, zorder=2)
        if key == "mean_cost_usd" and xy and all(x == 0 for x, _ in xy):
            ax.set_title("every run unpriced or free (local / scripted models)", fontsize=9)
        ax.set_xlim(left=0)  # costs and calls are never negative; anchor the axis at zero
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy avg@k (%)")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(-5, 105)
    fig.suptitle(f"accuracy vs cost ({len(labelled)} run{'s' if len(labelled) != 1 else ''})")
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def format_summary(summary: Mapping[str, Any]) -> str:
    """A short human-readable table of a summary."""
    counts = summary.get("status_counts", {})
    agents = ", ".join(f"{k}×{v}" for k, v in summary.get("agent_histogram", {}).items()) or "none"
    elapsed = summary.get("elapsed_s")
    rows = [
        ("run", f"{summary.get('label')}  ({summary.get('out_dir')})"),
        ("data", f"{summary.get('data')}  grader {summary.get('grader')}"),
        ("runs", f"{summary['runs']} ({summary['n']} questions × {summary['samples']} samples)"),
        ("accuracy", f"avg@k {summary['avg_at_k']:.1%}   pass@k {summary['pass_at_k']:.1%}"),
        ("valid", f"{summary['valid_rate']:.1%}   " + ", ".join(f"{k} {v}" for k, v in counts.items())),
        ("llm calls", f"{summary['total_llm_calls']:,} total, {summary['mean_llm_calls']:.2f} per run, "
                      f"{summary.get('total_format_retries', 0):,} format re-asks"),
        ("tokens", f"{summary['total_tokens']:,} total, {summary['mean_total_tokens']:,.0f} per run"),
        ("cost", f"${summary['total_cost_usd']:.6f} total, ${summary['mean_cost_usd']:.6f} per run"),
        ("wall", f"{summary['total_wall_s']:.1f} s summed over runs"
                 + (f", {elapsed:.1f} s elapsed" if elapsed is not None else "")),
        ("agents", f"{agents} ({summary['mean_agents_per_spec']:.2f} per spec)"),
    ]
    if summary.get("grade_errors"):
        rows.append(("grade errors", str(summary["grade_errors"])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _default_out(data: str) -> Path:
    return Path("runs") / f"{Path(data).stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def _input_errors() -> tuple[type[BaseException], ...]:
    """What bad input raises: printed as one line with exit 2, never a traceback."""
    from mas_orchestra.errors import ConstrainedDecodingError
    from mas_orchestra.models import MissingCredentialsError

    return (EvalInputError, MissingCredentialsError, MissingExtraError, ConstrainedDecodingError, ValueError,
            FileNotFoundError, ImportError, TypeError)


def _cmd_eval(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else _default_out(args.data)
    info = sys.stderr if args.json else sys.stdout  # --json keeps stdout pure JSON
    print(f"run directory: {out}", file=info, flush=True)
    errors = _input_errors()
    try:
        summary = evaluate(
            args.data, orchestrator=args.orchestrator, subagent=args.subagent, dom=args.dom, samples=args.samples,
            limit=args.limit, concurrency=args.concurrency, grader=args.grader, judge=args.judge_model,
            out_dir=out, timeout=args.timeout, baseline=args.baseline, search=args.search,
            progress=not args.no_progress and sys.stderr.isatty(), temperature=args.temperature,
            force=args.force, constrained=args.constrained,
        )
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(format_summary(summary))
    return 0


def _cmd_pareto(args: argparse.Namespace) -> int:
    dirs = [Path(d) for d in args.dirs]
    missing = [str(d) for d in dirs if not (d / SUMMARY_FILE).is_file()]
    if missing:
        print(f"error: no {SUMMARY_FILE} in {', '.join(missing)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else dirs[0] / PARETO_FILE
    try:
        path = pareto_plot(dirs, out)
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def add_cli(sub: Any) -> None:
    """Register ``eval`` and ``pareto`` on the main parser's subcommands."""
    p = sub.add_parser("eval", help="evaluate an orchestrator or a baseline over a JSONL data set")
    p.add_argument("--data", required=True, help="JSONL file with id, question, answer per row")
    p.add_argument("--orchestrator", default="embedded", help="orchestrator model string (default: embedded)")
    p.add_argument("--subagent", default="embedded", help="sub-agent model string (default: embedded)")
    p.add_argument("--dom", choices=["high", "low"], default="high", help="degree of MAS (default high)")
    p.add_argument("--samples", type=_positive_int, default=1, help="runs per question, k of avg@k (default 1)")
    p.add_argument("--limit", type=_positive_int, default=None, help="evaluate only the first N rows")
    p.add_argument("--concurrency", type=_positive_int, default=8, help="question-samples in flight (default 8)")
    p.add_argument("--grader", choices=GRADERS, default="math", help="how answers are graded (default math)")
    p.add_argument("--judge-model", default=None, help="model string of the judge for --grader judge")
    p.add_argument("--out", default=None, help="run directory (default runs/<data-stem>-<timestamp>)")
    p.add_argument("--timeout", type=_positive_float, default=None, help="bound on one run, seconds")
    p.add_argument("--baseline", choices=BASELINE_KINDS, default=None,
                   help="run this single-agent block instead of an orchestrator")
    p.add_argument("--search", default=None, help="search backend: bm25:<corpus.jsonl> | ddg | tavily")
    p.add_argument("--temperature", type=float, default=None,
                   help="orchestrator temperature (the block's temperature with --baseline)")
    from mas_orchestra.runtime_cli import add_constrained_flag

    add_constrained_flag(p)
    p.add_argument("--json", action="store_true", help="print summary.json on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when stderr is no TTY)")
    p.add_argument("--force", action="store_true", help="add to a run directory written with other arguments")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("pareto", help="plot accuracy against cost and LLM calls for eval run directories")
    p.add_argument("dirs", nargs="+", help="run directories holding summary.json")
    p.add_argument("--out", default=None, help="PNG path (default DIR/pareto.png of the first directory)")
    p.set_defaults(func=_cmd_pareto)
