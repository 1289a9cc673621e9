"""GRPO rollouts on a local model, sampled through the batched decoder instead of ``model.generate``.

TRL samples a step's completions with one ``model.generate`` call over a left-padded batch in which every
prompt of a group appears ``num_generations`` times. :func:`install_batched_rollouts` replaces that call
(on the transformers model inside the PEFT wrapper, the one TRL's ``generate`` reaches) with the
:class:`~mas_orchestra.local.batching.GenerationBatcher` of the inference path:

* a group's prompt is prefilled once: the other rows of the group take its key/values from a prefix cache
  that lives for this one call (the policy changes at every optimizer step, so nothing is kept across calls
  and no row ever reads key/values of older weights);
* rows decode together and leave the batch when they finish, so a short completion stops costing forward
  passes;
* the policy samples as it is, without training-time machinery: the model is in eval mode for the call (no
  dropout, no activation checkpointing) and each plain LoRA linear layer runs on a temporary merged copy of its
  weight (W + BA·scale: one matrix multiply per layer instead of three; rollout generation 0.64× the unmerged
  time on the CPU learning recipe, ``benchmarks/grpo_step.py --cases unmerged,after``); the original weight
  tensors are put back untouched afterwards, so training continues on exactly the weights it had;
* prompts are prefilled in the precision the training forward runs in (``prefill_precision``): float32 by
  default, ``bfloat16`` when the trainer scores them under bf16 autocast (``--bf16`` on a CPU with native bf16,
  :mod:`mas_orchestra.local.precision`); ``MAS_PREFILL_DTYPE`` replaces that default, an explicit argument wins;
* decode steps read float32 weights by default; with ``decode_weights="auto"`` (what ``--bf16`` on a CPU asks
  for) a 4-bit base model's frozen layers are read as int4 with bf16 activations
  (:mod:`mas_orchestra.local.packed_weights`): the LoRA adapters then stay unmerged (a merged weight is no longer
  4-bit) and are added to the packed base layer's product in float32 by one ``addmm`` per layer, without
  PEFT's per-call module machinery; ``MAS_DECODE_WEIGHTS`` replaces the default;
* the rows decode on the calling thread (:meth:`~mas_orchestra.local.batching.GenerationBatcher.run`), the one
  that runs the training step: with torch's OpenMP backend a worker thread's decode passes were slower there
  (4 rows, 900-token context: 118 ms against 142–157 ms per pass, ``benchmarks/decode_thread.py``);
* under the orchestration grammar each row has its own matcher, and text the grammar forces is appended in
  one forward pass (jump-forward) instead of one decode step per token.

What TRL receives is what ``generate`` returns: the prompt batch as given, then each row's tokens, its
end-of-text token when it stopped on one, right-padded with the pad token. TRL recomputes every
log-probability from these ids with the training forward, so nothing about the loss changes; how the
completions are sampled is the same distribution (temperature, top-p, the same grammar masks). Generation
settings the batched decoder does not implement (top-k, min-p, a repetition penalty, beams) fall back to
``model.generate``, with a warning once; greedy decoding (``do_sample=False``) and ``num_return_sequences`` are
batched. Settings may come in the generation config or as keyword arguments, as ``generate`` takes them.

Imports torch and transformers.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from mas_orchestra.local.batching import GenerationBatcher, GenerationRequest, resolve_batch_layout
from mas_orchestra.local.decoding import (
    ConstrainedLogitsProcessor,
    DecodingStats,
    grammar_compiler,
    stop_token_ids,
)
from mas_orchestra.local.packed_weights import (
    DECODE_WEIGHTS,
    DECODE_WEIGHTS_ENV_VAR,
    DecodeWeightsError,
    decode_packed,
    packed_matmul,
)
from mas_orchestra.local.precision import (
    PREFILL_DTYPE_ENV_VAR,
    PREFILL_PRECISIONS,
    PrecisionError,
    read_setting,
    resolve_prefill_dtype,
)
from mas_orchestra.local.prefix_cache import PrefixCache
from training.allocator import reuse_freed_memory
from training.shared_prefix import RolloutPrompts, adapter_version

__all__ = ["BATCHABLE_SETTINGS", "ForcedTokens", "install_batched_rollouts", "sampling_policy"]

log = logging.getLogger(__name__)

#: A generation-config field and the values the batched decoder reproduces exactly.
BATCHABLE_SETTINGS: dict[str, tuple[Any, ...]] = {
    "top_k": (None, 0),
    "min_p": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "num_beams": (None, 1),
}
#: Generous: one call's group prompts (a 2,000-token SmolLM2 prompt is ~90 MiB of key/values in fp32).
_CALL_CACHE_BYTES = 2 * 2**30
_STAT_FIELDS = ("rows", "stage_switches", "closings", "rejected_tokens", "forced_tokens", "mask_seconds")


class ForcedTokens:
    """Which completion tokens of the latest batched ``generate`` call the grammar forced.

    A token is forced where the row's grammar mask allowed it alone, or where it was appended by a jump forward.
    Under the grammar its sampling probability was 1: it carries no choice of the policy, and a loss term on it
    only moves the unconstrained distribution the grammar overrides anyway (``forced_token_loss: false`` leaves
    such tokens out of the loss, :func:`training.hooks.install_trainer_hooks`).

    Each row is ``(tokens, flags)``: the row's completion as ``generate`` returned it (its end-of-text token
    included when it stopped on one, padding excluded) and, per token, whether it was forced. A call that fell
    back to ``model.generate`` leaves ``None`` (nothing known).
    """

    def __init__(self) -> None:
        self._rows: list[tuple[list[int], list[bool]]] | None = None

    def record(self, rows: list[tuple[list[int], list[bool]]] | None) -> None:
        """Keep ``rows`` as the latest call's (replacing what an earlier call left)."""
        self._rows = rows

    def take(self) -> list[tuple[list[int], list[bool]]] | None:
        """The latest call's rows, once: a second take before the next call returns ``None``."""
        rows, self._rows = self._rows, None
        return rows


def _effective_config(base: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``base`` with the generation settings passed as keyword arguments applied (``generate(max_new_tokens=…)``
    as the validation runner calls it), and the keyword arguments that are not settings."""
    config = copy.deepcopy(base)
    rest = {}
    for name, value in kwargs.items():
        if name in ("input_ids", "attention_mask", "logits_processor"):
            continue
        if hasattr(config, name):
            setattr(config, name, value)
        else:
            rest[name] = value
    return config, rest


def _unsupported(config: Any, rest: dict[str, Any]) -> list[str]:
    """What in this call the batched decoder cannot reproduce (empty: it can)."""
    reasons = [f"{name}={getattr(config, name, None)!r}" for name, ok in BATCHABLE_SETTINGS.items()
               if getattr(config, name, None) not in ok]
    if getattr(config, "max_new_tokens", None) is None:
        reasons.append("max_new_tokens=None")
    if rest:
        reasons.append("arguments " + ", ".join(sorted(rest)))
    return reasons


def install_batched_rollouts(model: Any, tokenizer: Any, constraint: Any = None, *,
                             jump_forward: bool = True, merged_sampling: bool = True,
                             prefill_precision: str | None = None, decode_weights: str | None = None,
                             batch_layout: str | None = None, low_precision: bool = False,
                             prompt_store: RolloutPrompts | None = None,
                             forced_tokens: ForcedTokens | None = None) -> DecodingStats:
    """Make every later ``generate`` of ``model`` (TRL's rollouts, the validation runner's samples) decode
    through the batched decoder.

    Args:
        model: The policy model (a PEFT model's base model is patched).
        tokenizer: Its tokenizer.
        constraint: With one, each row decodes under its grammar (the staged, budget-fitted decoding of
            :class:`~mas_orchestra.local.decoding.ConstrainedLogitsProcessor`).
        jump_forward: Under a constraint, append the tokens the grammar forces in the same forward pass
            instead of one decode step each.
        merged_sampling: Sample under :func:`sampling_policy` (eval mode, merged LoRA weights); False leaves the
            model as the caller has it.
        prefill_precision: ``float32`` | ``bfloat16`` | ``auto``: the precision prompts are prefilled in (the
            training forward's). Default: ``MAS_PREFILL_DTYPE`` (read now), else ``bfloat16`` when
            ``low_precision``, ``float32`` otherwise.
        decode_weights: ``float32`` | ``auto`` | ``int4``: the weights decode steps read. Default:
            ``MAS_DECODE_WEIGHTS`` (read now), else ``auto`` when ``low_precision``, ``float32`` otherwise.
        batch_layout: ``auto`` | ``ragged`` | ``padded``: how the decode batch lays out its rows
            (:mod:`~mas_orchestra.local.ragged`). Default: ``MAS_BATCH_LAYOUT`` (read now), else ``auto``.
        low_precision: The training forward runs under bf16 autocast on a CPU (picks the defaults above).
        prompt_store: Where every call leaves its prompts' key/values (as prefilled) for a training forward that
            runs the prompt without gradient (``prompt_grad: false``; :class:`~training.shared_prefix.RolloutPrompts`).
        forced_tokens: Where every call records which of its completion tokens the grammar forced
            (:class:`ForcedTokens`; a call that falls back to ``model.generate`` records ``None``).

    Returns:
        The running :class:`~mas_orchestra.local.decoding.DecodingStats` of all calls (zeros without a
        constraint).

    Raises:
        PrecisionError: a prefill precision (argument or variable) that is not one of the valid values.
        DecodeWeightsError: likewise for the decode weights.
        BatchLayoutError: likewise for the batch layout.
    """
    prefill_precision = read_setting(prefill_precision, field="prefill_precision", env_var=PREFILL_DTYPE_ENV_VAR,
                                     choices=PREFILL_PRECISIONS, error=PrecisionError,
                                     default="bfloat16" if low_precision else "float32")
    decode_weights = read_setting(decode_weights, field="decode_weights", env_var=DECODE_WEIGHTS_ENV_VAR,
                                  choices=DECODE_WEIGHTS, error=DecodeWeightsError,
                                  default="auto" if low_precision else "float32")
    batch_layout = resolve_batch_layout(batch_layout)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    original = type(inner).generate
    totals = DecodingStats()
    warned: set[str] = set()

    def generate(*args: Any, **kwargs: Any) -> Any:
        config, rest = _effective_config(kwargs.pop("generation_config", None) or inner.generation_config, kwargs)
        reasons = _unsupported(config, rest) + (["positional arguments"] if args else [])
        if not reasons:
            return _batched_generate(inner, tokenizer, constraint, kwargs["input_ids"], kwargs.get("attention_mask"),
                                     config, jump_forward, totals, merged_sampling, prefill_precision,
                                     decode_weights, batch_layout, prompt_store, forced_tokens)
        if forced_tokens is not None:
            forced_tokens.record(None)  # model.generate does not say which tokens the grammar forced
        key = "; ".join(reasons)
        if key not in warned:
            warned.add(key)
            log.warning("rollouts fall back to model.generate (%s is not batched)", key)
        processors = list(kwargs.pop("logits_processor", None) or [])
        processor = None
        if constraint is not None:
            stops = stop_token_ids(getattr(config, "eos_token_id", None), tokenizer)
            compiler = grammar_compiler(tokenizer, int(inner.config.vocab_size), stops)
            processor = ConstrainedLogitsProcessor(constraint, tokenizer, compiler,
                                                   max_new_tokens=getattr(config, "max_new_tokens", None))
            processors.append(processor)
        from transformers import LogitsProcessorList

        inputs = {k: v for k, v in kwargs.items() if k in ("input_ids", "attention_mask")}
        try:
            return original(inner, *args, **inputs, **rest, generation_config=config,
                            logits_processor=LogitsProcessorList(processors))
        finally:
            if processor is not None:
                _add_stats(totals, processor.stats)

    inner.generate = generate
    return totals


def _mergeable(module: Any) -> list[str]:
    """The active adapters of a PEFT LoRA layer that merge as ``W + B @ A * scale`` (plain LoRA on a linear layer,
    not merged already); empty for anything else (DoRA and other variants, LoRA biases, embeddings, convolutions)."""
    if not hasattr(module, "get_delta_weight") or not hasattr(module, "merged_adapters") or module.merged_adapters:
        return []
    if not isinstance(getattr(module, "base_layer", None), torch.nn.Linear):
        return []
    if getattr(module, "disable_adapters", True):
        return []
    active = [a for a in module.active_adapters if a in getattr(module, "lora_A", {})]
    if any(a in getattr(module, "lora_variant", {}) or getattr(module, "lora_bias", {}).get(a, False) for a in active):
        return []
    return active


@contextmanager
def sampling_policy(model: Any, *, merge: bool = True, fuse_packed: bool = False) -> Iterator[int]:
    """Run the block with ``model`` as the policy samples: eval mode, and (``merge``) every plain LoRA linear layer
    merged into a temporary copy of its base weight (PEFT's own merged state, so its forward takes the one base
    matmul).

    Afterwards the training mode, the original weight tensors (never written) and the unmerged state are
    restored, also when the block raises.

    Args:
        model: The policy model.
        merge: Merge the LoRA layers (False: eval mode only).
        fuse_packed: Instead of merging, give each plain LoRA layer whose base layer is int4-packed
            (:mod:`mas_orchestra.local.packed_weights`) a forward that adds the adapter to the packed product in
            one ``addmm`` whenever the base runs packed (see :func:`_fused_lora_forward`).

    Yields:
        The number of merged (or fused) layers.
    """
    was_training = model.training
    swapped: list[tuple[Any, Any]] = []
    fused: list[Any] = []
    model.eval()
    try:
        if fuse_packed and not merge:
            with torch.no_grad():
                for module in model.modules():
                    adapters = _mergeable(module)
                    if adapters and getattr(module.base_layer, "_mas_packed", None) is not None:
                        module.forward = _fused_lora_forward(module, adapters)
                        fused.append(module)
            yield len(fused)
            return
        with torch.no_grad():
            for module in model.modules() if merge else ():
                adapters = _mergeable(module)
                if not adapters:
                    continue
                weight = module.base_layer.weight
                merged = weight.data.clone()
                for adapter in adapters:
                    merged += module.get_delta_weight(adapter).to(merged.dtype)
                swapped.append((module, weight.data))
                weight.data = merged
                module.merged_adapters = list(adapters)
        yield len(swapped)
    finally:
        for module, original in swapped:
            module.base_layer.weight.data = original
            module.merged_adapters = []
        for module in fused:
            del module.forward  # the class's forward again
        model.train(was_training)


def _fused_lora_forward(module: Any, adapters: list[str]) -> Any:
    """A forward for a plain LoRA layer over an int4-packed base: ``x W^T + (x A^T)(s B^T)``, without PEFT's
    per-call machinery.

    PEFT's forward runs the base layer, then per adapter its dropout, ``lora_A``, ``lora_B`` and a separate
    scaling product, each a module call: on a decode pass of a few token positions that overhead is most of the
    adapter's cost (the rollouts' 210 layers). Here the adapters' ``A`` and ``s·B`` are stacked once (the weights
    do not change while the policy samples) and the adapter is added to the packed product with one ``addmm``.
    The adapter stays in float32, as PEFT computes it: in bf16 the same products went through oneDNN, whose
    cached kernels for each new row count raised the rollouts' peak RSS by ~130 MiB. A call the packed kernel
    does not take (more rows, gradients on, outside packed decoding) runs PEFT's own forward.
    """
    down = torch.cat([module.lora_A[a].weight for a in adapters]).t().contiguous()
    up = torch.cat([module.lora_B[a].weight * module.scaling[a] for a in adapters], dim=1).t().contiguous()
    base = module.base_layer
    cls_forward = type(module).forward

    def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and x.dtype == down.dtype:
            flat = x.reshape(-1, x.shape[-1])
            y = packed_matmul(base, flat)
            if y is not None:
                y = torch.addmm(y.to(x.dtype), flat @ down, up).reshape(*x.shape[:-1], y.shape[-1])
                return y if base.bias is None else y + base.bias
        return cls_forward(module, x, *args, **kwargs)

    return forward


def _add_stats(totals: DecodingStats, stats: DecodingStats) -> None:
    for name in _STAT_FIELDS:
        setattr(totals, name, getattr(totals, name) + getattr(stats, name))


def _batched_generate(inner: Any, tokenizer: Any, constraint: Any, input_ids: Any, attention_mask: Any,
                      config: Any, jump_forward: bool, totals: DecodingStats, merged_sampling: bool = True,
                      prefill_precision: str = "float32", decode_weights: str = "float32",
                      batch_layout: str = "auto", prompt_store: RolloutPrompts | None = None,
                      forced_tokens: ForcedTokens | None = None) -> Any:
    device = input_ids.device
    max_new = int(config.max_new_tokens)
    stops = stop_token_ids(getattr(config, "eos_token_id", None), tokenizer)
    end_ids = {int(i) for i in stops}
    pad_id = config.pad_token_id if config.pad_token_id is not None else tokenizer.pad_token_id
    sampling = bool(getattr(config, "do_sample", False))
    temperature = float(config.temperature or 1.0) if sampling else 0.0
    top_p = float(config.top_p if config.top_p is not None else 1.0) if sampling else 1.0
    # One cache per call: the group's rows share their prompt, and no later call (newer weights) can read it.
    identity = f"rollouts:{id(inner)}:{torch.randint(0, 2**62, (1,)).item()}"
    prefix_cache = PrefixCache(identity, _CALL_CACHE_BYTES)
    batcher = GenerationBatcher(inner, tokenizer, str(device), end_ids=end_ids, identity=identity,
                                prefix_cache=prefix_cache,
                                max_batch=max(1, int(input_ids.shape[0])), layout=batch_layout)
    compiler = grammar_compiler(tokenizer, int(inner.config.vocab_size), stops) if constraint is not None else None
    # settings resolved when the rollouts were installed (argument > environment > the trainer's default)
    prefill_dtype = resolve_prefill_dtype(str(device), inner.dtype, prefill_precision)
    packed = decode_packed(inner, str(device), decode_weights)
    requests, processors = [], []
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    copies = int(getattr(config, "num_return_sequences", None) or 1)
    if copies > 1:  # as generate does: each prompt's copies next to each other
        input_ids, mask = input_ids.repeat_interleave(copies, dim=0), mask.repeat_interleave(copies, dim=0)
    prompts: dict[bytes, Any] = {}
    for row in range(int(input_ids.shape[0])):
        prompt = input_ids[row][mask[row].bool()].unsqueeze(0)
        if prompt_store is not None:  # each distinct prompt once, to hand its key/values over afterwards
            prompts.setdefault(prompt.cpu().numpy().tobytes(), prompt[0])
        processor = None
        if constraint is not None:
            processor = ConstrainedLogitsProcessor(constraint, tokenizer, compiler, max_new_tokens=max_new)
            processors.append(processor)
        # Seeds drawn from torch's generator: a run seeded by the trainer samples the same rollouts again.
        seed = int(torch.randint(0, 2**62, (1,)).item())
        requests.append(GenerationRequest(input_ids=prompt, max_new_tokens=max_new, temperature=temperature,
                                          top_p=top_p, seed=seed, processor=processor, jump_forward=jump_forward,
                                          prefill_dtype=prefill_dtype, packed=packed))
    started = time.perf_counter()
    try:
        # The merged weight copies are made before the heap is reused, so they are mmapped and go back to the OS
        # when the policy is restored (made inside, they came from the heap: generation peaked ~200 MiB higher).
        # Packed base layers are the 4-bit weights themselves: merging LoRA into them would undo the packing.
        with (sampling_policy(inner, merge=not packed, fuse_packed=packed) if merged_sampling else nullcontext()), \
                reuse_freed_memory():
            # on this thread: the one that runs the training step decodes faster than a worker would
            results = [future.result() for future in batcher.run(requests)]
        if prompt_store is not None:  # the weights the training forward will see: none changed since the prefill
            held = []
            for prompt in prompts.values():
                hit = prefix_cache.lookup(identity, prompt, max_length=int(prompt.numel()))
                if hit is not None:
                    held.append((prompt[:hit.length], hit.layers))
            prompt_store.offer(adapter_version(inner), held)
    finally:
        batcher.close()
        for processor in processors:
            _add_stats(totals, processor.stats)
    log.info("rollouts: %d rows in %.1f s, %d forward passes at most per row, prompts %d tokens (%d from the "
             "group's prefill), %d tokens generated", len(results), time.perf_counter() - started,
             max(r.forward_passes for r in results), sum(r.prompt_tokens for r in results),
             sum(r.cached_prompt_tokens for r in results), sum(len(r.token_ids) for r in results))
    rows, forced = [], []
    for result in results:
        tokens, flags = list(result.token_ids), list(result.forced)
        if result.end_token_id is not None:
            tokens.append(int(result.end_token_id))
            flags.append(result.end_forced)
        rows.append(tokens)
        forced.append((tokens, flags))
    if forced_tokens is not None:
        forced_tokens.record(forced)
    width = max((len(r) for r in rows), default=0)
    completions = torch.full((len(rows), width), int(pad_id), dtype=input_ids.dtype, device=device)
    for i, tokens in enumerate(rows):
        if tokens:
            completions[i, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype, device=device)
    return torch.cat([input_ids, completions], dim=1)
