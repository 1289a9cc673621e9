"""TRL integration: a GRPOTrainer whose logs carry the outcome-reward metrics, and a step timer.

``OrchestraGRPOTrainer.log`` pops the rollout records every :class:`~training.rewards.OutcomeReward` collected
since the previous log, summarises them (:func:`training.records.summarize`) and adds the metrics to the
same ``logs`` dict TRL fills with its own (``reward``, ``kl``, ``completions/mean_length``…), so they land in
``trainer_state.json``'s ``log_history`` and in TensorBoard/W&B side by side. With several processes each
rank executes the multi-agent systems of its own completions; the records of all ranks are gathered at
every log, so the rates are exact over the whole step (``rollouts``: how many, ``rollout_ranks``: from how
many processes), and rank 0 alone appends them, each once, to ``rollouts.jsonl``.

Importing this module imports TRL (and torch).
"""

from __future__ import annotations

import json
import logging
import resource
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from trl import GRPOTrainer

from mas_orchestra.bench.training_curve import (
    CURVE_FILE,
    curve_from_history,
    plot_training,
    validation_from_history,
)
from mas_orchestra.errors import MissingExtraError
from training.records import RolloutRecord, summarize

__all__ = ["CurvePlotter", "HeapTrimmer", "OrchestraGRPOTrainer", "StepTimer", "peak_rss_mb",
           "structured_generation_kwargs"]

log = logging.getLogger("training.trainer")


def structured_generation_kwargs(generation_kwargs: dict[str, Any] | None, constraint: Any) -> dict[str, Any]:
    """``generation_kwargs`` with vLLM's ``structured_outputs`` set to the one-piece grammar of ``constraint``.

    Args:
        generation_kwargs: The configured generation arguments, or ``None``.
        constraint: The orchestration constraint (its ``grammar()``).
    """
    return {**(generation_kwargs or {}), "structured_outputs": {"grammar": constraint.grammar()}}


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class OrchestraGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` + the outcome-reward metrics in every log entry, and the features of our runs.

    ``args`` may be a :class:`~training.config.OrchestraGRPOConfig`: its features (shared-prefix forward, batched
    rollouts, every-n-layer checkpointing, phase profiling) are then installed by ``__init__`` itself, through
    :func:`training.hooks.install_trainer_hooks` (the overrides of TRL's private methods are not defined here).
    ``decoding_stats`` (set when rollouts are decoded under a grammar) adds ``constrained/*`` counters to the logs.

    Args:
        *args: ``GRPOTrainer``'s positional arguments.
        constraint: An :class:`~mas_orchestra.models.constraints.OrchestrationConstraint`, or ``None``: rollouts
            are sampled under its grammar (vLLM: the one-piece grammar as ``structured_outputs``; transformers:
            the staged, budget-fitted decoding).
        rollout_log: Where every rollout is appended as one JSON line (``None``: not kept).
        validation: A :class:`~training.validation.ValidationCallback`: added to the callbacks and attached.
        **kwargs: ``GRPOTrainer``'s keyword arguments (``args``, ``callbacks``, ``processing_class``…).
    """

    decoding_stats: Any = None
    #: A :class:`training.shared_prefix.RolloutPrompts` (``prompt_grad: false`` with batched rollouts): its
    #: counts join the logs as ``shared_prefix/prompts_reused`` and ``shared_prefix/prompts_computed``.
    rollout_prompts: Any = None
    #: Where every rollout (step, question, completion, status, reward, error) is appended as one JSON line;
    #: None = not kept. After a resume the steps past the checkpoint appear again: readers keep the last.
    rollout_log: Path | None = None
    #: A :class:`training.profiling.PhaseProfiler` whose per-phase time and peak RSS join every training log.
    profiler: Any = None

    #: Warn after this many logging steps in a row in which every rollout scored 0 (no gradient at all).
    zero_reward_warn_after: int = 3

    def __init__(self, *args: Any, constraint: Any = None, rollout_log: Path | None = None, validation: Any = None,
                 **kwargs: Any) -> None:
        from training.config import OrchestraGRPOConfig

        config = kwargs.get("args")
        if constraint is not None and config is not None and config.use_vllm:
            # One request per rollout: the whole grammar in one piece (the staged, budget-fitted decoding runs
            # only where we own the sampling loop, i.e. transformers generation). TRL reads it in __init__.
            config.generation_kwargs = structured_generation_kwargs(config.generation_kwargs, constraint)
        if validation is not None:
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), validation]
        super().__init__(*args, **kwargs)
        self._zero_reward_steps: list[int] = []
        self.rollout_log = rollout_log
        if validation is not None:
            validation.attach(self)
        if isinstance(self.args, OrchestraGRPOConfig):
            from training.hooks import install_trainer_hooks

            cpu = bool(self.args.use_cpu)
            # under bf16 autocast on a CPU rollouts prefill in bf16 and a 4-bit base model decodes on its packed
            # int4 weights
            install_trainer_hooks(self, self.processing_class, constraint, self.args, cuda=not cpu,
                                  low_precision=bool(self.args.bf16 and cpu), validation=validation is not None)

    @property
    def _training(self) -> bool:
        """Whether the model is in training mode (False before a model is attached: nothing is training)."""
        return self.model is not None and bool(self.model.training)

    def _outcome_rewards(self) -> list[Any]:
        return [f for f in self.reward_funcs if hasattr(f, "pop_records")]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Gather every rank's rollout records, add the outcome metrics, write ``rollouts.jsonl`` (rank 0), then log.

        Args:
            logs: The metrics to log (updated in place).
            start_time: Passed on to TRL's ``log``.
        """
        for reward in self._outcome_rewards():
            records: list[RolloutRecord] = reward.pop_records()
            ranks = [0] * len(records)
            if self.accelerator.num_processes > 1:  # every rank logs at the same points, so this is safe
                from accelerate.utils import gather_object

                parts = gather_object([records])  # one list per rank, in rank order
                records = [r for part in parts for r in part]
                ranks = [rank for rank, part in enumerate(parts) for _ in part]
            if not records:
                continue  # e.g. the end-of-training summary log: nothing new to report
            metrics = summarize(records, reward.kinds)
            if self._training:
                self._watch_zero_rewards(records)
            metrics["rollouts"] = float(len(records))  # all ranks: the global generation batch
            metrics["rollout_ranks"] = float(len(set(ranks)))
            self._append_rollouts(records, ranks)
            if not self._training:
                metrics = {f"eval_{k}": v for k, v in metrics.items()}
            logs.update(metrics)
        stats = self.decoding_stats
        if stats is not None and self._training:
            logs["constrained/rollouts"] = float(stats.rows)
            logs["constrained/stage_switches"] = float(stats.stage_switches)
            logs["constrained/closings"] = float(stats.closings)
            logs["constrained/forced_tokens"] = float(stats.forced_tokens)
            logs["constrained/mask_seconds"] = float(stats.mask_seconds)
        prompts = self.rollout_prompts
        if prompts is not None and self._training:  # running totals, as the constrained/* counts
            logs["shared_prefix/prompts_reused"] = float(prompts.reused)
            logs["shared_prefix/prompts_computed"] = float(prompts.computed)
        if self.profiler is not None and self._training:
            logs.update(self.profiler.pop_metrics())
        super().log(logs, start_time)

    def _watch_zero_rewards(self, records: list[RolloutRecord]) -> None:
        """Say in the log when every rollout has scored 0 for ``zero_reward_warn_after`` steps in a row: every
        group's advantages are then zero and the policy gets no gradient (the task is out of reach)."""
        step = int(self.state.global_step)
        if any(r.reward for r in records):
            self._zero_reward_steps = []
            return
        self._zero_reward_steps.append(step)
        if len(self._zero_reward_steps) == self.zero_reward_warn_after:
            statuses = sorted({r.status for r in records})
            log.warning(
                "steps %d-%d: every rollout scored 0 (statuses: %s), so every GRPO group has zero advantages and the "
                "policy gets no gradient; make the reward reachable: easier data or a curriculum, more rollouts per "
                "prompt (num_generations), a sampling temperature that explores, or a longer max_completion_length",
                self._zero_reward_steps[0], step, ", ".join(statuses),
            )

    def _append_rollouts(self, records: list[RolloutRecord], ranks: list[int]) -> None:
        """Rank 0 appends the gathered rollouts of every rank (``rank``: which process executed it)."""
        if self.rollout_log is None or not self.accelerator.is_main_process:
            return
        step = self.state.global_step
        train = self._training
        self.rollout_log.parent.mkdir(parents=True, exist_ok=True)
        with self.rollout_log.open("a", encoding="utf-8") as out:
            for record, rank in zip(records, ranks, strict=True):
                line = {"step": step, "train": train, "rank": rank, **asdict(record)}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")


class HeapTrimmer(TrainerCallback):
    """Hands the heap's free pages back to the OS after every step (see :mod:`training.allocator`)."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Return freed heap memory to the system after each step.

        Args:
            args: The training arguments (unused).
            state: The trainer state (unused).
            control: The trainer control (unused).
            **kwargs: The rest of the event's objects (unused).
        """
        from training.allocator import trim_heap

        trim_heap()


class StepTimer(TrainerCallback):
    """Wall and CPU seconds of every optimizer step (CPU time of the whole process: all threads, including
    TRL's reward event loop) and the peak RSS after it."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._wall = self._cpu = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the step's wall and CPU clocks.

        Args:
            args: The training arguments (unused).
            state: The trainer state (unused).
            control: The trainer control (unused).
            **kwargs: The rest of the event's objects (unused).
        """
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the step's wall and CPU seconds and peak memory.

        Args:
            args: The training arguments (unused).
            state: The trainer state (``global_step``).
            control: The trainer control (unused).
            **kwargs: The rest of the event's objects (unused).
        """
        self.steps.append({
            "step": state.global_step,
            "wall_s": time.perf_counter() - self._wall,
            "cpu_s": time.process_time() - self._cpu,
            "peak_rss_mb": peak_rss_mb(),
        })


class CurvePlotter(TrainerCallback):
    """Redraw ``<output_dir>/reward_curve.png`` from the log history at every checkpoint and at the end, so a
    running job can be watched. Without matplotlib it warns once and draws nothing (training goes on).

    Args:
        output_dir: The run's output directory.
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / CURVE_FILE
        self.written: Path | None = None
        self._disabled = False

    def draw(self, history: list[dict[str, Any]]) -> Path | None:
        """Draw the reward curve from the log history; returns the PNG's path, or ``None``.

        Args:
            history: The trainer state's ``log_history``.
        """
        if self._disabled:
            return None
        curve = curve_from_history(history)
        if not curve:
            return None
        try:
            self.written = plot_training(curve, self.path, validation=validation_from_history(history))
        except MissingExtraError as exc:
            log.warning("no reward curve PNG: %s", exc)
            self._disabled = True
        return self.written

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Redraw the reward curve at each checkpoint (rank 0).

        Args:
            args: The training arguments.
            state: The trainer state (``is_world_process_zero``, ``log_history``).
            control: The trainer control.
            **kwargs: The rest of the event's objects (unused).
        """
        if state.is_world_process_zero:
            self.draw(state.log_history)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Draw the final reward curve (rank 0).

        Args:
            args: The training arguments.
            state: The trainer state (``is_world_process_zero``, ``log_history``).
            control: The trainer control.
            **kwargs: The rest of the event's objects (unused).
        """
        if state.is_world_process_zero:
            self.draw(state.log_history)
