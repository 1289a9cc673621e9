"""Ragged decode batches: each pass runs only the rows' real pending tokens, over one shared prompt prefix.

The padded layout (:mod:`mas_orchestra.local.batch_cache`) feeds every row as many columns as the row with the
most pending tokens: with jump-forward decoding one row's grammar-forced run (an XML tag, often 10–30 tokens)
makes every other row compute as many padding positions. Measured on the CPU wiring recipe's rollouts (8 rows):
6,906 positions computed for 2,010 real tokens. And the rows of a GRPO group share their whole prompt, which
the padded layout holds once per row.

:class:`RaggedBatch` lays a batch out differently:

* a pass concatenates the rows' pending tokens into one sequence ``[1, tokens]`` (each token with its own
  rotary position), so the model's linear layers run on real tokens only, and only each row's last position
  goes through the output head;
* key/values are kept per layer as a **shared prefix** ``[1, kv heads, P, dim]`` (the prompt columns every row
  has in common, taken only where the rows' key/values are the same tensors: from the prefix cache) and a
  **row part** ``[rows, kv heads, columns, dim]`` with each row's own columns left-aligned and no padding;
* :func:`ragged_attention` attends each query to the prefix (all rows' queries in one matrix product) and to its
  row's own columns (masked to what the query may see), and merges the two softmaxes by their log-sum-exp.

The attention runs under a registered attention implementation (:data:`ATTENTION_NAME`) that behaves exactly
as transformers' SDPA for any call without a ragged step, so a model switched to it for a pass stays correct
for anything else that runs it meanwhile. Only models whose layers are all full attention on SDPA take this
layout (:func:`supports_ragged`); others keep the padded one.

Imports torch and transformers (the batcher imports this module only in its worker).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

__all__ = ["ATTENTION_NAME", "MIN_SHARED_PREFIX", "RaggedBatch", "RaggedStep", "declare_sdpa_equivalent",
           "ragged_attention", "sdpa_equivalent", "supports_ragged"]

#: The attention implementation a ragged pass runs under (SDPA for every other call).
ATTENTION_NAME = "mas_ragged_sdpa"
#: The keyword a ragged pass hands its :class:`RaggedStep` down to the attention with.
STEP_KWARG = "ragged_step"
#: Shared prompt columns worth holding once (fewer stay in the rows' own parts).
MIN_SHARED_PREFIX = 32
#: A regrown row part holds this share of its needed columns again as free room (at least 64 columns).
SPARE_FRACTION = 0.25


@dataclass
class RaggedStep:
    """Where one pass's tokens belong: row and row-part column per token, each row's first column."""

    batch: RaggedBatch
    token_rows: Any  # [tokens] row of each token
    token_columns: Any  # [tokens] row-part column each token's key/value is written to
    token_slots: Any  # [tokens] index of the token among its row's pending tokens
    row_starts: Any  # [rows] row-part columns each row had before this pass
    widest: int  # row-part columns the longest row has after this pass
    most_pending: int  # pending tokens of the row with the most
    first_tokens: Any = None  # [rows] each row's first pending token (its index among the pass's tokens)
    later_tokens: Any = None  # [later] the tokens after a row's first (rows with several pending tokens)
    later_rows: Any = None  # [several] the rows with several pending tokens
    later_places: Any = None  # [later] each later token's row among ``later_rows``


def ragged_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *,
                     scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, None]:
    """The attention of :data:`ATTENTION_NAME`: SDPA, unless the call carries a :class:`RaggedStep`.

    Args:
        module: The attention module (its ``layer_idx`` picks the batch's layer).
        query: ``[1, heads, tokens, dim]``: the pass's tokens, rows concatenated.
        key: Ignored in a ragged pass (the batch holds the key/values).
        value: Ignored in a ragged pass.
        attention_mask: Ignored in a ragged pass.
        scaling: The softmax scale (default ``dim ** -0.5``).
        dropout: Attention dropout (SDPA path only; a ragged pass is inference).
        **kwargs: The model's keywords; ``ragged_step`` marks a ragged pass.

    Returns:
        ``[1, tokens, heads, dim]`` and no attention weights, as transformers' attention functions return.
    """
    step = kwargs.pop(STEP_KWARG, None)
    if step is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    layer = step.batch.layers[module.layer_idx]
    _, heads, tokens, dim = query.shape
    kv_heads = int(layer.rows_keys.shape[1])
    group = heads // kv_heads
    scale = scaling if scaling is not None else 1.0 / math.sqrt(dim)
    flat = query[0].transpose(0, 1)  # [tokens, heads, dim]
    own_out, own_max, own_sum = _own_attention(flat, step, layer, kv_heads, group, scale)
    if layer.prefix_keys is not None:
        # every token's queries against the one prefix, as [1, kv heads, tokens x group, dim]: no mask, so the
        # flash kernel, which also returns each query's log-sum-exp (a normalised output with exp-sum 1)
        grouped = query[0].reshape(kv_heads, group, tokens, dim).transpose(1, 2).reshape(
            1, kv_heads, tokens * group, dim)
        shared_out, shared_lse = _prefix_attention(grouped.to(layer.prefix_keys.dtype), layer.prefix_keys,
                                                   layer.prefix_values, scale)

        def tokens_first(t: Any) -> Any:  # [kv heads, tokens x group, k] -> [tokens, kv heads, group, k]
            return t.view(kv_heads, tokens, group, t.shape[-1]).transpose(0, 1)

        shared_out, shared_max = tokens_first(shared_out[0].to(own_out.dtype)), tokens_first(
            shared_lse[0].unsqueeze(-1).to(own_out.dtype))
        top = torch.maximum(own_max, shared_max)
        own_scale, shared_scale = (own_max - top).exp_(), (shared_max - top).exp_()
        out = (own_out * own_scale + shared_out * shared_scale) / (own_sum * own_scale + shared_scale)
    else:
        out = own_out / own_sum
    return out.reshape(1, tokens, heads, dim).to(query.dtype), None


def _own_attention(flat: Any, step: RaggedStep, layer: _Layer, kv_heads: int, group: int,
                   scale: float) -> tuple[Any, Any, Any]:
    """Each token's attention to its own row's columns, unnormalised: (output, row maximum, exp-sum), each
    ``[tokens, kv heads, group, k]``.

    Most rows of a pass have one pending token while a few carry a grammar-forced run; queries padded to the
    longest run would make every row compute that many positions. So every row's first token is attended in one
    product against the row part as it is (one query per row), and only the rows with several tokens attend
    their later tokens, against a copy of their own columns.
    """
    rows = len(step.batch.lengths)
    tokens, heads, dim = flat.shape
    columns = torch.arange(step.widest, device=flat.device)
    first = flat[step.first_tokens].view(rows, kv_heads, group, dim)
    visible = columns[None, :] <= step.row_starts[:, None]  # [rows, cols]
    first_out = _attend(first, layer.rows_keys[:rows, :, :step.widest], layer.rows_values[:rows, :, :step.widest],
                        visible[:, None, None], scale)
    if step.later_tokens is None:
        return first_out
    out, top, total = (t.new_empty((tokens, *t.shape[1:])) for t in first_out)
    for whole, part in zip((out, top, total), first_out, strict=True):
        whole[step.first_tokens] = part
    several = int(step.later_rows.shape[0])
    later_slots = step.token_slots[step.later_tokens]  # 1, 2, ... within each row
    longest = step.most_pending - 1
    placed = flat.new_zeros((several, longest, heads, dim))
    placed[step.later_places, later_slots - 1] = flat[step.later_tokens]
    placed = placed.view(several, longest, kv_heads, group, dim).permute(0, 2, 3, 1, 4).reshape(
        several, kv_heads, group * longest, dim)
    slots = torch.arange(1, longest + 1, device=flat.device)
    starts = step.row_starts[step.later_rows]
    seen = columns[None, None, :] <= (starts[:, None, None] + slots[None, :, None])  # [several, slots, cols]
    later = _attend(placed, layer.rows_keys[step.later_rows, :, :step.widest],
                    layer.rows_values[step.later_rows, :, :step.widest],
                    seen[:, None, None].expand(several, 1, group, longest, step.widest).reshape(
                        several, 1, group * longest, step.widest), scale)
    for whole, part in zip((out, top, total), later, strict=True):
        part = part.view(several, kv_heads, group, longest, part.shape[-1]).permute(0, 3, 1, 2, 4)
        whole[step.later_tokens] = part[step.later_places, later_slots - 1]
    return out, top, total


def _attend(queries: Any, keys: Any, values: Any, visible: Any, scale: float) -> tuple[Any, Any, Any]:
    """``queries`` ``[n, kv heads, q, dim]`` against ``keys``/``values`` ``[n, kv heads, cols, dim]`` where
    ``visible`` (broadcast to ``[n, kv heads, q, cols]``; None: everywhere): unnormalised output, maximum and
    exp-sum per query."""
    scores = torch.matmul(queries, keys.transpose(2, 3)).mul_(scale)
    if visible is not None:
        scores.masked_fill_(~visible, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    weights = scores.sub_(top).exp_()
    return torch.matmul(weights, values), top, weights.sum(dim=-1, keepdim=True)


def _prefix_attention(queries: Any, keys: Any, values: Any, scale: float) -> tuple[Any, Any]:
    """Unmasked attention of ``queries`` ``[1, kv heads, q, dim]`` to the prefix: the normalised output and each
    query's log-sum-exp ``[1, kv heads, q]``. On a CPU the flash kernel returns both (exact in float32, ~25 %
    faster than the products below for 3-64 tokens against a 1,600-column prefix, 30 layers)."""
    if queries.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(queries, keys, values, 0.0, False,
                                                                              scale=scale)[:2]
        return out, lse
    return _prefix_attention_by_products(queries, keys, values, scale)


def _prefix_attention_by_products(queries: Any, keys: Any, values: Any, scale: float) -> tuple[Any, Any]:
    """:func:`_prefix_attention` as plain matrix products (any device)."""
    out, top, total = _attend(queries, keys, values, None, scale)
    return out / total, (top + total.log()).squeeze(-1)


AttentionInterface.register(ATTENTION_NAME, ragged_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)

#: Attention implementations that are SDPA for any call a ragged pass does not mark (a model on one of them can
#: decode ragged).
_SDPA_EQUIVALENTS = {"sdpa", ATTENTION_NAME}


def declare_sdpa_equivalent(name: str) -> None:
    """Record that the registered attention implementation ``name`` is SDPA for every unmarked call (and hands
    calls marked with a ragged step to :func:`ragged_attention`), so models switched to it still decode ragged."""
    _SDPA_EQUIVALENTS.add(name)


def sdpa_equivalent(name: str | None) -> bool:
    """Whether the attention implementation ``name`` is SDPA or declared equivalent to it."""
    return name in _SDPA_EQUIVALENTS


def supports_ragged(model: Any) -> bool:
    """True when ``model`` can decode in the ragged layout: a transformers model on SDPA whose cache layers are
    all full attention (no sliding window, no soft-capped logits, no attention sinks)."""
    config = getattr(model, "config", None)
    if config is None or not sdpa_equivalent(getattr(config, "_attn_implementation", None)):
        return False
    if any(getattr(config, name, None) for name in ("attn_logit_softcapping", "sliding_window", "use_sliding_window")):
        return False
    try:
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        layers = DynamicCache(config=config).layers
    except Exception:
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


@contextlib.contextmanager
def ragged_attention_on(model: Any) -> Iterator[None]:
    """Run ``model`` under :data:`ATTENTION_NAME` for a block (it is SDPA for every call without a ragged step)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = before


class _Layer:
    """One decoder layer's key/values: the shared prefix and the rows' own columns (with spare capacity)."""

    def __init__(self) -> None:
        self.prefix_keys: Any = None  # [1, kv heads, P, dim]
        self.prefix_values: Any = None
        self.rows_keys: Any = None  # [row capacity, kv heads, column capacity, dim]
        self.rows_values: Any = None

    def ensure(self, rows: int, columns: int, like: Any) -> None:
        """Room for ``rows`` rows of ``columns`` columns (regrown with spare room, contents kept)."""
        have = self.rows_keys
        if have is not None and have.shape[0] >= rows and have.shape[2] >= columns:
            return
        row_room = max(rows, have.shape[0] if have is not None else 0)
        column_room = max(columns + max(64, int(columns * SPARE_FRACTION)),
                          have.shape[2] if have is not None else 0)
        fresh = []
        for current in (self.rows_keys, self.rows_values):
            # zero-filled: a row's columns past its length are multiplied by zero weights, and 0 x NaN is NaN
            buffer = like.new_zeros((row_room, like.shape[1], column_room, like.shape[-1]))
            if current is not None:
                buffer[:current.shape[0], :, :current.shape[2]].copy_(current)
            fresh.append(buffer)
        self.rows_keys, self.rows_values = fresh


class _Cache:
    """What the model sees as its cache during a ragged pass: ``update`` writes the pass's key/values."""

    def __init__(self, batch: RaggedBatch, step: RaggedStep) -> None:
        self.batch, self.step = batch, step

    def update(self, key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        layer = self.batch.layers[layer_idx]
        rows, columns = self.step.token_rows, self.step.token_columns
        layer.rows_keys[rows, :, columns] = key_states[0].transpose(0, 1).to(layer.rows_keys.dtype)
        layer.rows_values[rows, :, columns] = value_states[0].transpose(0, 1).to(layer.rows_values.dtype)
        return key_states, value_states  # unused: ragged_attention reads the batch

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always given


class RaggedBatch:
    """A running decode batch in the ragged layout (see the module docstring).

    Args:
        layers: The model's decoder layers (one key/value store each).
        cache_arg: The keyword the model takes its cache by (``cache`` or ``past_key_values``).
    """

    def __init__(self, layers: int, cache_arg: str = "cache") -> None:
        self.layers = [_Layer() for _ in range(layers)]
        self.cache_arg = cache_arg
        self.lengths: list[int] = []  # each row's own columns
        self.prompts: list[Any] = []  # each row's prompt ids (1-D), for prefix sharing
        self.prefix = 0  # shared columns
        self.shareable: list[int] = []  # per row: leading prompt columns whose key/values came from the prefix cache

    def __len__(self) -> int:
        return len(self.lengths)

    def join(self, prompt_ids: Any, cached: int, row_cache: Any) -> None:
        """Add a prefilled row (its prompt ids, how many leading columns came from the prefix cache, its cache)."""
        total = int(row_cache.layers[0].keys.shape[-2])
        prefix = self._shared_with(prompt_ids, cached) if self.lengths else 0
        if prefix != self.prefix:
            self._move_prefix(prefix)
        rows = len(self.lengths) + 1
        own = total - self.prefix
        for layer, new in zip(self.layers, row_cache.layers, strict=True):
            widest = max([own, *self.lengths])
            layer.ensure(rows, widest, new.keys)
            layer.rows_keys[rows - 1, :, :own].copy_(new.keys[0, :, self.prefix:])
            layer.rows_values[rows - 1, :, :own].copy_(new.values[0, :, self.prefix:])
        self.lengths.append(own)
        self.prompts.append(prompt_ids)
        # the first row computed its whole prompt (what the prefix cache hands the next rows): all of it counts
        self.shareable.append(cached if rows > 1 else len(prompt_ids))

    def _shared_with(self, prompt_ids: Any, cached: int) -> int:
        """Columns the new row can share: the prompt all rows (it included) begin with, as far as every row's
        key/values for it are the same tensors (from the prefix cache, or computed by the row that filled it)."""
        common = min(cached, *self.shareable)
        for other in self.prompts:
            n = min(common, len(other), len(prompt_ids))
            if n == 0:
                return 0
            differs = torch.nonzero(other[:n] != prompt_ids[:n])
            common = int(differs[0, 0]) if len(differs) else n
        return common if common >= MIN_SHARED_PREFIX else 0

    def _move_prefix(self, new: int) -> None:
        """Make the first ``new`` columns the shared prefix: columns leave the rows' parts for the prefix when it
        grows, and go back to every row's front when it shrinks."""
        old, rows = self.prefix, len(self.lengths)
        for layer in self.layers:
            if new > old:  # every row has these columns, equal: take them from row 0, shift every row left
                taken = new - old
                moved_keys = layer.rows_keys[:1, :, :taken].clone()
                moved_values = layer.rows_values[:1, :, :taken].clone()
                layer.prefix_keys = moved_keys if layer.prefix_keys is None else torch.cat(
                    [layer.prefix_keys, moved_keys], dim=2)
                layer.prefix_values = moved_values if layer.prefix_values is None else torch.cat(
                    [layer.prefix_values, moved_values], dim=2)
                widest = max(self.lengths)
                for buffer in (layer.rows_keys, layer.rows_values):
                    buffer[:rows, :, :widest - taken] = buffer[:rows, :, taken:widest].clone()
            else:  # back to every row's front
                given = old - new
                widest = max(self.lengths) + given
                keys, values = layer.rows_keys[:rows, :, :widest - given].clone(), layer.rows_values[
                    :rows, :, :widest - given].clone()
                layer.ensure(rows, widest, keys)
                for buffer, part, kept in ((layer.rows_keys, layer.prefix_keys, keys),
                                           (layer.rows_values, layer.prefix_values, values)):
                    buffer[:rows, :, :given] = part[:, :, new:old]
                    buffer[:rows, :, given:widest] = kept
                if new:
                    layer.prefix_keys = layer.prefix_keys[:, :, :new].clone()
                    layer.prefix_values = layer.prefix_values[:, :, :new].clone()
                else:
                    layer.prefix_keys = layer.prefix_values = None
        self.lengths = [length - (new - old) for length in self.lengths]
        self.prefix = new

    def keep(self, indices: list[int]) -> None:
        """Keep the rows ``indices`` (in that order)."""
        if not indices:
            self.__init__(len(self.layers), self.cache_arg)  # type: ignore[misc]
            return
        index = torch.tensor(indices, dtype=torch.long)
        widest = max(self.lengths[i] for i in indices)
        for layer in self.layers:
            for buffer in (layer.rows_keys, layer.rows_values):
                buffer[:len(indices), :, :widest] = buffer[index.to(buffer.device), :, :widest]
        self.lengths = [self.lengths[i] for i in indices]
        self.prompts = [self.prompts[i] for i in indices]
        self.shareable = [self.shareable[i] for i in indices]

    def forward(self, model: Any, pending: list[list[int]], positions: list[int], device: Any) -> Any:
        """One pass over every row's pending tokens; returns the logits after each row's last one ``[rows, vocab]``.

        Args:
            model: The causal LM.
            pending: Each row's pending tokens (at least one per row).
            positions: Each row's position of its first pending token.
            device: Where the model runs.
        """
        counts = [len(p) for p in pending]
        starts = [self.lengths[i] for i in range(len(counts))]
        if any(self.prefix + start != position for start, position in zip(starts, positions, strict=True)):
            raise RuntimeError("ragged batch out of step with its rows' positions")
        token_rows = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts)).to(device)
        token_slots = torch.cat([torch.arange(n) for n in counts]).to(device)
        row_starts = torch.tensor(starts, device=device)
        token_columns = row_starts[token_rows] + token_slots
        widest = max(s + n for s, n in zip(starts, counts, strict=True))
        firsts = [end - n for end, n in zip(_cumulative(counts), counts, strict=True)]
        step = RaggedStep(batch=self, token_rows=token_rows, token_columns=token_columns, token_slots=token_slots,
                          row_starts=row_starts, widest=widest, most_pending=max(counts),
                          first_tokens=torch.tensor(firsts, dtype=torch.long, device=device))
        if step.most_pending > 1:
            several = [row for row, n in enumerate(counts) if n > 1]
            place = {row: i for i, row in enumerate(several)}
            step.later_rows = torch.tensor(several, dtype=torch.long, device=device)
            step.later_tokens = torch.tensor([firsts[row] + k for row in several for k in range(1, counts[row])],
                                             dtype=torch.long, device=device)
            step.later_places = torch.tensor([place[row] for row in several for _ in range(1, counts[row])],
                                             dtype=torch.long, device=device)
        ids = torch.tensor([t for p in pending for t in p], dtype=torch.long, device=device).unsqueeze(0)
        position_ids = (token_columns + self.prefix).unsqueeze(0)
        like = self.layers[0].rows_keys
        for layer in self.layers:
            layer.ensure(len(counts), widest, like)
        last = torch.tensor(list(_cumulative(counts)), dtype=torch.long, device=device) - 1
        placeholder_mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)  # 4-D: no mask is built
        with ragged_attention_on(model):
            out = model(input_ids=ids, position_ids=position_ids, attention_mask=placeholder_mask, use_cache=True,
                        logits_to_keep=last, **{STEP_KWARG: step, self.cache_arg: _Cache(self, step)})
        self.lengths = [s + n for s, n in zip(starts, counts, strict=True)]
        return out.logits[0]


def _cumulative(counts: list[int]) -> Iterator[int]:
    total = 0
    for n in counts:
        total += n
        yield total
