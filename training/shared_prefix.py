"""The policy's log-probabilities with a group's prompt run through the model once instead of once per rollout.

A GRPO micro-batch holds several completions of the same prompt (``num_generations`` rollouts of one
question). TRL's forward runs every row in full: on the CPU recipe a ~1,000-token prompt and a ~120-token
completion, so most of the work — and of the activations kept for backward — repeats the same prompt.
:func:`shared_prefix_logps` packs a group into one sequence, ``prompt, completion 1, …, completion k``, with
an attention mask under which each completion sees the prompt and its own earlier tokens (never another
completion) and position ids that continue the prompt for every completion, as in the row it came from. That is
the same computation as the full forward of each row, up to floating-point rounding: tests compare
log-probabilities, entropies and LoRA gradients with TRL's own path. The gradient from every completion flows
into the one copy of the prompt, as it flowed into each row's copy.

Where the model runs on SDPA, that mask is never built: :mod:`training.segmented_attention` attends each prompt
to itself and each group's completions to the prompt and their own tokens, segment by segment. Because it is one
ordinary forward (no key/value cache), it works with gradient checkpointing and under a DDP wrapper (one forward
per backward). Log-probabilities are computed only at completion positions (TRL's fused head, on a CPU, scores
every position of the full sequence), and each completion only up to its end (the
padding after it, masked out of the loss, is not run). The output head runs over those positions in chunks of
:data:`HEAD_CHUNK_LOGITS` logits, each under activation checkpointing: a vocabulary-sized float32 row per scored
token (log-softmax, kept for backward; 2,400 tokens × 49,152 = 0.47 GB on the CPU wiring recipe, and as much
again for each temporary) never exists for the whole batch at once. Rows whose prompts differ (ids or padding) form
separate groups, packed side by side in the same sequence (a token never sees another group).

With ``prompt_grad=False`` (the config's ``prompt_grad: false``) a group's prompt, but its last token, runs once
under ``torch.no_grad`` (or its key/values come from the rollouts that just prefilled it with the same weights,
:class:`RolloutPrompts`), and only the last prompt token and the completions run with gradient. The
log-probabilities are the same; the gradient loses the terms through the prompt's keys and values (the adapter
still shapes the prompt's representation, it is only not trained through it), and the prompt's share of the
forward, of its recomputation under checkpointing and of the backward is not spent.

Imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
import torch.utils.checkpoint

from training.segmented_attention import PACKED_ATTENTION_NAME, SEGMENTS_KWARG, PackedSegments

__all__ = ["HEAD_CHUNK_LOGITS", "MAX_PACKED_TOKENS", "PackedBatch", "RolloutPrompts", "adapter_version",
           "completion_lengths", "pack_rows", "prompt_groups", "shared_prefix_logps", "shared_prefix_supported"]

#: Longest packed micro-batch under a dense additive attention mask (tokens² entries; 8,192 tokens = 256 MiB in
#: float32): longer ones fall back to TRL's row-by-row forward unless the model attends by segment
#: (:mod:`training.segmented_attention`), which needs no such mask.
MAX_PACKED_TOKENS = 8192

#: Logits the output head produces at once (scored tokens per chunk × vocabulary): 2**25 = 128 MiB in float32.
HEAD_CHUNK_LOGITS = 1 << 25


def adapter_version(model: Any) -> frozenset[tuple[int, int]]:
    """Which trainable tensors ``model`` has and how often each was changed in place (an optimizer step changes
    every one): equal versions mean the same adapter weights.

    Args:
        model: The policy model (or the transformers model inside it: the same trainable tensors).
    """
    return frozenset((id(p), p._version) for p in model.parameters() if p.requires_grad)


class RolloutPrompts:
    """The prompts' key/values of the latest rollouts, handed to the training forward that scores them.

    With ``prompt_grad: false`` the training forward runs each group's prompt without gradient, the very
    computation the rollouts' prefill has just done with the same weights. The batched rollouts
    (:func:`training.rollouts.install_batched_rollouts`) offer each prompt's key/values here with the adapter's
    :func:`adapter_version`; :func:`shared_prefix_logps` takes them for a group whose prompt starts at position 0
    while the version is unchanged (no optimizer step in between), and runs the prompt itself otherwise. The
    values are the rollouts' (prefilled in the training forward's precision, then kept in the model's), so the
    log-probabilities differ from a recomputed prompt's by rounding only. Each offer replaces the last one.
    """

    def __init__(self) -> None:
        self._entries: list[tuple[torch.Tensor, list[tuple[Any, Any]]]] = []
        self._version: frozenset[tuple[int, int]] | None = None
        #: prompts whose key/values a forward took from here, and prompts it had to run itself
        self.reused = 0
        self.computed = 0

    def offer(self, version: frozenset[tuple[int, int]], prompts: list[tuple[torch.Tensor, list[tuple[Any, Any]]]]
              ) -> None:
        """Replace what is held by these prompts' key/values.

        Args:
            version: The adapter's :func:`adapter_version` when the key/values were computed.
            prompts: Per prompt, its token ids (1-D) and per layer ``(keys, values)`` (``[1, kv heads, length,
                dim]``, position 0 first) for at least a prefix of them.
        """
        self._version = version
        self._entries = [(tokens.reshape(-1).cpu(), layers) for tokens, layers in prompts]

    def take(self, tokens: torch.Tensor, version: frozenset[tuple[int, int]]) -> list[tuple[Any, Any]] | None:
        """Per layer ``(keys, values)`` of exactly ``tokens`` (a prompt from position 0), or None: nothing held
        for them, or the adapter changed since.

        Args:
            tokens: The prompt tokens wanted (1-D).
            version: The adapter's :func:`adapter_version` now.
        """
        if version != self._version:
            return None
        tokens = tokens.reshape(-1).cpu()
        n = len(tokens)
        for held, layers in self._entries:
            if len(held) >= n and bool((held[:n] == tokens).all()) and all(int(k.shape[2]) >= n for k, _ in layers):
                return [(k[:, :, :n], v[:, :, :n]) for k, v in layers]
        return None


def prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int) -> list[list[int]]:
    """Row indices grouped by identical prompt (ids and mask of the first ``len - logits_to_keep`` columns).

    Args:
        input_ids: The micro-batch's token ids (rows × length).
        attention_mask: Its attention mask.
        logits_to_keep: Completion tokens per row (the last columns).
    """
    prompt_len = int(input_ids.size(1)) - logits_to_keep
    groups: dict[tuple[bytes, bytes], list[int]] = {}
    prompts = input_ids[:, :prompt_len].cpu()
    masks = attention_mask[:, :prompt_len].cpu()
    for row in range(int(input_ids.size(0))):
        key = (prompts[row].numpy().tobytes(), masks[row].numpy().tobytes())
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def shared_prefix_supported(model: Any) -> str | None:
    """Why the shared-prefix forward cannot run on ``model`` (None: it can).

    Args:
        model: The policy model (a PEFT model's base model is checked).
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not callable(getattr(inner, "get_output_embeddings", None)) or inner.get_output_embeddings() is None:
        return "the model has no output embeddings"
    if getattr(inner.config, "sliding_window", None) and getattr(inner.config, "use_sliding_window", True):
        return "the model attends through a sliding window (a packed group would change what each token sees)"
    return None


def _token_logps(logits: torch.Tensor, tokens: torch.Tensor, compute_entropy: bool, entropy_grad: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of ``tokens`` under ``logits`` (already divided by the temperature), and the entropy.

    With ``entropy_grad=False`` the entropy is computed outside autograd (a metric, not a loss term), so nothing
    of it is kept for backward: one vocabulary-sized tensor per scored token less at the step's peak.
    """
    logps = torch.log_softmax(logits.float(), dim=-1)
    chosen = logps.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if compute_entropy:
        with contextlib.nullcontext() if entropy_grad else torch.no_grad():
            entropy = -(logps.exp() * logps).sum(-1)
    return chosen, entropy


def _plain_head(inner: Any) -> bool:
    """Whether the model's logits are its output head applied to the final hidden states and nothing else (a
    logit soft-cap or scale after the head would be skipped by the chunked path)."""
    config = inner.config
    return not (getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None))


@contextlib.contextmanager
def _head_returns_hidden(head: Any) -> Iterator[Callable[[torch.Tensor], torch.Tensor]]:
    """For the duration, the model's forward returns its final hidden states where the logits were (its head
    passes its input through); yields the head's real forward, to run on chunks of them."""
    real_forward = head.forward
    head.forward = lambda hidden, *args, **kwargs: hidden  # an instance attribute shadows the class's forward
    try:
        yield real_forward
    finally:
        del head.forward


def _chunked_head_logps(head_forward: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor,
                        targets: torch.Tensor, temperature: float, compute_entropy: bool, entropy_grad: bool,
                        chunk: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`_token_logps` of the head's logits over ``hidden`` (``[tokens, hidden size]``), ``chunk`` tokens at a
    time. With gradients on, each chunk runs under activation checkpointing: only its hidden states are kept,
    and backward recomputes its logits, so one chunk's vocabulary-sized tensors exist at a time."""

    def score(part: torch.Tensor, wanted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = head_forward(part)
        if temperature != 1.0:
            logits = logits / temperature
        return _token_logps(logits, wanted, compute_entropy, entropy_grad)

    checkpointed = torch.is_grad_enabled() and hidden.requires_grad
    logps, entropies = [], []
    for start in range(0, int(hidden.size(0)), chunk):
        part, wanted = hidden[start:start + chunk], targets[start:start + chunk]
        if checkpointed:
            chosen, entropy = torch.utils.checkpoint.checkpoint(score, part, wanted, use_reentrant=False)
        else:
            chosen, entropy = score(part, wanted)
        logps.append(chosen)
        entropies.append(entropy)
    if not logps:  # nothing scored: the empty tensors the unchunked path returns
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if compute_entropy else None
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None  # type: ignore[arg-type]


class PackedBatch(NamedTuple):
    """A micro-batch packed into one sequence (:func:`pack_rows`)."""

    #: ``[1, T]`` token ids: each group's prompt once, then each of its completions up to its end
    ids: torch.Tensor
    #: ``[1, 1, T, T]`` additive attention mask (``None`` when packed for segmented attention)
    mask: torch.Tensor | None
    #: ``[1, T]`` position ids, the full forward's own
    positions: torch.Tensor
    #: for every packed completion token, the packed position whose logits predict it
    predictors: torch.Tensor
    #: for every packed completion token, its index in the flattened ``[rows, logits_to_keep]`` output
    slots: torch.Tensor
    #: per group: (prompt start, prompt length, [(completion start, completion length), ...]) in the sequence
    segments: list[tuple[int, int, list[tuple[int, int]]]]


def completion_lengths(attention_mask: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
    """Per row, how many completion tokens count: up to the last one the mask keeps (TRL masks what follows a
    completion's end-of-text token, and the right padding).

    Args:
        attention_mask: The micro-batch's attention mask (rows × length).
        logits_to_keep: Completion tokens per row (the last columns).
    """
    kept = attention_mask[:, -logits_to_keep:].bool()
    ordinal = torch.arange(1, logits_to_keep + 1, device=attention_mask.device)
    return (kept * ordinal).amax(dim=1) if logits_to_keep else kept.sum(dim=1)


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, mask_dtype: torch.dtype,
              dense_mask: bool = True) -> PackedBatch:
    """The whole micro-batch as one sequence: each group's prompt once, then its completions.

    A token sees the earlier tokens of its own group's prompt and of its own completion, nothing else. A
    prompt's padding is dropped (nothing attends to it in the full forward either), and so is each completion's
    tail after its last kept token (the right padding after its end-of-text token, masked out of TRL's loss), so
    a group costs its completions' real lengths, not ``rows × the longest``. Positions are the full forward's own
    (``0 .. len-1`` over the padded row), so rotary embeddings see the same numbers.

    Args:
        input_ids: The micro-batch's token ids (rows × length).
        attention_mask: Its attention mask.
        logits_to_keep: Completion tokens per row (the last columns).
        mask_dtype: The dtype of the packed attention mask.
        dense_mask: Build the ``[T, T]`` mask (False: the segmented attention needs only ``segments``).
    """
    length = int(input_ids.size(1))
    prompt_len = length - logits_to_keep
    device = input_ids.device
    lengths = completion_lengths(attention_mask, logits_to_keep).tolist()
    pieces, positions, groups, blocks, predictors, slots = [], [], [], [], [], []
    segments: list[tuple[int, int, list[tuple[int, int]]]] = []
    offset = 0
    completion_pos = torch.arange(prompt_len, length, device=device)
    for g, group in enumerate(prompt_groups(input_ids, attention_mask, logits_to_keep)):
        keep = attention_mask[group[0], :prompt_len].bool()
        n_prompt = int(keep.sum())
        pieces.append(input_ids[group[0], :prompt_len][keep])
        positions.append(torch.arange(prompt_len, device=device)[keep])
        blocks.append(torch.zeros(n_prompt, dtype=torch.long, device=device))
        prompt_end = offset + n_prompt - 1  # predicts every completion's first token
        offset += n_prompt
        group_start = offset - n_prompt
        segments.append((group_start, n_prompt, []))
        for block, row in enumerate(group, start=1):
            n = int(lengths[row])
            segments[-1][2].append((offset, n))
            pieces.append(input_ids[row, prompt_len:prompt_len + n])
            positions.append(completion_pos[:n])
            blocks.append(torch.full((n,), block, dtype=torch.long, device=device))
            # token t of the completion is predicted at its token t-1, the first one at the prompt's end
            predicted_at = offset - 1 + torch.arange(n, device=device)
            predicted_at[:1] = prompt_end
            predictors.append(predicted_at)
            slots.append(row * logits_to_keep + torch.arange(n, device=device))
            offset += n
        groups.append(torch.full((offset - group_start,), g, dtype=torch.long, device=device))
    ids, position_ids = torch.cat(pieces).unsqueeze(0), torch.cat(positions).unsqueeze(0)
    if not dense_mask:
        return PackedBatch(ids, None, position_ids, torch.cat(predictors), torch.cat(slots), segments)
    group_of, block_of = torch.cat(groups), torch.cat(blocks)
    index = torch.arange(offset, device=device)
    visible = ((index.unsqueeze(1) >= index.unsqueeze(0)) & (group_of.unsqueeze(1) == group_of.unsqueeze(0))
               & ((block_of.unsqueeze(0) == 0) | (block_of.unsqueeze(0) == block_of.unsqueeze(1))))
    mask = torch.zeros((offset, offset), dtype=mask_dtype, device=device)
    mask.masked_fill_(~visible, torch.finfo(mask_dtype).min)
    return PackedBatch(ids, mask[None, None], position_ids, torch.cat(predictors), torch.cat(slots), segments)


def _prompts_without_grad(model: Any, packed: PackedBatch, placeholder_mask: torch.Tensor,
                          store: RolloutPrompts | None = None
                          ) -> tuple[PackedBatch, dict[int, list[tuple[Any, Any] | None]]]:
    """Run every group's prompt but its last token once, without gradient, recording each layer's keys and
    values (or take them from ``store``); return the batch without those tokens and the records, per layer and
    group, for the forward of the rest (:class:`PackedSegments` ``prefix``).

    The last prompt token stays in the packed batch: its logits predict every completion's first token, so
    that token's log-probability keeps its gradient through the layers at that position.
    """
    if any(n_prompt < 1 for _, n_prompt, _ in packed.segments):
        return packed, {}  # an empty prompt has nothing to run ahead
    device = packed.ids.device
    total = int(packed.ids.size(1))
    keep = torch.ones(total, dtype=torch.bool, device=device)
    prefix_layout: list[tuple[int, int, list[tuple[int, int]]]] = []
    prefix_pieces: list[torch.Tensor] = []
    with_prefix: list[int] = []
    taken: dict[int, list[tuple[Any, Any]]] = {}
    version = adapter_version(model) if store is not None else None
    offset = 0
    for index, (start, n_prompt, _) in enumerate(packed.segments):
        if n_prompt > 1:
            keep[start:start + n_prompt - 1] = False
            if store is not None and version is not None:
                layers = None  # the rollouts prefilled from position 0: a left-padded prompt sits elsewhere
                if int(packed.positions[0, start]) == 0:
                    layers = store.take(packed.ids[0, start:start + n_prompt - 1], version)
                if layers is not None:
                    taken[index] = layers
                    store.reused += 1
                    continue
                store.computed += 1
            prefix_pieces.append(torch.arange(start, start + n_prompt - 1, device=device))
            prefix_layout.append((offset, n_prompt - 1, []))
            with_prefix.append(index)
            offset += n_prompt - 1
    prefix: dict[int, list[tuple[Any, Any] | None]] = {}
    capture: dict[int, list[tuple[Any, Any]]] = {}
    if prefix_pieces:
        positions = torch.cat(prefix_pieces)
        with torch.no_grad():
            model(input_ids=packed.ids[:, positions], position_ids=packed.positions[:, positions],
                  attention_mask=placeholder_mask, logits_to_keep=1, use_cache=False,
                  **{SEGMENTS_KWARG: PackedSegments.build(prefix_layout, device, capture=capture)})
    layer_count = len(capture) if capture else len(next(iter(taken.values()), []))
    for layer in range(layer_count):
        per_group: list[tuple[Any, Any] | None] = [None] * len(packed.segments)
        for index, record in zip(with_prefix, capture.get(layer, []), strict=True):
            per_group[index] = record
        for index, layers in taken.items():
            per_group[index] = layers[layer]
        prefix[layer] = per_group
    new_index = torch.cumsum(keep, 0) - 1
    segments = []
    for start, n_prompt, completions in packed.segments:
        kept_start = int(new_index[start + n_prompt - 1])
        segments.append((kept_start, 1, [(int(new_index[s]), n) for s, n in completions]))
    rest = PackedBatch(packed.ids[:, keep], None, packed.positions[:, keep], new_index[packed.predictors],
                       packed.slots, segments)
    return rest, prefix


def shared_prefix_logps(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                        temperature: float, compute_entropy: bool = False, entropy_grad: bool = True,
                        head_chunk_logits: int = HEAD_CHUNK_LOGITS, prompt_grad: bool = True,
                        prompt_store: RolloutPrompts | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the last ``logits_to_keep`` tokens of every row.

    Args:
        model: The (PEFT-wrapped) causal LM as TRL holds it.
        input_ids: The micro-batch's token ids (rows × length).
        attention_mask: Its attention mask.
        logits_to_keep: Completion tokens per row (the last columns).
        temperature: Divides the logits, as TRL's fused head does.
        compute_entropy: Also compute the per-token entropies.
        entropy_grad: False computes the entropy outside autograd (TRL needs its gradient only for an entropy
            bonus).
        head_chunk_logits: Most logits the output head produces at once (0: the whole batch in one piece, as
            before chunking; models whose head does more than a linear layer always run that way).
        prompt_grad: False runs each group's prompt (but its last token) once without gradient and only the
            completions with it (where the model attends by segment and gradients are on): the same
            log-probabilities, a gradient without the terms that pass through the prompt's keys and values,
            and the prompt's part of the forward, its recomputation and its backward saved.
        prompt_store: With ``prompt_grad=False``, where the rollouts left their prompts' key/values
            (:class:`RolloutPrompts`): a prompt found there (same tokens, same adapter weights) is not run again.

    Returns:
        ``[rows, logits_to_keep]`` tensors (entropies ``None`` unless asked for), like TRL's
        ``_get_per_token_logps_and_entropies``.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    mask_dtype = inner.dtype if inner.dtype.is_floating_point else torch.float32
    segmented = inner.config._attn_implementation == PACKED_ATTENTION_NAME
    packed = pack_rows(input_ids, attention_mask, logits_to_keep, mask_dtype, dense_mask=not segmented)
    targets = input_ids[:, -logits_to_keep:].reshape(-1)[packed.slots]
    head = inner.get_output_embeddings()
    inputs: dict[str, Any] = {"input_ids": packed.ids, "attention_mask": packed.mask,
                              "position_ids": packed.positions, "logits_to_keep": packed.predictors,
                              "use_cache": False}
    if segmented:  # a 4-D placeholder: transformers builds no mask, the attention reads the segments
        inputs["attention_mask"] = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=input_ids.device)
        if not prompt_grad and torch.is_grad_enabled():
            packed, prefix = _prompts_without_grad(model, packed, inputs["attention_mask"], prompt_store)
            inputs.update(input_ids=packed.ids, position_ids=packed.positions, logits_to_keep=packed.predictors)
            inputs[SEGMENTS_KWARG] = PackedSegments.build(packed.segments, input_ids.device, prefix=prefix)
        else:
            inputs[SEGMENTS_KWARG] = PackedSegments.build(packed.segments, input_ids.device)
    if head_chunk_logits and _plain_head(inner):
        with _head_returns_hidden(head) as head_forward:
            out = model(**inputs)
        packed_logps, packed_entropy = _chunked_head_logps(
            head_forward, out.logits[0], targets, temperature, compute_entropy, entropy_grad,
            max(1, head_chunk_logits // int(head.weight.shape[0])))
    else:
        out = model(**inputs)
        logits = out.logits if temperature == 1.0 else out.logits / temperature
        packed_logps, packed_entropy = _token_logps(logits, targets.unsqueeze(0), compute_entropy, entropy_grad)
    rows = int(input_ids.size(0))

    def unpack(values: torch.Tensor) -> torch.Tensor:  # back to [rows, logits_to_keep], 0 after each end
        flat = values.new_zeros(rows * logits_to_keep).index_copy(0, packed.slots, values.reshape(-1))
        return flat.reshape(rows, logits_to_keep)

    return unpack(packed_logps), None if packed_entropy is None else unpack(packed_entropy)
