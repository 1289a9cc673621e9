"""The padded layout of a running decode batch: rows joined left-padded, spare capacity, padding compacted.

In this layout (:class:`PaddedBatch`; the batcher's choice for models the ragged layout of
:mod:`mas_orchestra.local.ragged` cannot run) :class:`~mas_orchestra.local.batching.GenerationBatcher` keeps one
transformers ``DynamicCache`` for all its rows, ``[rows, kv heads, columns, head dim]`` per layer, with a
``[rows, columns]`` attention mask (0 = padding).
Three things about that layout cost memory and time in a long batch, and are handled here:

* **Growth.** transformers' ``DynamicLayer`` appends a step's key/values with ``torch.cat``: every decode step
  allocates the whole cache anew and frees the old one, per layer: the cache is copied once per step, and where
  those blocks come from the heap each new one is a little larger than the one just freed, which fragments it
  (with the heap serving them, the CPU wiring recipe's rollouts grew ~2 GB for ~0.7 GB of key/values; see
  ``training/allocator.py`` for why they are mmapped now).
  :class:`SpareCapacityLayer` writes into a buffer with room to spare and returns a view of its filled part, so
  a step copies only its new columns; the buffer is regrown (by :data:`SPARE_FRACTION`) when full.
* **Jump-forward padding.** A step feeds every row as many columns as the row with the most pending tokens
  (a grammar-forced run); the other rows get padding columns. Over a rollout the cache grew ~1,000 columns for
  completions of at most 320 tokens. :func:`compact_padding` moves each row's real columns together (right-aligned,
  order kept) once the padding every row carries exceeds :data:`COMPACT_MIN_WASTE` columns and an eighth of the
  width. Keys carry their rotary positions already and each row's positions are tracked by the batcher, so
  moving columns changes nothing a row attends to.
* **Joining and leaving.** :func:`join_row` adds a prefilled row (left-padding the shorter side) and
  :func:`trim_padding` drops leading columns no remaining row uses.

Imports transformers (the batcher imports this module only in its worker, when it decodes).
"""

from __future__ import annotations

from typing import Any

from transformers.cache_utils import DynamicLayer

__all__ = ["COMPACT_MIN_WASTE", "SPARE_FRACTION", "PaddedBatch", "SpareCapacityLayer", "compact_padding", "join_row",
           "spare_capacity", "trim_padding"]

#: A regrown buffer holds this share of its filled columns again as free room (at least 64 columns).
SPARE_FRACTION = 0.25
#: :func:`compact_padding` runs when every row carries at least this many padding columns (and 1/8 of the width).
COMPACT_MIN_WASTE = 64


class SpareCapacityLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``update`` writes into a buffer with spare columns instead of concatenating.

    ``keys``/``values`` stay what transformers expects (the filled ``[rows, heads, columns, dim]`` part, as a
    view). Rows leaving and padding dropped are written into the buffer's front (:meth:`replace`); anything
    else that assigns ``keys``/``values`` directly is noticed at the next ``update``, which moves them into a
    fresh buffer.
    """

    def __init__(self) -> None:
        super().__init__()
        self._key_buffer: Any = None
        self._value_buffer: Any = None

    @classmethod
    def adopt(cls, layer: Any) -> SpareCapacityLayer:
        """A spare-capacity layer holding ``layer``'s key/values (copied into a buffer at the next update)."""
        adopted = cls()
        if layer.is_initialized:
            adopted.device = layer.keys.device
            adopted.keys, adopted.values = layer.keys, layer.values
            adopted.is_initialized = True
        return adopted

    def _holds_current(self) -> bool:
        """True when ``keys``/``values`` are still the filled part of this layer's buffers."""
        buffers = (self._key_buffer, self._value_buffer)
        if buffers[0] is None:
            return False
        views: tuple[Any, Any] = (self.keys, self.values)
        for view, buffer in zip(views, buffers, strict=True):
            if (view.data_ptr() != buffer.data_ptr() or view.shape[1] != buffer.shape[1]
                    or view.shape[0] > buffer.shape[0] or view.stride() != buffer.stride()):
                return False
        return True

    def _regrow(self, needed: int, incoming_keys: Any, incoming_values: Any) -> None:
        """Move the filled part into fresh buffers of ``needed`` columns plus spare room (dtype and device of
        the incoming step's key/values)."""
        import torch

        keys: Any = self.keys
        values: Any = self.values
        filled = int(keys.shape[-2]) if keys.numel() else 0
        capacity = needed + max(64, int(needed * SPARE_FRACTION))
        buffers = []
        for current, like in ((keys, incoming_keys), (values, incoming_values)):
            source = current if current.numel() else like
            shape = (source.shape[0], source.shape[1], capacity, source.shape[-1])
            buffer = torch.empty(shape, dtype=like.dtype, device=like.device)
            if filled:
                buffer[:, :, :filled].copy_(current)
            buffers.append(buffer)
        self._key_buffer, self._value_buffer = buffers
        self.keys = self._key_buffer[:, :, :filled]
        self.values = self._value_buffer[:, :, :filled]

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Append a step's key/values; returns the filled key and value views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys: Any = self.keys
        filled = int(keys.shape[-2]) if keys.numel() else 0
        end = filled + int(key_states.shape[-2])
        if not self._holds_current() or end > int(self._key_buffer.shape[-2]):
            self._regrow(end, key_states, value_states)
        rows = int(key_states.shape[0])
        self._key_buffer[:rows, :, filled:end].copy_(key_states)
        self._value_buffer[:rows, :, filled:end].copy_(value_states)
        self.keys = self._key_buffer[:rows, :, :end]
        self.values = self._value_buffer[:rows, :, :end]
        return self.keys, self.values

    def replace(self, keys: Any, values: Any) -> None:
        """Hold ``keys``/``values`` from now on (rows left, padding dropped): written into the front of this
        layer's buffer when they fit (no new allocation), else held as given and moved into a fresh buffer at
        the next update (the old buffer is let go now, not then)."""
        buffer = self._key_buffer
        fits = (buffer is not None and keys.shape[0] <= buffer.shape[0] and keys.shape[1:2] == buffer.shape[1:2]
                and keys.shape[-2] <= buffer.shape[-2] and keys.dtype == buffer.dtype)
        if not fits:
            self._key_buffer = self._value_buffer = None
            self.keys, self.values = keys, values
            return
        import torch

        rows, filled = int(keys.shape[0]), int(keys.shape[-2])
        with torch.inference_mode():  # the buffers are inference tensors (made during a decode pass)
            self._key_buffer[:rows, :, :filled].copy_(keys)
            self._value_buffer[:rows, :, :filled].copy_(values)
        self.keys = self._key_buffer[:rows, :, :filled]
        self.values = self._value_buffer[:rows, :, :filled]

    def batch_select_indices(self, indices: Any) -> None:
        """Keep the rows ``indices`` (in that order), in place."""
        if self.get_seq_length() > 0:
            keys: Any = self.keys
            values: Any = self.values
            self.replace(keys[indices, ...], values[indices, ...])


def _replace(layer: Any, keys: Any, values: Any) -> None:
    if isinstance(layer, SpareCapacityLayer):
        layer.replace(keys, values)
    else:
        layer.keys, layer.values = keys, values


def spare_capacity(cache: Any) -> Any:
    """Make every full-attention layer of ``cache`` a :class:`SpareCapacityLayer` (in place); returns ``cache``."""
    cache.layers[:] = [SpareCapacityLayer.adopt(layer) if type(layer) is DynamicLayer else layer
                       for layer in cache.layers]
    return cache


def join_row(cache: Any, mask: Any, row_cache: Any) -> tuple[Any, Any]:
    """Add one prefilled row (cache of batch 1, no padding) to the running batch, left-padding the shorter side.

    Args:
        cache: The running batch's cache (``None`` before the first row).
        mask: Its ``[rows, columns]`` attention mask.
        row_cache: The new row's cache.

    Returns:
        The batch's cache (with spare capacity) and mask, the new row last.
    """
    import torch

    new_len = row_cache.layers[0].keys.shape[-2]
    new_mask = torch.ones((1, new_len), dtype=torch.long, device=row_cache.layers[0].keys.device)
    if cache is None:
        return spare_capacity(row_cache), new_mask
    old_len = int(mask.shape[1])
    width = max(old_len, new_len)
    for layer, new in zip(cache.layers, row_cache.layers, strict=True):
        _replace(layer, torch.cat([_left_pad(layer.keys, width), _left_pad(new.keys, width)], dim=0),
                 torch.cat([_left_pad(layer.values, width), _left_pad(new.values, width)], dim=0))
    mask = torch.cat([_left_pad(mask, width, dim=1), _left_pad(new_mask, width, dim=1)], dim=0)
    return cache, mask


def _left_pad(tensor: Any, width: int, dim: int = -2) -> Any:
    import torch

    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype, device=tensor.device), tensor], dim=dim)


def trim_padding(cache: Any, mask: Any) -> tuple[Any, Any]:
    """Drop leading columns that no remaining row attends to (left by rows that left).

    Returns:
        The cache (changed in place) and the trimmed mask.
    """
    import torch

    used = torch.nonzero(mask.any(dim=0))
    first = int(used[0, 0]) if len(used) else 0
    if first == 0:
        return cache, mask
    for layer in cache.layers:  # copied: the source and the buffer's front overlap
        _replace(layer, layer.keys[:, :, first:].clone(), layer.values[:, :, first:].clone())
    return cache, mask[:, first:]


def compact_padding(cache: Any, mask: Any, min_waste: int | None = None) -> tuple[Any, Any]:
    """Move each row's attended columns together, right-aligned and in order, when padding wastes enough columns.

    Args:
        cache: The running batch's cache (changed in place when compacted).
        mask: Its ``[rows, columns]`` attention mask.
        min_waste: Compact only when every row has at least this many padding columns (and 1/8 of the width);
            default :data:`COMPACT_MIN_WASTE`.

    Returns:
        The cache and its mask, compacted or as they were.
    """
    import torch

    width = int(mask.shape[1])
    longest = int(mask.sum(dim=1).max())
    if width - longest < max(COMPACT_MIN_WASTE if min_waste is None else min_waste, width // 8):
        return cache, mask
    # a stable sort puts each row's padding (0) first and its attended columns (1) after, in their order
    order = torch.sort(mask.to(torch.int8), dim=1, stable=True).indices[:, width - longest:]
    for layer in cache.layers:
        rows, heads, _, dim = layer.keys.shape
        index = order[:, None, :, None].expand(rows, heads, longest, dim)
        _replace(layer, layer.keys.gather(2, index), layer.values.gather(2, index))
    return cache, mask.gather(1, order)


class PaddedBatch:
    """A running decode batch in the padded layout: one cache, rows left-padded to a common width.

    The layout for models :func:`mas_orchestra.local.ragged.supports_ragged` turns down (sliding windows,
    soft-capped logits, non-SDPA attention); same methods as :class:`mas_orchestra.local.ragged.RaggedBatch`.

    Args:
        cache_arg: The keyword the model takes its cache by (``cache`` or ``past_key_values``).
        pad_token_id: The token fed in padding columns (masked out).
    """

    def __init__(self, cache_arg: str = "cache", pad_token_id: int = 0) -> None:
        self.cache_arg, self.pad_token_id = cache_arg, pad_token_id
        self.cache: Any = None
        self.mask: Any = None

    def __len__(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[0])

    def join(self, prompt_ids: Any, cached: int, row_cache: Any) -> None:
        """Add a prefilled row (its prompt ids and prefix-cache hit are unused here)."""
        self.cache, self.mask = join_row(self.cache, self.mask, row_cache)

    def forward(self, model: Any, pending: list[list[int]], positions: list[int], device: Any) -> Any:
        """One pass over every row's pending tokens (right-aligned, left-padded per row); returns the logits
        after each row's last one ``[rows, vocab]``."""
        import torch

        width = max(len(p) for p in pending)
        rows = len(pending)
        input_ids = torch.full((rows, width), self.pad_token_id, dtype=torch.long, device=device)
        step_mask = torch.zeros((rows, width), dtype=self.mask.dtype, device=device)
        position_ids = torch.zeros((rows, width), dtype=torch.long, device=device)
        for i, (tokens, first) in enumerate(zip(pending, positions, strict=True)):
            k = len(tokens)
            input_ids[i, width - k:] = torch.tensor(tokens, device=device)
            step_mask[i, width - k:] = 1
            position_ids[i, width - k:] = torch.arange(first, first + k, device=device)
        full_mask = torch.cat([self.mask, step_mask], dim=1)
        out = model(input_ids=input_ids, attention_mask=full_mask, position_ids=position_ids, use_cache=True,
                    logits_to_keep=1, **{self.cache_arg: self.cache})
        self.cache, self.mask = compact_padding(self.cache, full_mask)
        return out.logits[:, -1, :]

    def keep(self, indices: list[int]) -> None:
        """Keep the rows ``indices`` (in that order)."""
        if not indices:
            self.cache = self.mask = None
            return
        import torch

        index = torch.tensor(indices, dtype=torch.long, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.cache, self.mask = trim_padding(self.cache, self.mask[index])
