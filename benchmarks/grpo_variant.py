"""``python -m training.grpo`` with one of this stop's decoding changes undone in-process, for the side-by-side
cases of :mod:`benchmarks.grpo_step` whose "before" no flag selects any more.

* ``concatkv``: in the padded layout (``benchmarks/grpo_step.py`` sets ``MAS_BATCH_LAYOUT=padded`` for it), the
  decode batch's key/values laid out as transformers' ``DynamicLayer`` does (the whole cache concatenated anew at
  every step) and the padding of jump-forward steps kept (no
  :func:`~mas_orchestra.local.batch_cache.compact_padding`);
* ``densemask``: the shared-prefix forward's attention under its dense ``[T, T]`` mask (one SDPA call per
  layer over the whole packed sequence) instead of by segment (:mod:`training.segmented_attention`);
* ``heapreuse``: while decoding, blocks below 32 MiB served from the heap (mmap and trim thresholds both
  lifted), as ``training.allocator.reuse_freed_memory`` did before it lifted only the trim threshold;
* ``decodepass``: a ragged decode pass as it was before its four changes: every row's queries padded to the
  row with the most pending tokens for the attention to its own columns, the shared prompt's attention as
  plain matrix products, PEFT's forward for each LoRA layer over its packed base, and packed layers for at most
  32 token positions (``mas_orchestra.local.ragged``, ``training.rollouts``, ``mas_orchestra.local.packed_weights``);
* ``promptrun``: with ``prompt_grad: false``, the training forward runs every prompt itself (without gradient)
  instead of taking the key/values the rollouts' prefill left (:class:`training.shared_prefix.RolloutPrompts`).

    python benchmarks/grpo_variant.py concatkv --config recipes/cpu_wiring.yaml --output-dir D --max-steps 2
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

def _concatenated_kv() -> None:
    from mas_orchestra.local import batch_cache

    def as_given(cache: Any) -> Any:
        return cache

    def uncompacted(cache: Any, mask: Any, min_waste: int | None = None) -> tuple[Any, Any]:
        return cache, mask

    batch_cache.spare_capacity = as_given  # type: ignore[assignment]
    batch_cache.compact_padding = uncompacted  # type: ignore[assignment]


def _heap_reuse() -> None:
    from training import allocator, rollouts

    @contextmanager
    def both_thresholds_lifted() -> Iterator[None]:
        libc, threshold = allocator._glibc(), allocator._applied_threshold
        if libc is None or threshold is None:
            yield
            return
        allocator._set_thresholds(libc, allocator.REUSE_THRESHOLD_BYTES)
        try:
            yield
        finally:
            allocator._set_thresholds(libc, threshold)
            libc.malloc_trim(0)

    rollouts.reuse_freed_memory = both_thresholds_lifted  # type: ignore[assignment]


def _dense_mask() -> None:
    from training import segmented_attention

    def never(model: Any) -> bool:
        return False

    segmented_attention.use_segmented_attention = never  # type: ignore[assignment]


def _decode_pass_before() -> None:
    import torch

    from mas_orchestra.local import packed_weights, ragged
    from training import rollouts

    def padded_own_attention(flat: Any, step: Any, layer: Any, kv_heads: int, group: int,
                             scale: float) -> tuple[Any, Any, Any]:
        rows, longest = len(step.batch.lengths), step.most_pending
        heads, dim = flat.shape[1], flat.shape[2]
        placed = flat.new_zeros((rows, longest, heads, dim))
        placed[step.token_rows, step.token_slots] = flat
        placed = placed.view(rows, longest, kv_heads, group, dim).permute(0, 2, 3, 1, 4).reshape(
            rows, kv_heads, group * longest, dim)
        columns = torch.arange(step.widest, device=flat.device)
        slots = torch.arange(longest, device=flat.device)
        visible = columns[None, None, :] <= (step.row_starts[:, None, None] + slots[None, :, None])
        visible = visible[:, None, None].expand(rows, 1, group, longest, step.widest).reshape(
            rows, 1, group * longest, step.widest)
        out = ragged._attend(placed, layer.rows_keys[:rows, :, :step.widest], layer.rows_values[:rows, :, :step.widest],
                             visible, scale)

        def per_token(t: Any) -> Any:
            t = t.view(rows, kv_heads, group, longest, t.shape[-1]).permute(0, 3, 1, 2, 4)
            return t[step.token_rows, step.token_slots]

        return per_token(out[0]), per_token(out[1]), per_token(out[2])

    original_policy = rollouts.sampling_policy

    def unfused(model: Any, *, merge: bool = True, fuse_packed: bool = False) -> Any:
        return original_policy(model, merge=merge, fuse_packed=False)

    ragged._own_attention = padded_own_attention  # type: ignore[assignment]
    ragged._prefix_attention = ragged._prefix_attention_by_products  # type: ignore[assignment]
    rollouts.sampling_policy = unfused  # type: ignore[assignment]
    packed_weights.MAX_PACKED_ROWS = 32  # type: ignore[misc]


def _prompt_run() -> None:
    from training import shared_prefix

    def nothing_held(self: Any, tokens: Any, version: Any) -> None:
        return None

    shared_prefix.RolloutPrompts.take = nothing_held  # type: ignore[assignment,method-assign]


#: Each variant and what undoes its change.
VARIANTS = {"concatkv": _concatenated_kv, "heapreuse": _heap_reuse, "densemask": _dense_mask,
            "decodepass": _decode_pass_before, "promptrun": _prompt_run}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in VARIANTS:
        raise SystemExit(f"usage: grpo_variant.py {{{','.join(VARIANTS)}}} [training.grpo arguments]")
    VARIANTS[args[0]]()
    from training.grpo import main as grpo_main

    grpo_main(args[1:])


if __name__ == "__main__":
    main()
