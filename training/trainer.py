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

__all__ = ["CurvePlotter", "HeapTrimmer", "OrchestraGRPOTrainer", "StepTimer", "checkpoint_every_n_layers",
           "peak_rss_mb", "structured_generation_kwargs"]

log = logging.getLogger("training.trainer")


def checkpoint_every_n_layers(model: Any, every_n_layers: int) -> None:
    """Make every later activation-checkpointing switch of ``model`` checkpoint only every n-th decoder layer.

    transformers takes ``every_n_layers`` when the Trainer enables checkpointing, but TRL turns checkpointing off
    around each generation and back on with the checkpoint function's own keyword arguments only, which would
    checkpoint every layer again from the second step on; so the choice is fixed on the model instead.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    set_layers = inner._set_gradient_checkpointing

    def set_gradient_checkpointing(enable: bool = True, *args: Any, **kwargs: Any) -> Any:
        kwargs["every_n_layers"] = every_n_layers
        return set_layers(enable, *args, **kwargs)

    inner._set_gradient_checkpointing = set_gradient_checkpointing


_checkpoint_layers = checkpoint_every_n_layers  # the trainer's keyword argument has the function's name


def structured_generation_kwargs(generation_kwargs: dict[str, Any] | None, constraint: Any) -> dict[str, Any]:
    """``generation_kwargs`` with vLLM's ``structured_outputs`` set to the one-piece grammar of ``constraint``."""
    return {**(generation_kwargs or {}), "structured_outputs": {"grammar": constraint.grammar()}}


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class OrchestraGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` + the outcome-reward metrics in every log entry, and the features of our runs.

    Everything TRL's ``GRPOTrainer`` takes, plus (keyword-only, each off by default):

    Args:
        *args: ``GRPOTrainer``'s positional arguments.
        constraint: An :class:`~mas_orchestra.models.constraints.OrchestrationConstraint`: rollouts are sampled
            under its grammar (vLLM: the one-piece grammar as ``structured_outputs``; transformers: the staged,
            budget-fitted decoding, whose ``constrained/*`` counters join the logs).
        batched_rollouts: Sample transformers rollouts through the batched decoder (training/rollouts.py).
        merged_sampling: Batched rollouts sample from merged LoRA weights in eval mode.
        shared_prefix: Run a group's shared prompt once in the policy's forward (training/shared_prefix.py)
            where that is exact.
        rollout_log: Where every rollout is appended as one JSON line (None: not kept).
        profile_phases: Add per-phase time and peak RSS to every training log (training/profiling.py).
        checkpoint_every_n_layers: With gradient checkpointing, recompute only every n-th decoder layer.
        validation: A :class:`~training.validation.ValidationCallback`, added to the callbacks and attached.
        **kwargs: ``GRPOTrainer``'s keyword arguments (``args``, ``callbacks``, ``processing_class``…).
    """

    #: Warn after this many logging steps in a row in which every rollout scored 0 (no gradient at all).
    zero_reward_warn_after: int = 3

    def __init__(self, *args: Any, constraint: Any = None, batched_rollouts: bool = False,
                 merged_sampling: bool = True, shared_prefix: bool = False, rollout_log: Path | None = None,
                 profile_phases: bool = False, checkpoint_every_n_layers: int = 1, validation: Any = None,
                 **kwargs: Any) -> None:
        training_args = kwargs.get("args")
        use_vllm = bool(getattr(training_args, "use_vllm", False))
        if constraint is not None and use_vllm and training_args is not None:
            # One request per rollout: the whole grammar in one piece (the staged, budget-fitted decoding runs
            # only where we own the sampling loop, i.e. transformers generation). TRL reads it in __init__.
            training_args.generation_kwargs = structured_generation_kwargs(training_args.generation_kwargs,
                                                                           constraint)
        if validation is not None:
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), validation]
        super().__init__(*args, **kwargs)
        self._shared_prefix_warned: set[str] = set()
        self._zero_reward_steps: list[int] = []
        #: Where every rollout (step, question, completion, status, reward, error) is appended as one JSON line;
        #: None = not kept. After a resume the steps past the checkpoint appear again: readers keep the last.
        self.rollout_log = rollout_log
        self.shared_prefix = shared_prefix
        #: A :class:`training.profiling.PhaseProfiler` whose per-phase time and peak RSS join every training log.
        self.profiler: Any = None
        #: The running :class:`~mas_orchestra.models.decoding.DecodingStats` of constrained transformers rollouts.
        self.decoding_stats: Any = None
        if validation is not None:
            validation.attach(self)
        if checkpoint_every_n_layers > 1:
            _checkpoint_layers(self.model, checkpoint_every_n_layers)
        if profile_phases:
            from training.profiling import profile_trainer

            self.profiler = profile_trainer(self)
        self._install_sampler(constraint, batched=batched_rollouts and not use_vllm, merged_sampling=merged_sampling,
                              use_vllm=use_vllm, validation=validation is not None)

    def _install_sampler(self, constraint: Any, *, batched: bool, merged_sampling: bool, use_vllm: bool,
                         validation: bool) -> None:
        """Route the model's ``generate`` (TRL's transformers rollouts, validation samples) through our decoders."""
        tokenizer = self.processing_class
        if batched:
            from training.rollouts import install_batched_rollouts

            # prompts prefilled in the precision the training forward scores them in (bf16 autocast or float32);
            # under bf16 a 4-bit base model decodes on its packed int4 weights (bf16 activations)
            low_precision = bool(self.args.bf16 and self.args.use_cpu)
            stats = install_batched_rollouts(self.model, tokenizer, constraint, merged_sampling=merged_sampling,
                                             low_precision=low_precision)
            self.decoding_stats = stats if constraint is not None else None
        elif constraint is not None and (not use_vllm or validation):
            from mas_orchestra.models.decoding import constrain_generate

            # with vLLM rollouts only validation samples with transformers, under the same grammar
            stats = constrain_generate(self.model, tokenizer, constraint)
            self.decoding_stats = None if use_vllm else stats

    @property
    def _training(self) -> bool:
        """Whether the model is in training mode (False before a model is attached: nothing is training)."""
        return self.model is not None and bool(self.model.training)

    def _outcome_rewards(self) -> list[Any]:
        return [f for f in self.reward_funcs if hasattr(f, "pop_records")]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Gather every rank's rollout records, add the outcome metrics, write ``rollouts.jsonl`` (rank 0), then log."""
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

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any,
                                           logits_to_keep: int, batch_size: int | None = None,
                                           compute_entropy: bool = False, compute_aux_loss: bool = False,
                                           **multimodal: Any) -> Any:
        """TRL's per-token log-probabilities, with each group's prompt run once where that is exact."""
        reason = self._shared_prefix_refusal(model, compute_aux_loss, multimodal)
        if reason is None:
            from training.shared_prefix import MAX_PACKED_TOKENS

            packed = int(input_ids.size(1)) + (int(input_ids.size(0)) - 1) * logits_to_keep  # an upper bound
            if packed > MAX_PACKED_TOKENS:
                reason = (f"a packed micro-batch of up to {packed} tokens exceeds {MAX_PACKED_TOKENS} (its dense "
                          "attention mask grows with the square)")
        if reason is not None:
            if self.shared_prefix and reason not in self._shared_prefix_warned:
                self._shared_prefix_warned.add(reason)
                log.warning("shared-prefix forward off: %s; every row runs its whole prompt", reason)
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal)
        from training.shared_prefix import shared_prefix_logps

        with self.accelerator.autocast():
            # TRL's entropy is a metric and a token mask unless an entropy bonus puts it into the loss
            logps, entropies = shared_prefix_logps(model, input_ids, attention_mask, logits_to_keep,
                                                   self.temperature, compute_entropy,
                                                   entropy_grad=getattr(self, "_entropy_bonus_enabled", True))
        return logps, entropies, None

    def _shared_prefix_refusal(self, model: Any, compute_aux_loss: bool, multimodal: dict[str, Any]) -> str | None:
        """Why the shared-prefix forward does not apply to this call (None: it does)."""
        if not self.shared_prefix:
            return "disabled"
        if compute_aux_loss:
            return "a mixture-of-experts auxiliary loss is requested"
        if any(value is not None for value in multimodal.values()):
            return "multimodal inputs"
        from training.shared_prefix import shared_prefix_supported

        return shared_prefix_supported(model)

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
        """Return freed heap memory to the system after each step."""
        from training.allocator import trim_heap

        trim_heap()


class StepTimer(TrainerCallback):
    """Wall and CPU seconds of every optimizer step (CPU time of the whole process: all threads, including
    TRL's reward event loop) and the peak RSS after it."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._wall = self._cpu = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the step's wall and CPU clocks."""
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the step's wall and CPU seconds and peak memory."""
        self.steps.append({
            "step": state.global_step,
            "wall_s": time.perf_counter() - self._wall,
            "cpu_s": time.process_time() - self._cpu,
            "peak_rss_mb": peak_rss_mb(),
        })


class CurvePlotter(TrainerCallback):
    """Redraw ``<output_dir>/reward_curve.png`` from the log history at every checkpoint and at the end, so a
    running job can be watched. Without matplotlib it warns once and draws nothing (training goes on)."""

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / CURVE_FILE
        self.written: Path | None = None
        self._disabled = False

    def draw(self, history: list[dict[str, Any]]) -> Path | None:
        """Draw the reward curve from the log history; returns the PNG's path, or ``None``."""
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
        """Redraw the reward curve at each checkpoint (rank 0)."""
        if state.is_world_process_zero:
            self.draw(state.log_history)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Draw the final reward curve (rank 0)."""
        if state.is_world_process_zero:
            self.draw(state.log_history)
