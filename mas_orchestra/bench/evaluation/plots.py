"""The Pareto plot: accuracy against mean cost and mean LLM calls, one point per run directory."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mas_orchestra.bench.evaluation.common import SUMMARY_FILE, _run_label, log
from mas_orchestra.errors import MissingExtraError

__all__ = ["discover_run_dirs", "pareto_plot"]


def discover_run_dirs(out_dir: str | os.PathLike[str]) -> list[Path]:
    """``out_dir`` and its siblings (same parent) that hold a ``summary.json``, sorted by name.

    Args:
        out_dir: A run directory; its parent is searched for sibling run directories.

    Returns:
        The resolved directories holding a ``summary.json``; ``[out_dir]`` alone when none does.
    """
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
    warning); the dashed line is the Pareto frontier. matplotlib is driven through the Agg canvas directly,
    never pyplot, so no display or global backend state is involved.

    Args:
        run_dirs: Eval ``out_dir`` folders.
        out_path: The PNG to write.

    Returns:
        The PNG's path.

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install 'mas-orchestra[eval]'``).
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
