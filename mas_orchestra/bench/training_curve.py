"""The learning curve of a GRPO run: read ``trainer_state.json``, compare its first and last steps, plot it.

``python -m training.grpo`` logs, per optimizer step, TRL's ``reward``/``reward_std`` next to our outcome
metrics (``valid_spec_rate``, ``agents_per_spec``, ``delegation_share``…) into ``log_history``. This module
reads them back (from a finished run, or from the newest ``checkpoint-*`` of a run still going), summarises
the rise as the mean of the first vs the last ``fraction`` of the steps, and draws ``reward_curve.png``.
Validation entries (``val/avg_at_k`` … logged by :mod:`training.validation` at step 0 and every
``eval_steps``) are read as :class:`ValidationPoint` s, tabled by :func:`format_validation` and drawn on the
same picture. It needs only the standard library (and matplotlib for the plot): no torch, no TRL.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mas_orchestra.errors import MasOrchestraError, MissingExtraError

__all__ = [
    "CURVE_FILE",
    "CurvePoint",
    "TrainingCurveError",
    "ValidationPoint",
    "WindowComparison",
    "compare_windows",
    "find_trainer_state",
    "format_curve",
    "format_validation",
    "load_curve",
    "load_validation",
    "plot_training",
    "used_kinds",
    "validation_from_history",
]

#: The PNG ``python -m training.grpo`` writes next to ``trainer_state.json``.
CURVE_FILE = "reward_curve.png"
STATE_FILE = "trainer_state.json"


class TrainingCurveError(MasOrchestraError, ValueError):
    """No readable training curve where one was asked for."""


@dataclass(frozen=True)
class CurvePoint:
    """One optimizer step's rollout metrics (NaN where the log lacks a value).

    Attributes:
        step: The optimizer step.
        reward: Mean reward (``reward``, else ``outcome_reward/mean`` in the log).
        reward_std: Standard deviation of the reward.
        valid_spec_rate: Share of completions that parsed into a valid spec.
        agents_per_spec: Mean agents per valid spec.
        delegation_share: Share of valid specs with exactly one agent.
        correct_rate: Share of completions answered correctly.
        agent_share: Each agent kind's share of the agent nodes in the step's valid specs (``agent_share/<kind>``
            in the log).
        structure: The step's structure metrics (``structure/<key>`` in the log: ``depth_mean``,
            ``ref_depth_mean`` …; see :mod:`mas_orchestra.spec.structure`); empty for runs logged before they
            existed.
    """

    step: int
    reward: float
    reward_std: float
    valid_spec_rate: float
    agents_per_spec: float
    delegation_share: float
    correct_rate: float
    agent_share: dict[str, float] = field(default_factory=dict)
    structure: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ValidationPoint:
    """One validation pass: Avg@k (mean correctness over every sampled completion), pass@k, valid-spec rate.

    Attributes:
        step: The optimizer step the pass ran at.
        avg_at_k: Mean correctness over every sampled completion.
        pass_at_k: Share of questions with at least one correct sample.
        valid_rate: Share of samples that parsed into a valid spec.
        k: Samples per question.
        questions: Questions validated.
        samples: Completions sampled in all.
        subagent_calls: Mean sub-agent calls per valid spec.
    """

    step: int
    avg_at_k: float
    pass_at_k: float
    valid_rate: float
    k: int
    questions: int
    samples: int
    subagent_calls: float


@dataclass(frozen=True)
class WindowComparison:
    """Mean reward and valid-spec rate over the first and the last ``window`` steps.

    Attributes:
        window: Steps per window.
        first_steps: The steps of the first window.
        last_steps: The steps of the last window.
        first_reward: Mean reward over the first window.
        last_reward: Mean reward over the last window.
        first_valid: Mean valid-spec rate over the first window.
        last_valid: Mean valid-spec rate over the last window.
    """

    window: int
    first_steps: tuple[int, ...]
    last_steps: tuple[int, ...]
    first_reward: float
    last_reward: float
    first_valid: float
    last_valid: float

    @property
    def rise(self) -> float:
        """Last-window mean reward minus first-window mean reward."""
        return self.last_reward - self.first_reward

    def describe(self) -> str:
        """One line: first → last reward and valid-spec rate, with the steps each window covers."""
        def span(steps: tuple[int, ...]) -> str:
            return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"

        return (f"reward {self.first_reward:.3f} ({span(self.first_steps)}) -> {self.last_reward:.3f} "
                f"({span(self.last_steps)}), rise {self.rise:+.3f}; valid-spec rate {self.first_valid:.3f} -> "
                f"{self.last_valid:.3f}")


def _checkpoint_number(path: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", path.name)
    return int(match.group(1)) if match else -1


def find_trainer_state(run: str | os.PathLike[str]) -> Path:
    """The ``trainer_state.json`` of ``run``.

    Args:
        run: The file itself, a finished run's folder (``<run>/trainer_state.json``) or a run still going (the
            one in its newest ``checkpoint-<n>/``).

    Returns:
        The file's path.

    Raises:
        TrainingCurveError: No such run, or no ``trainer_state.json`` in it.
    """
    path = Path(run)
    if path.is_file():
        return path
    if not path.is_dir():
        raise TrainingCurveError(f"{path}: no such run directory or trainer_state.json")
    if (path / STATE_FILE).is_file():
        return path / STATE_FILE
    checkpoints = sorted((d for d in path.glob("checkpoint-*") if (d / STATE_FILE).is_file()),
                         key=_checkpoint_number)
    if checkpoints:
        return checkpoints[-1] / STATE_FILE
    raise TrainingCurveError(
        f"{path}: no {STATE_FILE} and no checkpoint-*/{STATE_FILE}; point at the --output-dir of "
        "`python -m training.grpo` (the file appears when the run ends or saves its first checkpoint)"
    )


def _number(entry: dict[str, Any], key: str) -> float:
    value = entry.get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def curve_from_history(history: Sequence[dict[str, Any]]) -> list[CurvePoint]:
    """The training steps of a ``log_history`` (entries with our ``valid_spec_rate``; evaluation entries are
    prefixed ``eval_`` and skipped), one point per step (a step logged twice keeps its last entry), by step.

    Args:
        history: The trainer state's ``log_history`` entries.
    """
    by_step: dict[int, CurvePoint] = {}
    for entry in history:
        if "valid_spec_rate" not in entry or "step" not in entry:
            continue
        reward = entry.get("reward", entry.get("outcome_reward/mean"))
        by_step[int(entry["step"])] = CurvePoint(
            step=int(entry["step"]),
            reward=float(reward) if isinstance(reward, (int, float)) else math.nan,
            reward_std=_number(entry, "reward_std"),
            valid_spec_rate=_number(entry, "valid_spec_rate"),
            agents_per_spec=_number(entry, "agents_per_spec"),
            delegation_share=_number(entry, "delegation_share"),
            correct_rate=_number(entry, "correct_rate"),
            agent_share={key.split("/", 1)[1]: float(value) for key, value in entry.items()
                         if key.startswith("agent_share/") and isinstance(value, (int, float))},
            structure={key.split("/", 1)[1]: float(value) for key, value in entry.items()
                       if key.startswith("structure/") and isinstance(value, (int, float))},
        )
    return [by_step[step] for step in sorted(by_step)]


def validation_from_history(history: Sequence[dict[str, Any]]) -> list[ValidationPoint]:
    """The validation passes of a ``log_history`` (entries with ``val/avg_at_k``), one per step, by step.

    Args:
        history: The trainer state's ``log_history`` entries.
    """
    by_step: dict[int, ValidationPoint] = {}
    for entry in history:
        if "val/avg_at_k" not in entry or "step" not in entry:
            continue
        by_step[int(entry["step"])] = ValidationPoint(
            step=int(entry["step"]),
            avg_at_k=_number(entry, "val/avg_at_k"),
            pass_at_k=_number(entry, "val/pass_at_k"),
            valid_rate=_number(entry, "val/valid_rate"),
            k=int(_number(entry, "val/k")) if isinstance(entry.get("val/k"), (int, float)) else 0,
            questions=int(entry["val/questions"]) if isinstance(entry.get("val/questions"), (int, float)) else 0,
            samples=int(entry["val/samples"]) if isinstance(entry.get("val/samples"), (int, float)) else 0,
            subagent_calls=_number(entry, "val/subagent_calls"),
        )
    return [by_step[step] for step in sorted(by_step)]


def _history(run: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = find_trainer_state(run)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainingCurveError(f"{path}: not a readable trainer_state.json ({exc})") from exc
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise TrainingCurveError(f"{path}: no log_history list")
    return history


def load_curve(run: str | os.PathLike[str]) -> list[CurvePoint]:
    """The per-step curve of a run directory, checkpoint or ``trainer_state.json``.

    Args:
        run: A run directory, a checkpoint or a ``trainer_state.json`` (see :func:`find_trainer_state`).

    Returns:
        One point per optimizer step, by step.

    Raises:
        TrainingCurveError: No such run, no ``trainer_state.json``, or one that cannot be read.
    """
    return curve_from_history(_history(run))


def load_validation(run: str | os.PathLike[str]) -> list[ValidationPoint]:
    """The validation passes of a run directory, checkpoint or ``trainer_state.json``.

    Args:
        run: A run directory, a checkpoint or a ``trainer_state.json`` (see :func:`find_trainer_state`).

    Returns:
        One point per validation pass, by step (``[]`` when it has none).

    Raises:
        TrainingCurveError: No such run, no ``trainer_state.json``, or one that cannot be read.
    """
    return validation_from_history(_history(run))


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def compare_windows(curve: Sequence[CurvePoint], fraction: float = 0.2) -> WindowComparison:
    """Mean reward / valid-spec rate of the first vs the last ``fraction`` of the steps.

    Each window is ``round(fraction * steps)`` steps, at least one; with one step both windows are that step.

    Args:
        curve: The per-step curve.
        fraction: The share of steps in each window, in (0, 0.5].

    Returns:
        The comparison.

    Raises:
        ValueError: ``fraction`` out of range.
        TrainingCurveError: An empty curve.
    """
    if not 0 < fraction <= 0.5:
        raise ValueError(f"fraction must be in (0, 0.5], got {fraction}")
    if not curve:
        raise TrainingCurveError("the curve has no training steps (was anything logged?)")
    window = max(1, round(fraction * len(curve)))
    first, last = curve[:window], curve[-window:]
    return WindowComparison(
        window=window,
        first_steps=tuple(p.step for p in first),
        last_steps=tuple(p.step for p in last),
        first_reward=_mean([p.reward for p in first]),
        last_reward=_mean([p.reward for p in last]),
        first_valid=_mean([p.valid_spec_rate for p in first]),
        last_valid=_mean([p.valid_spec_rate for p in last]),
    )


def used_kinds(curve: Sequence[CurvePoint]) -> list[str]:
    """The agent kinds some step's rollouts used, sorted by name (the same columns for every run).

    Args:
        curve: The training curve's points.
    """
    return sorted({kind for p in curve for kind, share in p.agent_share.items() if share > 0})


#: Structure columns of :func:`format_curve` (log key under ``structure/``, column title).
_STRUCTURE_COLUMNS = (("depth_mean", "depth"), ("ref_depth_mean", "refdepth"), ("width_mean", "width"),
                      ("wired_share", "wired"))


def format_curve(curve: Sequence[CurvePoint]) -> str:
    """A plain-text table of the curve, one row per step (with the share of each agent kind used and, for runs
    that logged them, the structure metrics: depth along edges, depth along references, width, wired share).

    Args:
        curve: The points, as :func:`curve_from_history` returns them.
    """
    kinds = used_kinds(curve)
    shapes = [(key, title) for key, title in _STRUCTURE_COLUMNS if any(key in p.structure for p in curve)]
    lines = [f"{'step':>5} {'reward':>7} {'± std':>6} {'valid':>6} {'agents':>6} {'deleg':>6} {'correct':>7}"
             + "".join(f" {kind[:9]:>9}" for kind in kinds) + "".join(f" {title:>8}" for _, title in shapes)]
    for p in curve:
        lines.append(f"{p.step:>5} {p.reward:>7.3f} {p.reward_std:>6.3f} {p.valid_spec_rate:>6.2f} "
                     f"{p.agents_per_spec:>6.2f} {p.delegation_share:>6.2f} {p.correct_rate:>7.3f}"
                     + "".join(f" {p.agent_share.get(kind, 0.0):>9.2f}" for kind in kinds)
                     + "".join(f" {p.structure.get(key, math.nan):>8.2f}" for key, _ in shapes))
    return "\n".join(lines)


def format_validation(points: Sequence[ValidationPoint]) -> str:
    """A plain-text table of the validation passes, one row per step.

    Args:
        points: The passes, as :func:`validation_from_history` returns them (``k`` is read from the first).
    """
    k = points[0].k if points else 0
    lines = [f"{'step':>5} {f'Avg@{k}':>7} {f'pass@{k}':>7} {'valid':>6} {'questions':>9} {'samples':>7} {'calls':>6}"]
    for p in points:
        lines.append(f"{p.step:>5} {p.avg_at_k:>7.3f} {p.pass_at_k:>7.3f} {p.valid_rate:>6.2f} {p.questions:>9} "
                     f"{p.samples:>7} {p.subagent_calls:>6.2f}")
    return "\n".join(lines)


def plot_training(
    run: str | os.PathLike[str] | Sequence[CurvePoint],
    out_path: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
    fraction: float = 0.2,
    validation: Sequence[ValidationPoint] | None = None,
) -> Path:
    """Draw a GRPO run's reward curve.

    The reward (mean ± std over the step's rollouts), valid-spec rate and delegation share per step, agents
    per spec and (where logged) the mean depth along edges and along ``${id}`` references on a second axis,
    and the validation passes (Avg@k as large diamonds, at step 0 too).

    Args:
        run: A run directory / ``trainer_state.json`` (its validation entries are read from it unless
            ``validation`` is given) or a curve.
        out_path: The PNG (default ``<run>/reward_curve.png``).
        title: The figure's title.
        fraction: The share of steps compared first vs last (in the legend).
        validation: The validation passes to draw.

    Returns:
        The PNG's path.

    Raises:
        MissingExtraError: matplotlib is missing (``pip install 'mas-orchestra[eval]'``).
        TrainingCurveError: No such run, or one without training steps.
        ValueError: A curve given without ``out_path``.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError("the training-curve plot", "eval", "matplotlib") from exc
    if isinstance(run, (str, os.PathLike)):
        curve = load_curve(run)
        if validation is None:
            validation = load_validation(run)
        if out_path is None:
            base = Path(run)
            out_path = (base.parent if base.is_file() else base) / CURVE_FILE
    else:
        curve = list(run)
    if out_path is None:
        raise ValueError("out_path is required when plotting a curve rather than a run directory")
    if not curve:
        raise TrainingCurveError("the curve has no training steps to plot")

    steps = [p.step for p in curve]
    rewards = [p.reward for p in curve]
    stds = [0.0 if math.isnan(p.reward_std) else p.reward_std for p in curve]
    fig = Figure(figsize=(7, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    # The band is clipped to the reward's range [0, 1]: it shows the spread, not values a reward can take.
    ax.fill_between(steps, [max(0.0, r - s) for r, s in zip(rewards, stds, strict=True)],
                    [min(1.0, r + s) for r, s in zip(rewards, stds, strict=True)], alpha=0.15, color="C0",
                    linewidth=0)
    ax.plot(steps, rewards, marker="o", color="C0", label="reward (mean ± std)")
    ax.plot(steps, [p.valid_spec_rate for p in curve], marker="s", color="C2", label="valid-spec rate")
    ax.plot(steps, [p.delegation_share for p in curve], linestyle="--", color="C1", label="delegation share")
    for i, kind in enumerate(used_kinds(curve)):
        ax.plot(steps, [p.agent_share.get(kind, 0.0) for p in curve], linewidth=0.9, alpha=0.7,
                color=f"C{4 + i}", label=f"share {kind}")
    if validation:
        k = validation[0].k
        ax.plot([v.step for v in validation], [v.avg_at_k for v in validation], marker="D", markersize=7,
                color="C9", linestyle="-.", label=f"validation Avg@{k}")
        ax.plot([v.step for v in validation], [v.valid_rate for v in validation], marker="d", markersize=5,
                color="C8", linestyle="none", label="validation valid-spec rate")
    ax.set_xlabel("optimizer step")
    ax.set_ylim(-0.05, 1.15)
    ax.grid(alpha=0.3)
    agents = [p.agents_per_spec for p in curve]
    if any(not math.isnan(a) for a in agents):
        twin = ax.twinx()
        twin.plot(steps, agents, linestyle=":", color="C3", label="agents per spec")
        counts = [a for a in agents if not math.isnan(a)]
        # Structure along edges and along ${id} references (what carries results), in agents, where logged.
        for key, label, style in (("depth_mean", "depth (edges)", "-."), ("ref_depth_mean", "depth (references)", "-")):
            values = [p.structure.get(key, math.nan) for p in curve]
            if any(not math.isnan(v) for v in values):
                twin.plot(steps, values, linestyle=style, color="C7" if key == "depth_mean" else "C6",
                          marker="^" if key == "ref_depth_mean" else None, markersize=4, label=label)
                counts.extend(v for v in values if not math.isnan(v))
        twin.set_ylabel("agents")
        twin.set_ylim(0, max(1.0, max(counts, default=1.0)) * 1.3)
        twin.legend(loc="lower right", fontsize=8)
    ax.legend(loc="lower left", fontsize=8)
    comparison = compare_windows(curve, fraction)
    ax.set_title(title or f"GRPO outcome reward: first {comparison.window} step(s) {comparison.first_reward:.2f} "
                 f"-> last {comparison.window} {comparison.last_reward:.2f}", fontsize=10)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out
