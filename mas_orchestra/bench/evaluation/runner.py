"""Running an eval: the plan, the resume, the runs in flight, grading, and the summary at the end."""

from __future__ import annotations

import asyncio
import datetime as _dt
import importlib.util
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mas_orchestra.bench.evaluation.common import (
    BASELINE_KINDS,
    CONFIG_FILE,
    CONFIG_VERSION,
    GRADERS,
    MAX_ORCHESTRATION_CHARS,
    PARETO_FILE,
    RESULTS_FILE,
    SUMMARY_FILE,
    EvalInputError,
    _run_label,
    load_rows,
    log,
    model_label,
)
from mas_orchestra.bench.evaluation.controls import check_control
from mas_orchestra.bench.evaluation.plots import discover_run_dirs, pareto_plot
from mas_orchestra.bench.evaluation.storage import (
    _check_config,
    _cut_partial_tail,
    _dir_lock,
    _ResultWriter,
    _write_json,
    read_results,
)
from mas_orchestra.bench.evaluation.summary import summarize
from mas_orchestra.bench.masbench.official import is_official_source
from mas_orchestra.config import OrchestraConfig
from mas_orchestra.errors import MissingExtraError, install_command
from mas_orchestra.registry import BASELINE_DEBATE_ROLES
from mas_orchestra.settings import RunSettings

__all__ = ["aevaluate", "evaluate"]

_BASELINE_DEBATE_ROLES = BASELINE_DEBATE_ROLES  # the roles graphs.baselines gives its debate baseline too
# Slack on top of the Math-Verify timeout: a fresh grading worker may take up to 120 s to import sympy,
# and a judge model call needs a network round trip. Past it, the grade is False with the error recorded.
_GRADE_SLACK_S = 150.0


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
    config: OrchestraConfig,
    baseline: str | None,
    search: Any,
    settings: RunSettings,
    models: _ModelCache,
    control: str | None = None,
) -> Runner:
    """One Orchestra (or one resolved sub-agent model for a baseline), reused for every question."""
    from mas_orchestra.runtime import Orchestra, execute_spec

    pool = {name: models(m) for name, m in subagent.items()} if isinstance(subagent, Mapping) else None
    sub_model = next(iter(pool.values())) if pool else models(subagent)
    if baseline:
        spec = _baseline_spec(baseline, config.orchestrator_temperature)

        async def run_baseline(question: str) -> Any:
            return await execute_spec(spec, question, model=sub_model, search=search, settings=settings,
                                      constrained=config.constrained)

        return run_baseline
    orchestra = Orchestra(models(orchestrator), pool or sub_model, config=config, settings=settings, search=search)
    if control is not None:
        from mas_orchestra.bench.evaluation.controls import control_runner

        return control_runner(orchestra, control, constrained=config.constrained)
    return orchestra.arun


def _failed_outcome(question: str, exc: BaseException) -> Any:
    from mas_orchestra.runtime import Outcome, Status

    return Outcome(status=Status.EXEC_ERROR, question=question, error=f"eval: {type(exc).__name__}: {exc}")


def _record(
    row: Mapping[str, Any], sample: int, outcome: Any, correct: bool, grade_error: str | None,
    answer_source: str | None = None,
) -> dict:
    orchestration = outcome.orchestration or ""
    return {
        "answer_source": answer_source or ("run" if outcome.answer is not None else None),
        "spec_warnings": outcome.spec_warnings,
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
    grader: str, samples: int, concurrency: int, baseline: str | None, limit: int | None, judge: Any,
    config: Any, settings: Any,
) -> None:
    if config is not None and not isinstance(config, OrchestraConfig):
        raise EvalInputError(f"config must be an OrchestraConfig, got {type(config).__name__}")
    if settings is not None and not isinstance(settings, RunSettings):
        raise EvalInputError(f"settings must be a RunSettings, got {type(settings).__name__}")
    if grader not in GRADERS:
        raise EvalInputError(f"unknown grader {grader!r}; valid graders: {', '.join(GRADERS)}")
    for name, value in (("samples", samples), ("concurrency", concurrency)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise EvalInputError(f"{name} must be an integer >= 1, got {value!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise EvalInputError(f"limit must be an integer >= 1, got {limit!r}")
    if baseline is not None and baseline not in BASELINE_KINDS:
        raise EvalInputError(f"unknown baseline {baseline!r}; valid: {', '.join(BASELINE_KINDS)}")
    if grader == "judge" and judge is None:
        raise EvalInputError("grader 'judge' needs a judge model (--judge-model M / judge=...)")
    if grader == "math" and importlib.util.find_spec("math_verify") is None:
        raise MissingExtraError("grader 'math' (Math-Verify)", "grading", "math_verify")


async def aevaluate(
    rows: str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    *,
    orchestrator: Any = None,
    subagent: Any,
    config: OrchestraConfig | None = None,
    settings: RunSettings | None = None,
    out_dir: str | os.PathLike[str],
    samples: int = 1,
    concurrency: int = 8,
    grader: str = "math",
    judge: Any = None,
    baseline: str | None = None,
    search: Any = None,
    control: str | None = None,
    limit: int | None = None,
    data_name: str | None = None,
    force: bool = False,
    progress: bool = True,
    plot: bool = True,
) -> dict[str, Any]:
    """Evaluate ``rows`` (a JSONL path or dicts) and return the summary (also written to ``out_dir``).

    Existing results in ``out_dir`` are resumed (see the module docstring). A failing run or grading never
    raises: it is recorded in its line.

    Args:
        rows: A JSONL path, a ``masbench-official:…`` source or an iterable of ``{id, question, answer}`` dicts.
        orchestrator: Model string or chat model (default ``embedded``); unused when ``baseline`` names a block.
        subagent: Model string or chat model of the sub-agents (or a pool, as ``Orchestra`` takes it).
        config: How the orchestrator plans, as :class:`~mas_orchestra.runtime.Orchestra` takes it (DoM, offered
            agents, constrained decoding and grammar limits, orchestrator budget and temperature, strictness,
            prompt, whole-response fallback); a baseline block uses its ``orchestrator_temperature`` and
            ``constrained``.
        settings: The bounds and retries of each run and the grading timeout
            (:class:`~mas_orchestra.settings.RunSettings`).
        out_dir: Where ``results.jsonl``, ``summary.json``, ``config.json`` and ``pareto.png`` go.
        samples: Runs per question.
        concurrency: Question-samples running at once.
        grader: ``math``, ``exact``, ``f1``, ``mcq`` or ``judge``.
        judge: The judge model (model string or chat model) for ``grader="judge"``.
        baseline: Run one block (``cot``, ``sc``, ``debate``, ``reflexion``, ``search``) without an orchestrator.
        search: A search backend or a backend string (``bm25:<corpus.jsonl>``, ``ddg``, ``tavily``).
        control: A causal control applied to every plan before it runs, ``"ablate-wiring"`` or
            ``"random-graph"`` (:mod:`mas_orchestra.bench.evaluation.controls`; high DoM, no baseline).
        limit: Keep the first rows only.
        data_name: Names in-memory rows in ``config.json`` (a path names itself).
        force: Accept an ``out_dir`` written with other identity arguments.
        progress: Show a progress bar (needs tqdm).
        plot: Write ``pareto.png`` (``False`` skips it).

    Returns:
        The summary (see :func:`~mas_orchestra.bench.evaluation.summarize`).

    Raises:
        EvalInputError: Bad rows or arguments (:class:`ConfigMismatchError` for an ``out_dir`` of another run).
        MissingCredentialsError: A model string whose API key is not set.
        MissingExtraError: A model, grader or backend whose optional package is not installed.
        ValueError: A malformed model or backend string.
    """
    started = time.perf_counter()
    _check_arguments(grader, samples, concurrency, baseline, limit, judge, config, settings)
    config = config or OrchestraConfig()
    settings = settings or RunSettings()
    dom = config.dom
    if baseline == "search" and search is None:
        raise EvalInputError("baseline 'search' needs a search backend: --search bm25:<corpus.jsonl>|ddg|tavily")
    check_control(control, dom, baseline)
    if is_official_source(rows):
        data_label: str = str(rows).strip()
    elif isinstance(rows, (str, os.PathLike)):
        data_label = str(Path(rows).resolve())
    else:
        data_label = data_name or "<rows>"
    all_rows = load_rows(rows)
    plan_rows = all_rows[:limit] if limit is not None else all_rows
    if orchestrator is None and not baseline:
        orchestrator = "embedded"
    orch_label = None if baseline else model_label(orchestrator)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    identity: dict[str, Any] = {
        "version": CONFIG_VERSION,
        # A pool is part of the label, so that the Pareto plot tells pools apart.
        "label": _run_label(baseline, orch_label) + (f" pool[{','.join(subagent)}]" if isinstance(subagent, Mapping)
                                                     else "") + (f" control[{control}]" if control else ""),
        "data": data_label,
        "orchestrator": orch_label,
        "subagent": model_label(subagent),
        "dom": None if baseline else dom,
        "grader": grader,
        "judge_model": model_label(judge) if grader == "judge" else None,
        "baseline": baseline,
        "search": model_label(search),
        "samples": samples,
        "limit": limit,
        "rows": len(plan_rows),
        "concurrency": concurrency,
        "timeout": settings.timeout,
        "temperature": config.orchestrator_temperature,
        "constrained": config.constrained,
        "agents": list(config.agents) if config.agents else None,
        "max_agents": config.grammar_limits.max_agents,
        "direct_answer": None if config.grammar_limits.direct_answer else False,
        "max_tokens": config.orchestrator_max_tokens,
        "strict": True if config.strict else None,
        "prompt": str(Path(config.prompt).resolve()) if config.prompt is not None else None,
        "whole_response_fallback": True if config.whole_response_fallback else None,
        "control": control,
        "grade_timeout": settings.grade_timeout,
        "created": now,
        "updated": now,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / RESULTS_FILE
    with _dir_lock(out):
        identity = _check_config(out, identity, force)
        _write_json(out / CONFIG_FILE, identity)
        _cut_partial_tail(results_path)
        done = read_results(results_path)
        plan = [(row, s) for row in plan_rows for s in range(samples)]
        pending = [(row, s) for row, s in plan if (row["id"], s) not in done]
        log.info("%s: %d runs planned, %d already done, %d to run", out, len(plan), len(plan) - len(pending),
                 len(pending))
        if pending:
            await _run_pending(
                pending, plan, done, results_path, orchestrator=orchestrator, subagent=subagent, config=config,
                baseline=baseline, search=search, settings=settings, concurrency=concurrency, grader=grader,
                judge=judge, progress=progress, control=control,
            )
        summary = summarize(read_results(results_path).values(), config=identity,
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
    config: OrchestraConfig,
    baseline: str | None,
    search: Any,
    settings: RunSettings,
    concurrency: int,
    grader: str,
    judge: Any,
    progress: bool,
    control: str | None = None,
) -> None:
    from mas_orchestra.bench.grading import agrade
    from mas_orchestra.runtime import whole_response_answer

    models = _ModelCache()
    if isinstance(search, str):
        from agents.search import make_backend
        from mas_orchestra import environment

        search = make_backend(search, cache_path=environment.search_cache_path())
    judge_model = models(judge) if grader == "judge" else None
    runner = _make_runner(
        orchestrator=orchestrator, subagent=subagent, config=config, baseline=baseline, search=search,
        settings=settings, models=models, control=control,
    )
    grade_timeout = settings.grade_timeout
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
            answer, source = outcome.answer, None
            if answer is None and config.whole_response_fallback:
                answer = whole_response_answer(outcome.status, outcome.error, outcome.orchestration or "")
                source = "whole_response" if answer is not None else None
            correct, grade_error = await grade(answer, row)
            await writer.write(_record(row, sample, outcome, correct, grade_error, source))
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
    """Synchronous :func:`aevaluate` (not from inside a running event loop); same errors.

    Args:
        rows: As :func:`aevaluate` takes them.
        **kwargs: :func:`aevaluate`'s keyword arguments.

    Returns:
        The summary.

    Raises:
        RuntimeError: Called inside a running event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aevaluate(rows, **kwargs))
    raise RuntimeError("evaluate() called inside a running event loop; use `await aevaluate(...)`")
