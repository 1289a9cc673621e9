"""Every override of TRL's ``GRPOTrainer`` (and of the transformers model inside it), installed in one place.

:func:`install_trainer_hooks` is the only code that reaches into the trainer; ``OrchestraGRPOTrainer.__init__`` calls it
when its ``args`` is our config. What it installs, each where the run's config asks for it (the config has
decided its ``auto`` options from the hardware: on a CPU):

* **shared-prefix forward**: TRL's private ``_get_per_token_logps_and_entropies`` runs each group's prompt once
  (:mod:`training.shared_prefix`), falling back to TRL's own where that is not exact;
* **batched rollouts**: the policy's ``generate`` (reached by TRL's private ``_generate_single_turn``) decodes
  through the local engine's batcher (:mod:`training.rollouts`), or, without them, under the grammar through
  ``model.generate`` (:func:`mas_orchestra.local.decoding.constrain_generate`);
* **forced tokens out of the loss** (``forced_token_loss: false``): TRL's private ``_generate_and_score_completions``
  returns, as its ``tool_mask`` (which TRL's loss multiplies in), a mask that drops the completion tokens the
  grammar forced, and recounts ``num_items_in_batch`` (:func:`forced_token_keep_mask`);
* **zero-advantage micro-batches skipped** (``skip_zero_advantage``): TRL's ``compute_loss`` returns a zero that
  reaches every trainable parameter, without the model's forward, where the loss is exactly 0
  (:func:`zero_advantage_skippable`);
* **checkpointing every n-th layer**: the model's private ``_set_gradient_checkpointing`` keeps ``every_n_layers``;
* **attention kept under checkpointing** (``checkpoint_keeps_attention``): the same method hands every layer a
  checkpoint function that keeps the attention kernel's outputs from the forward instead of recomputing them
  in backward (:func:`keep_attention_outputs`);
* **the backward from the adapted layers only** (``lora_layers``): the model's ``enable_input_require_grads`` hook
  is removed and made a no-op (:func:`backward_from_adapted_layers`);
* **max-variance down-sampling** (``downsample_generations``): TRL's private ``_calculate_rewards`` and
  ``_generate_and_score_completions`` are wrapped so the loss sees only each group's most varied rollouts
  (:mod:`training.downsampling`);
* **phase profiling**: TRL's private ``_generate_single_turn`` and ``_calculate_rewards``, ``compute_loss``, the
  accelerator's ``backward`` and the optimizer's ``step`` are timed (:mod:`training.profiling`);

The private names it relies on are checked against the installed TRL, transformers and torch by
``tests/test_private_apis.py``; the versions tested are the upper bounds in ``pyproject.toml``.

Importing this module imports TRL (through :mod:`training.trainer`).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable
from typing import Any

__all__ = ["ATTENTION_OPS", "backward_from_adapted_layers", "checkpoint_every_n_layers", "forced_token_keep_mask",
           "install_trainer_hooks", "keep_attention_outputs", "shared_prefix_refusal", "zero_advantage_skippable"]

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
    if cfg.checkpoint_keeps_attention and not (cfg.gradient_checkpointing_kwargs or {}).get("use_reentrant"):
        keep_attention_outputs(trainer.model)
    if cfg.lora_layers is not None:
        backward_from_adapted_layers(trainer.model,
                                     reentrant=bool((cfg.gradient_checkpointing_kwargs or {}).get("use_reentrant")))
    if cfg.skip_zero_advantage:
        _install_zero_advantage_skip(trainer)  # before the profiler, which then times the skipped call too
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
    forced_tokens = None
    if cfg.batched_rollouts and not cfg.use_vllm:
        from training.rollouts import ForcedTokens, install_batched_rollouts

        if not cfg.forced_token_loss and constraint is not None:
            forced_tokens = ForcedTokens()
            _install_forced_token_mask(trainer, forced_tokens)
        stats = install_batched_rollouts(trainer.model, tokenizer, constraint, merged_sampling=cfg.merged_sampling,
                                         low_precision=low_precision, prompt_store=trainer.rollout_prompts,
                                         forced_tokens=forced_tokens)
        trainer.decoding_stats = stats if constraint is not None else None
    elif constraint is not None and (not cfg.use_vllm or validation):
        from mas_orchestra.local.decoding import constrain_generate

        # with vLLM sampling the rollouts, only validation samples with transformers, under the same grammar
        stats = constrain_generate(trainer.model, tokenizer, constraint)
        if not cfg.use_vllm:
            trainer.decoding_stats = stats
    if cfg.downsample_generations is not None:
        from training.downsampling import install_downsampling

        # last, so it cuts what the other wrappers of _generate_and_score_completions return (the forced-token mask)
        install_downsampling(trainer, cfg.downsample_generations)


def forced_token_keep_mask(completion_ids: Any, rows: list[tuple[list[int], list[bool]]] | None) -> Any | str:
    """A ``[rows, tokens]`` int mask of ``completion_ids``: 0 where the grammar forced the token, 1 elsewhere.

    Args:
        completion_ids: TRL's right-padded completion ids of one generation batch (rows in ``generate``'s order).
        rows: What :class:`~training.rollouts.ForcedTokens` recorded for that ``generate`` call.

    Returns:
        The mask, or why it cannot be built (nothing recorded; the rows differ from what was decoded), so that
        the caller keeps every token.
    """
    import torch

    if rows is None:
        return "the rollouts did not record which tokens were forced (a call fell back to model.generate)"
    if len(rows) != int(completion_ids.size(0)):
        return f"{len(rows)} decoded rows for {int(completion_ids.size(0))} completions"
    keep = torch.ones_like(completion_ids, dtype=torch.long)
    width = int(completion_ids.size(1))
    for i, (tokens, flags) in enumerate(rows):
        n = min(len(tokens), width)
        if completion_ids[i, :n].tolist() != tokens[:n]:
            return f"completion {i} is not the row the decoder returned"
        keep[i, :n] = torch.tensor([0 if forced else 1 for forced in flags[:n]], dtype=torch.long)
    return keep


def _install_forced_token_mask(trainer: Any, recorder: Any) -> None:
    """Wrap the trainer's ``_generate_and_score_completions`` so the loss leaves out the tokens the grammar forced
    (``forced_token_loss: false``); the share left out is logged as ``completions/forced_share``."""
    original = trainer._generate_and_score_completions
    warned: set[str] = set()

    def generate_and_score(self: Any, inputs: Any) -> Any:
        output = original(inputs)
        keep = forced_token_keep_mask(output["completion_ids"], recorder.take())
        if isinstance(keep, str):
            if keep not in warned:
                warned.add(keep)
                log.warning("forced_token_loss: false not applied to this batch: %s; every token counts", keep)
            return output
        tool_mask = output.get("tool_mask")
        output["tool_mask"] = keep if tool_mask is None else tool_mask * keep
        loss_mask = output["completion_mask"] * output["tool_mask"]
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        tokens = int(output["completion_mask"].sum())
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["completions/forced_share"].append(1.0 - int(loss_mask.sum()) / max(1, tokens))
        return output

    trainer._generate_and_score_completions = types.MethodType(generate_and_score, trainer)


def zero_advantage_skippable(trainer: Any, inputs: Any) -> bool:
    """Whether ``inputs``' loss, and so its gradient, is exactly 0 without running the model.

    True when every advantage of the micro-batch is 0 and nothing else enters TRL's loss: no KL term (``beta``
    0), no entropy bonus, no auxiliary loss; and training runs in one process (with several, each rank's backward
    must match the others' collective calls, so nothing is skipped).

    Args:
        trainer: The GRPO trainer.
        inputs: One micro-batch as ``compute_loss`` receives it.
    """
    import torch

    advantages = inputs.get("advantages") if isinstance(inputs, dict) else None
    if not isinstance(advantages, torch.Tensor) or advantages.numel() == 0 or bool(advantages.any()):
        return False
    return (float(getattr(trainer, "beta", 0.0)) == 0.0 and not getattr(trainer, "_entropy_bonus_enabled", True)
            and not getattr(trainer, "aux_loss_enabled", False) and trainer.accelerator.num_processes == 1)


def _install_zero_advantage_skip(trainer: Any) -> None:
    """Wrap the trainer's ``compute_loss``: a micro-batch :func:`zero_advantage_skippable` says has a zero loss
    returns ``0 x (sum of the trainable parameters)``, whose backward gives every trainable parameter a zero
    gradient, so the optimizer (Adam's moments, weight decay, the scheduler) steps exactly as after the full
    forward and backward. Each micro-batch logs ``zero_advantage_skipped`` (1 skipped, 0 run)."""
    original = trainer.compute_loss

    def compute_loss(self: Any, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.model.training or not zero_advantage_skippable(self, inputs):
            if self.model.training:
                self._metrics["train"]["zero_advantage_skipped"].append(0.0)
            return original(model, inputs, *args, **kwargs)
        self._metrics["train"]["zero_advantage_skipped"].append(1.0)
        trainable = [p for p in model.parameters() if p.requires_grad]
        return sum((p.sum() for p in trainable), start=trainable[0].new_zeros(())) * 0.0

    trainer.compute_loss = types.MethodType(compute_loss, trainer)


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


def backward_from_adapted_layers(model: Any, *, reentrant: bool = False) -> None:
    """Let the backward stop at the lowest decoder layer that holds an adapter.

    With activation checkpointing, transformers, PEFT and TRL make the input embeddings' output require a
    gradient (``enable_input_require_grads``, again every time TRL turns checkpointing back on): reentrant
    checkpointing needs it to reach the adapters. Non-reentrant checkpointing (transformers' default) does not,
    and with adapters on the last layers only it would make the backward run through every layer below them for
    gradients nothing uses. So the hook is removed and later calls do nothing. Reentrant checkpointing
    (``gradient_checkpointing_kwargs`` ``use_reentrant: true``) keeps it.

    Args:
        model: The PEFT model (its base model is patched).
        reentrant: The run checkpoints reentrantly (then nothing changes).
    """
    if reentrant:
        return
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner.disable_input_require_grads()
    inner.enable_input_require_grads = lambda: None


#: The fused attention kernels whose outputs :func:`keep_attention_outputs` keeps (the CPU flash kernel and the GPU
#: ones; SDPA's math fallback is plain products and is recomputed).
ATTENTION_OPS: tuple[str, ...] = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                                  "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")


@functools.lru_cache(maxsize=1)
def _attention_overloads() -> frozenset[Any]:
    import torch

    return frozenset(getattr(torch.ops.aten, name).default for name in ATTENTION_OPS if hasattr(torch.ops.aten, name))


def _keep_attention_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in _attention_overloads() else CheckpointPolicy.PREFER_RECOMPUTE


def keep_attention_outputs(model: Any) -> None:
    """Make every later activation-checkpointing switch of ``model`` keep the attention kernels' outputs.

    Non-reentrant checkpointing recomputes a whole decoder layer in backward, its attention included; the attention
    of a packed group (the completions against a long shared prompt) was ~30 % of a CPU training step's time,
    and a third of that was the recomputation. With torch's selective checkpointing the fused attention kernel's
    outputs (its result and log-sum-exp, which its backward reads anyway) are kept from the forward, and the
    rest of the layer is recomputed as before. The kept tensors are the attention output of every layer
    (``tokens x hidden`` values per layer). Like :func:`checkpoint_every_n_layers`, the choice is fixed on the
    model, because TRL turns checkpointing off around each generation and back on with its own arguments.

    Args:
        model: The model (a PEFT model's base model is patched). Reentrant checkpointing cannot take it: do not
            call this for ``use_reentrant: true``.
    """
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    context_fn = functools.partial(create_selective_checkpoint_contexts, _keep_attention_policy)

    def keep_attention(enable: bool, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not enable:
            return args, kwargs
        if args and args[0] is not None:  # the checkpoint function, passed positionally
            return (functools.partial(args[0], context_fn=context_fn), *args[1:]), kwargs
        if kwargs.get("gradient_checkpointing_func") is not None:  # as transformers passes it
            func = functools.partial(kwargs["gradient_checkpointing_func"], context_fn=context_fn)
            return args, {**kwargs, "gradient_checkpointing_func": func}
        return args, kwargs

    _wrap_checkpoint_switch(model, keep_attention)


def _wrap_checkpoint_switch(model: Any, adjust: Callable[[bool, tuple[Any, ...], dict[str, Any]],
                                                         tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
    """Wrap ``model``'s private ``_set_gradient_checkpointing`` so that every later switch passes its arguments
    through ``adjust(enable, args, kwargs) -> (args, kwargs)`` first (TRL switches checkpointing off and on
    around each step's generation with the checkpoint function's own keyword arguments only)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    set_layers = inner._set_gradient_checkpointing

    def set_gradient_checkpointing(enable: bool = True, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = adjust(enable, args, kwargs)
        return set_layers(enable, *args, **kwargs)

    inner._set_gradient_checkpointing = set_gradient_checkpointing


def checkpoint_every_n_layers(model: Any, every_n_layers: int) -> None:
    """Make every later activation-checkpointing switch of ``model`` checkpoint only every n-th decoder layer.

    transformers takes ``every_n_layers`` when the Trainer enables checkpointing, but TRL turns checkpointing off
    around each generation and back on with the checkpoint function's own keyword arguments only, which would
    checkpoint every layer again from the second step on; so the choice is fixed on the model instead.

    Args:
        model: The model (a PEFT model's base model is patched).
        every_n_layers: Checkpoint every n-th decoder layer.
    """
    def every_n(enable: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return args, {**kwargs, "every_n_layers": every_n_layers}

    _wrap_checkpoint_switch(model, every_n)
