"""TRL integration: a GRPOTrainer whose logs carry the outcome-reward metrics, and a step timer.

``OrchestraGRPOTrainer.log`` pops the rollout records every :class:`~training.rewards.OutcomeReward` collected
since the previous log, summarises them (:func:`training.rewards.summarize`) and adds the metrics to the
same ``logs`` dict TRL fills with its own (``reward``, ``kl``, ``completions/mean_length``…), so they land in
``trainer_state.json``'s ``log_history`` and in TensorBoard/W&B side by side. With several processes the
records of all ranks are gathered first, so the rates are exact over the whole step.

Importing this module imports TRL (and torch).
"""

from __future__ import annotations

import resource
import time
from typing import Any

from transformers import TrainerCallback
from trl import GRPOTrainer

from training.rewards import RolloutRecord, summarize

__all__ = ["OrchestraGRPOTrainer", "StepTimer", "peak_rss_mb"]


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class OrchestraGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` + the outcome-reward metrics in every log entry.

    ``decoding_stats`` (set when rollouts are decoded under a grammar, see
    :func:`mas_orchestra.models.decoding.constrain_generate`) adds ``constrained/*`` counters to the logs.
    """

    decoding_stats: Any = None

    def _outcome_rewards(self) -> list[Any]:
        return [f for f in self.reward_funcs if hasattr(f, "pop_records")]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        for reward in self._outcome_rewards():
            records: list[RolloutRecord] = reward.pop_records()
            if self.accelerator.num_processes > 1:  # every rank logs at the same points, so this is safe
                from accelerate.utils import gather_object

                records = [r for part in gather_object([records]) for r in part]
            if not records:
                continue  # e.g. the end-of-training summary log: nothing new to report
            metrics = summarize(records, reward.kinds)
            if not self.model.training:
                metrics = {f"eval_{k}": v for k, v in metrics.items()}
            logs.update(metrics)
        stats = self.decoding_stats
        if stats is not None and self.model.training:
            logs["constrained/rollouts"] = float(stats.rows)
            logs["constrained/stage_switches"] = float(stats.stage_switches)
            logs["constrained/closings"] = float(stats.closings)
            logs["constrained/mask_seconds"] = float(stats.mask_seconds)
        super().log(logs, start_time)


class StepTimer(TrainerCallback):
    """Wall and CPU seconds of every optimizer step (CPU time of the whole process: all threads, including
    TRL's reward event loop) and the peak RSS after it."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._wall = self._cpu = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps.append({
            "step": state.global_step,
            "wall_s": time.perf_counter() - self._wall,
            "cpu_s": time.process_time() - self._cpu,
            "peak_rss_mb": peak_rss_mb(),
        })
