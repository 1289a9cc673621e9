"""Validation during training: Avg@k of the current policy on a held-out set, before training and every N steps.

The original's recipe (verl) evaluates its validation files before the first update (``val_before_train``),
every ``test_freq`` steps and after the last one, sampling k completions per question at the validation
temperature (0.5) and reporting the mean score over all of them (Avg@k). :class:`ValidationCallback` does the
same here: at step 0 (``val_before_train``, skipped when a resumed run already has it), every ``eval_steps``
optimizer steps and after the last step it samples ``val_samples`` orchestrations per validation question from
the policy being trained (LoRA adapter on, no gradients; under the orchestration grammar when rollouts are),
executes and grades each with an :class:`~training.rewards.OutcomeReward` of its own (so validation rollouts
never mix with the training step's metrics), and appends one entry to ``trainer_state.json``'s
``log_history``::

    {"step": 5, "val/avg_at_k": 0.25, "val/pass_at_k": 0.5, "val/valid_rate": 1.0, "val/k": 8,
     "val/questions": 20, "val/samples": 160, "val/status/ok": 0.9, ..., "val/subagent_calls": 3.1, ...}

The entry also goes to the configured loggers (TensorBoard / W&B) through the trainer's callbacks. With
several processes the main one validates and the others wait for it (keep the set small enough to finish
within the process group's timeout, 30 minutes by default). A failing
sample is an outcome (its status counts, its score is 0); a question whose generation itself fails counts its
k samples as ``crash`` with the error logged. Nothing here raises into the training loop.

Generation uses transformers' ``generate`` on the training model, also when rollouts come from vLLM (slower
than vLLM, and correct: it is the very weights being trained). Importing this module imports transformers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback

from training.records import STATUSES, RolloutRecord, summarize
from training.rewards import OutcomeReward

__all__ = ["VAL_PREFIX", "ValidationCallback", "ValidationRunner"]

log = logging.getLogger("training.validation")

VAL_PREFIX = "val/"
# summarize()'s keys kept in a validation entry (the rest describe training batches).
_KEPT = ("agents_per_spec", "delegation_share", "direct_answer_share", "subagent_calls", "subagent_tokens",
         "subagent_cost_usd", "rollout_wall_s/mean", "structure/agents_mean", "structure/depth_mean",
         "structure/ref_depth_mean", "structure/width_mean", "structure/edges_mean", "structure/wired_share")


class ValidationRunner:
    """Sample ``samples`` completions per validation row from a model, run and grade them, return ``val/*``.

    Args:
        rows: TRL rows (``prompt`` chat messages, ``question``, ``answer``).
        reward: The outcome reward that executes and grades them (not the training one).
        tokenizer: The model's tokenizer.
        samples: Completions per row (at least 1).
        temperature: Sampling temperature; 0 means greedy decoding (then the samples are identical).
        max_new_tokens: Most tokens per completion.
        top_p: Nucleus-sampling probability mass.
        loop: The event loop the reward runs on (TRL's reward loop, so the sub-agent models stay on one loop);
            None = a fresh one per validation.

    Raises:
        ValueError: ``samples`` is below 1.
    """

    def __init__(
        self, rows: Sequence[Mapping[str, Any]], reward: OutcomeReward, tokenizer: Any, *, samples: int,
        temperature: float, max_new_tokens: int, top_p: float = 1.0, loop: Any = None,
    ) -> None:
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        self.rows = [dict(r) for r in rows]
        self.reward = reward
        self.tokenizer = tokenizer
        self.samples = samples
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.top_p = top_p
        #: The event loop the reward runs on (None: a fresh one per pass; see :meth:`ValidationCallback.attach`).
        self.loop = loop

    def _generate(self, model: Any, prompt: Any) -> list[str]:
        import torch

        encoded = self.tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
        device = next(model.parameters()).device
        input_ids = encoded["input_ids"].to(device)
        attention = encoded["attention_mask"].to(device)
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
            if self.temperature > 0 else {"do_sample": False}
        )
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        # Greedy decoding gives k identical samples: generate one and repeat it (transformers refuses
        # num_return_sequences > 1 without sampling).
        sequences = self.samples if self.temperature > 0 else 1
        with torch.no_grad():
            output = model.generate(
                input_ids=input_ids, attention_mask=attention, max_new_tokens=self.max_new_tokens,
                num_return_sequences=sequences, pad_token_id=pad, use_cache=True, **sampling,
            )
        texts = list(self.tokenizer.batch_decode(output[:, input_ids.shape[1]:], skip_special_tokens=True))
        return texts if sequences == self.samples else texts * self.samples

    def _score(self, completions: list[str], rows: list[dict[str, Any]]) -> list[RolloutRecord]:
        call = self.reward(prompts=[r["prompt"] for r in rows], completions=completions,
                           answer=[r["answer"] for r in rows], question=[r["question"] for r in rows])
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(call, self.loop).result()
        else:
            asyncio.run(call)
        return self.reward.pop_records()

    def run(self, model: Any) -> dict[str, float]:
        """The ``val/*`` metrics of one validation pass of ``model`` (left in the mode it was in).

        Args:
            model: The policy model to sample from.
        """
        started = time.perf_counter()
        was_training = model.training
        model.eval()
        completions: list[str] = []
        sample_rows: list[dict[str, Any]] = []
        failed: dict[int, str] = {}  # question index -> generation error
        try:
            for index, row in enumerate(self.rows):
                try:
                    texts = self._generate(model, row["prompt"])
                except Exception as exc:  # one question's generation failing is an outcome, not a crash
                    log.warning("validation question %s: generation failed: %s: %s", row.get("id", index),
                                type(exc).__name__, exc)
                    failed[index] = f"generation: {type(exc).__name__}: {exc}"
                    continue
                completions.extend(texts)
                sample_rows.extend([row] * len(texts))
        finally:
            if was_training:
                model.train()
        records: list[RolloutRecord] = []
        if completions:
            try:
                records = self._score(completions, sample_rows)
            except Exception as exc:  # the reward maps every run failure to a status; this is a last resort
                log.exception("validation: scoring failed")
                self.reward.pop_records()  # drop partial records, so the next pass counts only its own
                records = [RolloutRecord(index=i, status="crash", error=f"scoring: {type(exc).__name__}: {exc}")
                           for i in range(len(completions))]
        per_question: list[list[bool]] = []
        position = 0
        for index in range(len(self.rows)):
            if index in failed:
                crashed = [RolloutRecord(index=-1, status="crash", error=failed[index]) for _ in range(self.samples)]
                records.extend(crashed)
                per_question.append([False] * self.samples)
                continue
            per_question.append([r.correct for r in records[position:position + self.samples]])
            position += self.samples
        return self._metrics(records, per_question, time.perf_counter() - started, len(failed))

    def _metrics(self, records: list[RolloutRecord], per_question: list[list[bool]], wall: float,
                 failed: int) -> dict[str, float]:
        summary = summarize(records, self.reward.kinds)
        n = len(records)
        metrics: dict[str, float] = {
            "avg_at_k": sum(r.correct for r in records) / n if n else 0.0,
            "pass_at_k": sum(any(c) for c in per_question) / len(per_question) if per_question else 0.0,
            "valid_rate": summary["valid_spec_rate"],
            "reward": summary["outcome_reward/mean"],
            "k": float(self.samples),
            "questions": float(len(per_question)),
            "samples": float(n),
            "generation_failures": float(failed),
            "wall_s": wall,
        }
        for status in STATUSES:
            metrics[f"status/{status}"] = summary[f"status/{status}"]
        for key in _KEPT:
            metrics[key] = summary[key]
        return {f"{VAL_PREFIX}{k}": float(v) for k, v in metrics.items()}


class ValidationCallback(TrainerCallback):
    """Run a :class:`ValidationRunner` at step 0 (``before_train``), every ``every`` steps and after the last.

    Call :meth:`attach` with the trainer once it exists (the entry is logged through its callback handler;
    the constrained-decoding counters of the training logs are restored after each pass, so they keep
    counting training rollouts only).

    Args:
        runner: The runner of each pass.
        every: Validate every ``every`` steps (at least 1).
        before_train: Also validate at step 0, unless the log already holds that pass.

    Raises:
        ValueError: ``every`` is below 1.
    """

    def __init__(self, runner: ValidationRunner, *, every: int, before_train: bool = True) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.runner = runner
        self.every = every
        self.before_train = before_train
        self.trainer: Any = None
        #: The steps validated by this process, in order.
        self.steps: list[int] = []

    def attach(self, trainer: Any) -> ValidationCallback:
        """Bind the callback to its trainer (and to the trainer's event loop).

        Args:
            trainer: The trainer; its ``async_loop`` becomes the runner's loop unless the runner has one.

        Returns:
            The callback itself.
        """
        self.trainer = trainer
        if self.runner.loop is None:
            self.runner.loop = getattr(trainer, "async_loop", None)
        return self

    def _validate(self, args: Any, state: Any, control: Any, model: Any) -> None:
        if not state.is_world_process_zero:
            return  # one process validates; the others wait for it at the next collective operation
        trainer = self.trainer
        model = model if model is not None else getattr(trainer, "model", None)
        if model is None:
            log.warning("validation at step %d skipped: no model", state.global_step)
            return
        stats = getattr(trainer, "decoding_stats", None)
        saved = dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) and not isinstance(stats, type) else None
        try:
            metrics = self.runner.run(model)
        finally:
            if saved is not None:
                for name, value in saved.items():
                    setattr(stats, name, value)
        self.steps.append(state.global_step)
        log.info("validation at step %d: Avg@%d %.3f, pass@%d %.3f, valid %.2f over %d questions (%.1f s)",
                 state.global_step, self.runner.samples, metrics["val/avg_at_k"], self.runner.samples,
                 metrics["val/pass_at_k"], metrics["val/valid_rate"], int(metrics["val/questions"]),
                 metrics["val/wall_s"])
        state.log_history.append({**metrics, "step": state.global_step})
        handler = getattr(trainer, "callback_handler", None)
        if handler is not None:  # TensorBoard / W&B see the entry like any other log
            # The handler's on_log clears control.should_log, which would drop this step's training log.
            should_log = control.should_log
            handler.on_log(args, state, control, dict(metrics))
            control.should_log = should_log

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Validate before the first step, unless the log already holds that pass.

        Args:
            args: The training arguments.
            state: The trainer state (``global_step``, ``log_history``).
            control: The trainer control.
            model: The model being trained.
            **kwargs: The rest of the event's objects (unused).
        """
        already = any(VAL_PREFIX + "avg_at_k" in e and e.get("step") == 0 for e in state.log_history)
        if self.before_train and state.global_step == 0 and not already:
            self._validate(args, state, control, model)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Validate every ``every`` steps and after the last one.

        Args:
            args: The training arguments.
            state: The trainer state (``global_step``, ``max_steps``).
            control: The trainer control.
            model: The model being trained.
            **kwargs: The rest of the event's objects (unused).
        """
        step = state.global_step
        if step % self.every == 0 or step >= state.max_steps:
            self._validate(args, state, control, model)
