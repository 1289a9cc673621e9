"""Attention over a packed shared-prefix sequence, segment by segment instead of under a dense mask.

:func:`training.shared_prefix.shared_prefix_logps` packs a group into one sequence — its prompt, then every
completion — under a mask where each completion sees the prompt and its own earlier tokens. Under SDPA with
that ``[T, T]`` mask the CPU kernel computes every query against every key and masks afterwards: on the CPU
wiring recipe (a 1,570-token prompt, 8 completions of ≤ 320 tokens, T ≈ 3,570) the attention was 31 of a
step's ~51 training seconds (forward, its recomputation under checkpointing, backward: measured with the torch
profiler), for a mask that hides ~2/3 of the pairs.

:func:`segmented_attention` computes the same thing in two SDPA calls per group: the prompt causally with itself
(no mask: the kernel skips the blocks above the diagonal), and the group's completions as a batch ``[rows,
heads, longest, dim]`` against the prompt's keys followed by their own (a ``[rows, 1, longest, prompt +
longest]`` mask: the prompt, then causal over the row's own tokens). Gradients flow through the gathers into
the one packed sequence as before, so the prompt's keys receive every completion's gradient.

A forward with the prompt outside autograd (:func:`training.shared_prefix.shared_prefix_logps` with
``prompt_grad=False``) runs in two calls. The first, under ``torch.no_grad``, carries segments with a
``capture`` dictionary: every layer records its prompts' keys and values there. The second packs only each
prompt's last token and the completions, and carries those records as ``prefix``: each group's prompt keys are
the recorded ones followed by its last token's own.

It runs as the attention implementation :data:`PACKED_ATTENTION_NAME`, which is SDPA (or a ragged decode pass,
:mod:`mas_orchestra.local.ragged`) for every call without :class:`PackedSegments`; the training model is switched
to it once, so a forward and its recomputation in backward always take the same path.

Imports torch and transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from mas_orchestra.local.ragged import declare_sdpa_equivalent, ragged_attention, sdpa_equivalent

__all__ = ["PACKED_ATTENTION_NAME", "SEGMENTS_KWARG", "PackedSegments", "segmented_attention",
           "use_segmented_attention"]

#: The attention implementation the training model runs under (SDPA for every call without segments).
PACKED_ATTENTION_NAME = "mas_packed_sdpa"
#: The keyword a packed forward hands its :class:`PackedSegments` down to the attention with.
SEGMENTS_KWARG = "packed_segments"


@dataclass
class _Group:
    prompt_start: int
    prompt_len: int
    gather: torch.Tensor  # [rows, longest] packed position of each completion slot (clamped inside the row)
    valid: torch.Tensor  # [rows, longest] slot holds a real token
    mask: torch.Tensor  # [rows, 1, longest, prompt + longest] what each slot's query sees


@dataclass
class PackedSegments:
    """Where each group's prompt and completions sit in a packed sequence (index tensors built once per forward,
    used by every layer and by the recomputation in backward)."""

    groups: list[_Group]
    #: filled by a forward: layer index -> per group, that layer's (keys, values) of the group's prompt span
    capture: dict[int, list[tuple[Any, Any]]] | None = None
    #: read by a forward: layer index -> per group, keys and values that precede its prompt span (None: none)
    prefix: dict[int, list[tuple[Any, Any] | None]] | None = None

    @classmethod
    def build(cls, layout: list[tuple[int, int, list[tuple[int, int]]]], device: Any,
              prefix: dict[int, list[tuple[Any, Any] | None]] | None = None,
              capture: dict[int, list[tuple[Any, Any]]] | None = None) -> PackedSegments:
        """From ``(prompt start, prompt length, [(completion start, completion length), ...])`` per group, in
        packed order (each group's completions follow its prompt).

        Args:
            layout: The groups, as above.
            device: Where the index tensors live.
            prefix: Recorded keys and values that every token of a group also sees, ahead of its prompt span;
                a group with a prefix must have a one-token prompt span (it sees the whole prefix).
            capture: A dictionary the forward fills with each layer's prompt keys and values.

        Raises:
            ValueError: A group with a prefix has a prompt span longer than one token.
        """
        first_layer = next(iter(prefix.values())) if prefix else None
        groups = []
        for index, (prompt_start, prompt_len, completions) in enumerate(layout):
            recorded = first_layer[index] if first_layer is not None else None
            if recorded is not None and prompt_len != 1:
                raise ValueError(f"group {index}: a prompt span of {prompt_len} tokens after a recorded prefix "
                                 "(only its last token may follow the prefix)")
            visible = prompt_len + (int(recorded[0].shape[2]) if recorded is not None else 0)
            starts = torch.tensor([s for s, _ in completions], device=device)
            lengths = torch.tensor([n for _, n in completions], device=device)
            longest = max(1, int(lengths.max())) if len(completions) else 1
            slots = torch.arange(longest, device=device)
            valid = slots[None, :] < lengths[:, None]
            gather = starts[:, None] + torch.minimum(slots[None, :], (lengths[:, None] - 1).clamp(min=0))
            own = (slots[None, None, :] <= slots[None, :, None]) & valid[:, None, :]  # [rows, query, key]
            prompt = torch.ones((len(completions), longest, visible), dtype=torch.bool, device=device)
            groups.append(_Group(prompt_start, prompt_len, gather, valid, torch.cat([prompt, own], dim=2)[:, None]))
        return cls(groups, capture, prefix)


def segmented_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *,
                        scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, None]:
    """The attention of :data:`PACKED_ATTENTION_NAME` (see the module docstring).

    Args:
        module: The attention module.
        query: ``[1, heads, T, dim]``, the packed sequence.
        key: ``[1, kv heads, T, dim]``.
        value: ``[1, kv heads, T, dim]``.
        attention_mask: Ignored when the call carries segments.
        scaling: The softmax scale.
        dropout: Attention dropout.
        **kwargs: The model's keywords; ``packed_segments`` marks a packed forward.

    Returns:
        ``[1, T, heads, dim]`` and no attention weights.
    """
    segments = kwargs.pop(SEGMENTS_KWARG, None)
    if segments is None:
        return ragged_attention(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                **kwargs)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    heads, dim = int(query.shape[1]), int(query.shape[-1])
    layer = getattr(module, "layer_idx", None)
    pieces = []
    for index, group in enumerate(segments.groups):
        span = slice(group.prompt_start, group.prompt_start + group.prompt_len)
        prompt_keys, prompt_values = key[:, :, span], value[:, :, span]
        if segments.capture is not None:
            segments.capture.setdefault(_layer_index(layer), []).append((prompt_keys.detach(),
                                                                         prompt_values.detach()))
        recorded = segments.prefix[_layer_index(layer)][index] if segments.prefix else None
        if recorded is not None:  # the span is one token: it sees the whole prefix and itself
            prompt_keys = torch.cat([recorded[0].to(prompt_keys.dtype), prompt_keys], dim=2)
            prompt_values = torch.cat([recorded[1].to(prompt_values.dtype), prompt_values], dim=2)
            prompt_out = sdpa(query[:, :, span], prompt_keys, prompt_values, scale=scaling, dropout_p=dropout,
                              enable_gqa=True)
        else:
            prompt_out = sdpa(query[:, :, span], prompt_keys, prompt_values, is_causal=True, scale=scaling,
                              dropout_p=dropout, enable_gqa=True)
        pieces.append(prompt_out[0].transpose(0, 1))  # [prompt, heads, dim]
        rows = int(group.gather.shape[0])
        if not rows:
            continue

        row_keys = torch.cat([prompt_keys.expand(rows, -1, -1, -1), _per_row(key, group.gather)], dim=2)
        row_values = torch.cat([prompt_values.expand(rows, -1, -1, -1), _per_row(value, group.gather)], dim=2)
        out = sdpa(_per_row(query, group.gather), row_keys, row_values, attn_mask=group.mask, scale=scaling,
                   dropout_p=dropout, enable_gqa=True)  # [rows, heads, longest, dim]
        pieces.append(out.transpose(1, 2)[group.valid])  # [real completion tokens, heads, dim], packed order
    return torch.cat(pieces).reshape(1, -1, heads, dim), None


def _layer_index(layer: Any) -> int:
    """The attention module's layer index (recording or reading a prefix needs it)."""
    if layer is None:
        raise ValueError("a forward that records or reads prompt keys needs attention modules with a layer_idx")
    return int(layer)


def _per_row(packed: Any, gather: Any) -> Any:
    """``[1, heads, T, dim]`` -> ``[rows, heads, longest, dim]``: each completion's positions, one row each."""
    return packed[0][:, gather].transpose(0, 1)


AttentionInterface.register(PACKED_ATTENTION_NAME, segmented_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_ATTENTION_NAME, sdpa_mask)
declare_sdpa_equivalent(PACKED_ATTENTION_NAME)


def use_segmented_attention(model: Any) -> bool:
    """Switch ``model`` (a PEFT model's base model) to :data:`PACKED_ATTENTION_NAME` where it runs on SDPA with
    full-attention layers; True if it runs under it now."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    if config is None:
        return False
    if config._attn_implementation == PACKED_ATTENTION_NAME:
        return True
    if not sdpa_equivalent(config._attn_implementation) or any(
            getattr(config, name, None) for name in ("attn_logit_softcapping", "sliding_window")):
        return False
    config._attn_implementation = PACKED_ATTENTION_NAME
    return True
