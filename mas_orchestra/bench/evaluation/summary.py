"""Metrics of a run (:func:`summarize`, written to ``summary.json``) and their short text table."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from mas_orchestra.bench.evaluation.common import STATUSES
from mas_orchestra.errors import SpecError
from mas_orchestra.spec.structure import Structure, structure_of_data, summarize_structures

__all__ = ["format_summary", "summarize"]

_VALID_STATUSES = frozenset({"ok", "exec_error", "timeout"})


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
    """Metrics over results records (see the module docstring).

    ``avg_at_k`` is the mean correctness over all runs, ``pass_at_k`` the share of questions with at
    least one correct sample, ``valid_rate`` the share of runs whose orchestration parsed and compiled.
    Means are per run (one question-sample). ``structure`` holds the means of
    :func:`mas_orchestra.spec.structure.summarize_structures` over the runs whose spec was read.

    Args:
        records: The lines of ``results.jsonl`` (one per question-sample).
        config: Keys copied into the summary (the run's identity).
        elapsed_s: The eval's wall time, recorded as such.

    Returns:
        The summary dict written to ``summary.json``.
    """
    recs = list(records)
    runs = len(recs)
    per_question: dict[str, list[bool]] = defaultdict(list)
    status_counts = dict.fromkeys(STATUSES, 0)
    histogram: Counter[str] = Counter()
    warnings: Counter[str] = Counter()
    fallback_answers = 0
    totals: Counter[str] = Counter()
    cost = wall = 0.0
    valid = correct = grade_errors = n_specs = n_agents = 0
    shapes: list[Structure] = []
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
        fallback_answers += rec.get("answer_source") == "whole_response"
        spec = rec.get("spec")
        if spec:
            warnings.update(str(w.get("kind")) for w in spec.get("warnings") or [])
            n_specs += 1
            nodes = spec.get("nodes") or []
            n_agents += len(nodes)
            histogram.update(str(node.get("agent")) for node in nodes)
            with contextlib.suppress(SpecError):  # a hand-edited record: its structure is not counted
                shapes.append(structure_of_data(spec))
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
        "structure": summarize_structures(shapes),
        "spec_warnings": dict(sorted(warnings.items())),
        "runs_with_spec_warnings": sum(bool((r.get("spec") or {}).get("warnings")) for r in recs),
        "whole_response_answers": fallback_answers,
    }
    if config:
        for key in ("label", "data", "orchestrator", "subagent", "dom", "grader", "judge_model", "baseline",
                    "search", "limit", "timeout", "temperature", "constrained", "agents", "max_agents", "max_tokens",
                    "strict", "prompt", "whole_response_fallback", "control", "direct_answer"):
            summary[key] = config.get(key)
    return summary


def format_summary(summary: Mapping[str, Any]) -> str:
    """A short human-readable table of a summary.

    Args:
        summary: A run summary (the contents of ``summary.json``).

    Returns:
        One ``label  value`` line per row, the labels padded to a common width.
    """
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
    shape = summary.get("structure") or {}
    if shape:
        rows.append(("structure", f"depth {shape['depth_mean']:.2f}, ref depth {shape['ref_depth_mean']:.2f}, "
                                  f"width {shape['width_mean']:.2f}, edges {shape['edges_mean']:.2f}, "
                                  f"wired {shape['wired_share']:.0%}"))
    if summary.get("control"):
        rows.append(("control", str(summary["control"])))
    warned = summary.get("spec_warnings") or {}
    rows.append(("spec warnings", (", ".join(f"{k} {v}" for k, v in warned.items())
                                   + f" (in {summary.get('runs_with_spec_warnings', 0)} runs)") if warned else "none"))
    if summary.get("whole_response_answers"):
        rows.append(("whole response", f"{summary['whole_response_answers']} runs graded on the whole response"))
    if summary.get("grade_errors"):
        rows.append(("grade errors", str(summary["grade_errors"])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
