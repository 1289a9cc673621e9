"""The decode batch's key/value layout: spare-capacity layers and padding compaction change no logit."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")), reason="local extras not installed"
)


def _model():  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def _prefill(model, ids):  # type: ignore[no-untyped-def]
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), use_cache=True, cache=cache)
    return cache


def _decode(model, prompts, steps, *, compact):  # type: ignore[no-untyped-def]
    """Feed each row its tokens step by step, as the batcher does (a step is as wide as its longest row, shorter
    rows left-padded); returns each row's last logits and the final mask."""
    import torch

    from mas_orchestra.local.batch_cache import compact_padding, join_row

    cache, mask = None, None
    for ids in prompts:
        cache, mask = join_row(cache, mask, _prefill(model, ids))
    lengths = [len(p) for p in prompts]
    logits = None
    for pending in steps:
        width = max(len(p) for p in pending)
        input_ids = torch.zeros((len(prompts), width), dtype=torch.long)
        step_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, tokens in enumerate(pending):
            k = len(tokens)
            input_ids[row, width - k:] = torch.tensor(tokens)
            step_mask[row, width - k:] = 1
            positions[row, width - k:] = torch.arange(lengths[row], lengths[row] + k)
            lengths[row] += k
        with torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=torch.cat([mask, step_mask], dim=1),
                        position_ids=positions, use_cache=True, cache=cache, logits_to_keep=1)
        mask = torch.cat([mask, step_mask], dim=1)
        if compact:
            cache, mask = compact_padding(cache, mask, min_waste=1)
        logits = out.logits[:, -1]
    return logits, mask


# two rows; at each step one of them appends a grammar-forced run while the other appends one token
PROMPTS = [[1, 5, 9, 3, 7], [2, 4, 6, 8, 10, 12, 14]]
STEPS = [[[11, 12, 13, 14, 15], [16]], [[17], [18, 19, 20, 21, 22, 23]], [[24], [25]],
         [[26, 27, 28, 29, 30, 31, 32], [33]], [[34], [35]]]


def test_compacting_the_padding_changes_no_logit_and_shrinks_the_cache() -> None:
    import torch

    model = _model()
    plain, plain_mask = _decode(model, PROMPTS, STEPS, compact=False)
    compacted, compacted_mask = _decode(model, PROMPTS, STEPS, compact=True)
    assert torch.allclose(plain, compacted, atol=1e-5)
    real = [len(p) + sum(len(s[row]) for s in STEPS) for row, p in enumerate(PROMPTS)]
    assert compacted_mask.sum(dim=1).tolist() == real  # no attended column lost
    assert int(compacted_mask.shape[1]) < int(plain_mask.shape[1])
    assert int(compacted_mask.shape[1]) <= max(real) + 7  # at most the last step's padding is left
    # and both equal each row's plain forward over its whole sequence, no cache
    for row, prompt in enumerate(PROMPTS):
        sequence = prompt + [t for step in STEPS for t in step[row]]
        with torch.inference_mode():
            full = model(input_ids=torch.tensor([sequence])).logits[0, -1]
        assert torch.allclose(full, compacted[row], atol=1e-4)


def test_compaction_waits_until_enough_padding_is_wasted() -> None:
    import torch
    from transformers import DynamicCache

    from mas_orchestra.local.batch_cache import compact_padding

    keys = torch.randn(2, 1, 100, 4)
    cache = DynamicCache(ddp_cache_data=[(keys, keys.clone())])
    mask = torch.ones(2, 100, dtype=torch.long)
    mask[0, 10:25] = 0
    mask[1, 50:65] = 0  # every row wastes 15 columns: over 1/8 of the width, under 64
    before = cache.layers[0].keys
    same_cache, same_mask = compact_padding(cache, mask)
    assert same_mask is mask and same_cache.layers[0].keys is before
    _, small = compact_padding(cache, mask, min_waste=8)
    assert small.shape == (2, 85) and bool(small.all())
    assert torch.equal(cache.layers[0].keys[0, 0, :10], keys[0, 0, :10])
    assert torch.equal(cache.layers[0].keys[0, 0, 10:], keys[0, 0, 25:])  # order kept, padding dropped


def test_spare_capacity_layer_appends_in_place_and_survives_replaced_tensors() -> None:
    import torch

    from mas_orchestra.local.batch_cache import SpareCapacityLayer

    layer = SpareCapacityLayer()
    steps = [torch.randn(3, 2, 1 if i else 40, 8) for i in range(30)]
    buffers = set()
    for i, step in enumerate(steps):
        keys, values = layer.update(step, -step)
        buffers.add(layer._key_buffer.data_ptr())
        expected = torch.cat(steps[: i + 1], dim=2)
        assert torch.equal(keys, expected) and torch.equal(values, -expected)
    assert len(buffers) == 1  # 40 + 29 columns fit the first buffer's spare room: nothing was copied again
    layer.batch_select_indices(torch.tensor([0, 2]))  # a row leaves: keys is now another tensor
    more = torch.randn(2, 2, 3, 8)
    keys, values = layer.update(more, -more)
    expected = torch.cat([torch.cat(steps, dim=2)[[0, 2]], more], dim=2)
    assert torch.equal(keys, expected) and torch.equal(values, -expected)
    assert layer.get_seq_length() == 72


def test_join_row_gives_the_batch_spare_capacity_layers() -> None:
    from mas_orchestra.local.batch_cache import SpareCapacityLayer, join_row

    model = _model()
    cache, mask = join_row(None, None, _prefill(model, PROMPTS[0]))
    cache, mask = join_row(cache, mask, _prefill(model, PROMPTS[1]))
    assert all(isinstance(layer, SpareCapacityLayer) for layer in cache.layers)
    assert mask.tolist() == [[0, 0, 1, 1, 1, 1, 1], [1] * 7]
