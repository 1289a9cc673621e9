"""Every override of TRL's ``GRPOTrainer`` (and of the transformers model inside it), installed in one place.

:func:`install_trainer_hooks` is the only code that reaches into the trainer; ``OrchestraGRPOTrainer.__init__`` calls it
when its ``args`` is our config. What it installs, each where the run's config asks for it (the config has
decided its ``auto`` options from the hardware: on a CPU):

* **shared-prefix forward**: TRL's private ``_get_per_token_logps_and_entropies`` runs each group's prompt once
  (:mod:`training.shared_prefix`), falling back to TRL's own where that is not exact;
* **batched rollouts**: the policy's ``generate`` (reached by TRL's private ``_generate_single_turn``) decodes
  through the local engine's batcher (:mod:`training.rollouts`), or, without them, under the grammar through
  ``model.generate`` (:func:`mas_orchestra.local.decoding.constrain_generate`);
* **checkpointing every n-th layer**: the model's private ``_set_gradient_checkpointing`` keeps ``every_n_layers``;
* **phase profiling**: TRL's private ``_generate_single_turn`` and ``_calculate_rewards``, ``compute_loss``, the
  accelerator's ``backward`` and the optimizer's ``step`` are timed (:mod:`training.profiling`);

The private names it relies on are checked against the installed TRL, transformers and torch by
``tests/test_private_apis.py``; the versions tested are the upper bounds in ``pyproject.toml``.

Importing this module imports TRL (through :mod:`training.trainer`).
"""

from __future__ import annotations

import logging
import types
from typing import Any

__all__ = ["checkpoint_every_n_layers", "install_trainer_hooks", "shared_prefix_refusal"]

log = logging.getLogger("training.trainer")


def install_trainer_hooks(trainer: Any, tokenizer: Any, constraint: Any, cfg: Any, *, cuda: bool,
                          low_precision: bool, validation: bool) -> None:
    """Install the overrides the config asks for on a built ``OrchestraGRPOTrainer`` (see the module docstring).

    Args:
        trainer: The trainer, before ``train()``.
        tokenizer: Its tokenizer.
        constraint: The orchestration grammar of the rollouts, or ``None``.
        cfg: The run's :class:`~training.config.OrchestraGRPOConfig`.
        cuda: Whether training runs on a GPU.
        low_precision: The training forward runs under bf16 autocast on a CPU (rollouts then prefill in bf16 and
            decode a 4-bit base model on packed int4 weights).
        validation: A validation callback samples with transformers (it then decodes under the grammar too).
    """
    if not cuda:
        from mas_orchestra.local.batching import prefer_grouped_query_attention

        prefer_grouped_query_attention("cpu")  # the packed training forward has a mask too
    if cfg.checkpoint_every_n_layers > 1:
        checkpoint_every_n_layers(trainer.model, cfg.checkpoint_every_n_layers)
    if cfg.profile_phases:
        from training.profiling import profile_trainer

        trainer.profiler = profile_trainer(trainer)
    # prompts run without gradient: the rollouts' prefill hands its key/values to the forward that scores them
    trainer.rollout_prompts = None
    if cfg.shared_prefix and not cfg.prompt_grad and cfg.batched_rollouts and not cfg.use_vllm:
        from training.shared_prefix import RolloutPrompts

        trainer.rollout_prompts = RolloutPrompts()
    if cfg.shared_prefix:
        _install_shared_prefix(trainer)
    if cfg.batched_rollouts and not cfg.use_vllm:
        from training.rollouts import install_batched_rollouts

        stats = install_batched_rollouts(trainer.model, tokenizer, constraint, merged_sampling=cfg.merged_sampling,
                                         low_precision=low_precision, prompt_store=trainer.rollout_prompts)
        trainer.decoding_stats = stats if constraint is not None else None
    elif constraint is not None and (not cfg.use_vllm or validation):
        from mas_orchestra.local.decoding import constrain_generate

        # with vLLM sampling the rollouts, only validation samples with transformers, under the same grammar
        stats = constrain_generate(trainer.model, tokenizer, constraint)
        if not cfg.use_vllm:
            trainer.decoding_stats = stats


def _install_shared_prefix(trainer: Any) -> None:
    """Replace the trainer's ``_get_per_token_logps_and_entropies`` by one that runs each group's prompt once where
    that is exact (:func:`shared_prefix_refusal` says where not; TRL's own method runs there, with a warning once)."""
    from training.segmented_attention import use_segmented_attention

    original = trainer._get_per_token_logps_and_entropies  # TRL's, bound to this trainer
    warned: set[str] = set()
    if use_segmented_attention(trainer.model):
        log.info("shared-prefix forward: attention by segment (training/segmented_attention.py)%s",
                 "" if trainer.args.prompt_grad else ", prompts without gradient (prompt_grad: false)")
    elif not trainer.args.prompt_grad:
        log.warning("prompt_grad: false has no effect: the model does not attend by segment (it needs SDPA and "
                    "full-attention layers); the prompt keeps its gradient")

    def per_token_logps(self: Any, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                        batch_size: int | None = None, compute_entropy: bool = False,
                        compute_aux_loss: bool = False, **multimodal: Any) -> Any:
        reason = shared_prefix_refusal(model, input_ids, logits_to_keep, compute_aux_loss, multimodal)
        if reason is not None:
            if reason not in warned:
                warned.add(reason)
                log.warning("shared-prefix forward off: %s; every row runs its whole prompt", reason)
            return original(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                            compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal)
        from training.shared_prefix import shared_prefix_logps

        with self.accelerator.autocast():
            # TRL's entropy is a metric and a token mask unless an entropy bonus puts it into the loss
            logps, entropies = shared_prefix_logps(model, input_ids, attention_mask, logits_to_keep,
                                                   self.temperature, compute_entropy,
                                                   entropy_grad=getattr(self, "_entropy_bonus_enabled", True),
                                                   head_chunk_logits=self.args.head_chunk_logits,
                                                   prompt_grad=self.args.prompt_grad,
                                                   prompt_store=self.rollout_prompts)
        return logps, entropies, None

    trainer._get_per_token_logps_and_entropies = types.MethodType(per_token_logps, trainer)


def shared_prefix_refusal(model: Any, input_ids: Any, logits_to_keep: int, compute_aux_loss: bool,
                          multimodal: dict[str, Any]) -> str | None:
    """Why the shared-prefix forward does not apply to this call (None: it does).

    Args:
        model: The policy model.
        input_ids: The micro-batch's token ids (rows × length).
        logits_to_keep: Completion tokens scored per row.
        compute_aux_loss: A mixture-of-experts auxiliary loss is requested.
        multimodal: The call's multimodal inputs by name (any not ``None`` refuses).
    """
    from training.shared_prefix import MAX_PACKED_TOKENS, shared_prefix_supported

    if compute_aux_loss:
        return "a mixture-of-experts auxiliary loss is requested"
    if any(value is not None for value in multimodal.values()):
        return "multimodal inputs"
    reason = shared_prefix_supported(model)
    if reason is not None:
        return reason
    from training.segmented_attention import PACKED_ATTENTION_NAME

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    packed = int(input_ids.size(1)) + (int(input_ids.size(0)) - 1) * logits_to_keep  # an upper bound
    if packed > MAX_PACKED_TOKENS and inner.config._attn_implementation != PACKED_ATTENTION_NAME:
        return (f"a packed micro-batch of up to {packed} tokens exceeds {MAX_PACKED_TOKENS} (its dense "
                "attention mask grows with the square)")
    return None


def checkpoint_every_n_layers(model: Any, every_n_layers: int) -> None:
    """Make every later activation-checkpointing switch of ``model`` checkpoint only every n-th decoder layer.

    transformers takes ``every_n_layers`` when the Trainer enables checkpointing, but TRL turns checkpointing off
    around each generation and back on with the checkpoint function's own keyword arguments only, which would
    checkpoint every layer again from the second step on; so the choice is fixed on the model instead.

    Args:
        model: The model (a PEFT model's base model is patched).
        every_n_layers: Checkpoint every n-th decoder layer.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    set_layers = inner._set_gradient_checkpointing

    def set_gradient_checkpointing(enable: bool = True, *args: Any, **kwargs: Any) -> Any:
        kwargs["every_n_layers"] = every_n_layers
        return set_layers(enable, *args, **kwargs)

    inner._set_gradient_checkpointing = set_gradient_checkpointing
