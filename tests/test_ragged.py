"""The ragged decode layout: a pass over the rows' real tokens only, a shared prompt prefix held once — and the
same logits as each row's own forward pass."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")), reason="local extras not installed"
)


def _model(**overrides):  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    settings = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=512, attn_implementation="sdpa")
    settings.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**settings)).eval()


def _prefill(model, ids, reuse=None):  # type: ignore[no-untyped-def]
    """A row's prefill; ``reuse`` = (cache, n): start from the first n columns of another row's cache, as a
    prefix-cache hit does (the same tensors)."""
    import torch
    from transformers import DynamicCache

    start = 0
    if reuse is None:
        cache = DynamicCache()
    else:
        other, start = reuse
        cache = DynamicCache(ddp_cache_data=[(layer.keys[:, :, :start], layer.values[:, :, :start])
                                             for layer in other.layers])
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[start:]]), position_ids=torch.arange(start, len(ids)).unsqueeze(0),
              use_cache=True, cache=cache)
    return cache


def _full_logits(model, sequence):  # type: ignore[no-untyped-def]
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([sequence])).logits[0, -1]


SHARED = list(range(1, 41))  # a 40-token prompt prefix the group's rows share
STEPS = [[[11, 12, 13, 14, 15], [16], [17, 18]], [[19], [20, 21, 22, 23, 24, 25], [26]], [[27], [28], [29]],
         [[30, 31, 32, 33, 34, 35, 36], [37], [38, 39, 40]]]


def _run(model, batch, prompts, steps):  # type: ignore[no-untyped-def]
    """Decode ``steps`` (each row's pending tokens per pass) on ``batch``; compare every pass's logits with each
    row's full forward over its whole sequence."""
    import torch

    sequences = [list(p) for p in prompts]
    for pending in steps:
        positions = [len(s) for s in sequences]
        with torch.inference_mode():
            logits = batch.forward(model, pending, positions, "cpu")
        for row, tokens in enumerate(pending):
            sequences[row] += tokens
            assert torch.allclose(logits[row], _full_logits(model, sequences[row]), atol=1e-4), (row, pending)
    return sequences


def test_a_ragged_group_shares_its_prompt_once_and_matches_each_rows_own_forward() -> None:
    import torch

    from mas_orchestra.local.ragged import RaggedBatch

    model = _model()
    prompts = [[*SHARED, 41, 42], [*SHARED, 43], [*SHARED, 44, 45, 46]]
    batch = RaggedBatch(2)
    first = _prefill(model, prompts[0])
    with torch.inference_mode():
        batch.join(torch.tensor(prompts[0]), 0, first)
        for prompt in prompts[1:]:  # the others hit the prefix cache for the shared 40 tokens
            batch.join(torch.tensor(prompt), len(SHARED), _prefill(model, prompt, reuse=(first, len(SHARED))))
    assert batch.prefix == len(SHARED)
    assert batch.layers[0].prefix_keys.shape[2] == len(SHARED)  # held once, not once per row
    assert batch.lengths == [2, 1, 3]  # each row's own columns: no padding
    _run(model, batch, prompts, STEPS)
    assert batch.lengths == [2 + 14, 1 + 9, 3 + 7]


def test_rows_that_share_less_shrink_the_prefix_and_rows_leaving_keep_the_rest_exact() -> None:
    import torch

    from mas_orchestra.local.ragged import RaggedBatch

    model = _model()
    prompts = [[*SHARED, 41], [*SHARED, 42], [*SHARED[:35], 60, 61]]
    batch = RaggedBatch(2)
    first = _prefill(model, prompts[0])
    with torch.inference_mode():
        batch.join(torch.tensor(prompts[0]), 0, first)
        batch.join(torch.tensor(prompts[1]), len(SHARED), _prefill(model, prompts[1], reuse=(first, len(SHARED))))
        assert batch.prefix == len(SHARED)
        batch.join(torch.tensor(prompts[2]), 35, _prefill(model, prompts[2], reuse=(first, 35)))
    assert batch.prefix == 35  # shrunk to what all three share; 5 columns went back to the first two rows
    assert batch.lengths == [6, 6, 2]
    sequences = _run(model, batch, prompts, STEPS[:2])
    with torch.inference_mode():
        batch.keep([2, 0])  # the middle row finished
    _run(model, batch, [sequences[2], sequences[0]], [[[50], [51, 52]], [[53, 54, 55], [56]]])


def test_rows_without_a_prefix_cache_hit_share_nothing() -> None:
    import torch

    from mas_orchestra.local.ragged import RaggedBatch

    model = _model()
    prompts = [[*SHARED, 41], [*SHARED, 42]]
    batch = RaggedBatch(2)
    with torch.inference_mode():
        for prompt in prompts:  # each prefilled on its own: equal tokens, but not the same tensors
            batch.join(torch.tensor(prompt), 0, _prefill(model, prompt))
    assert batch.prefix == 0 and batch.layers[0].prefix_keys is None
    _run(model, batch, prompts, [[[1, 2, 3], [4]], [[5], [6, 7]]])


def test_the_ragged_attention_is_sdpa_for_every_other_call() -> None:
    import torch

    from mas_orchestra.local.ragged import ragged_attention_on

    model = _model()
    ids = torch.tensor([[3, 4, 5, 6, 7], [0, 0, 8, 9, 10]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    with torch.inference_mode():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with ragged_attention_on(model):
            switched = model(input_ids=ids, attention_mask=mask).logits
    assert model.config._attn_implementation == "sdpa"  # restored
    assert torch.allclose(plain[0], switched[0], atol=1e-6)
    assert torch.allclose(plain[1, 2:], switched[1, 2:], atol=1e-6)


def test_which_models_take_the_ragged_layout() -> None:
    from mas_orchestra.local.ragged import supports_ragged

    assert supports_ragged(_model())
    assert not supports_ragged(_model(attn_implementation="eager"))
    assert not supports_ragged(object())


def test_the_batcher_refuses_an_unknown_layout() -> None:
    from mas_orchestra.local.batching import GenerationBatcher

    with pytest.raises(ValueError, match="auto, ragged, padded"):
        GenerationBatcher(_model(), None, "cpu", end_ids=set(), layout="paged")


def test_the_layout_comes_from_the_environment_when_not_given(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.local.batching import BatchLayoutError, GenerationBatcher
    from mas_orchestra.local.options import LocalEngineOptions

    monkeypatch.setenv("MAS_BATCH_LAYOUT", "padded")
    assert GenerationBatcher(_model(), None, "cpu", end_ids=set()).layout == "padded"
    assert GenerationBatcher(_model(), None, "cpu", end_ids=set(), layout="ragged").layout == "ragged"
    monkeypatch.setenv("MAS_BATCH_LAYOUT", "sideways")
    with pytest.raises(BatchLayoutError, match="MAS_BATCH_LAYOUT"):
        GenerationBatcher(_model(), None, "cpu", end_ids=set())
    with pytest.raises(BatchLayoutError, match="batch_layout"):
        LocalEngineOptions(batch_layout="sideways")


def test_forcing_the_ragged_layout_on_a_model_without_it_says_what_to_use() -> None:
    from mas_orchestra.local.batching import BatchLayoutError, GenerationBatcher

    batcher = GenerationBatcher(_model(attn_implementation="eager"), None, "cpu", end_ids=set(), layout="ragged")
    with pytest.raises(BatchLayoutError, match="'auto' or 'padded'"):
        batcher._new_batch()


def test_the_prefix_attention_of_the_flash_kernel_equals_the_plain_products() -> None:
    import torch

    from mas_orchestra.local.ragged import _prefix_attention, _prefix_attention_by_products

    generator = torch.Generator().manual_seed(0)
    queries, keys, values = (torch.randn(1, 3, n, 64, generator=generator) * 2 for n in (21, 700, 700))
    out, lse = _prefix_attention(queries, keys, values, 0.125)  # on a CPU: the flash kernel
    plain_out, plain_lse = _prefix_attention_by_products(queries.clone(), keys, values, 0.125)
    expected = torch.softmax(queries @ keys.transpose(2, 3) * 0.125, dim=-1) @ values
    assert lse.shape == (1, 3, 21)
    assert torch.allclose(out, expected, atol=1e-5) and torch.allclose(plain_out, expected, atol=1e-5)
    assert torch.allclose(lse, torch.logsumexp(queries @ keys.transpose(2, 3) * 0.125, dim=-1), atol=1e-4)
    assert torch.allclose(plain_lse, lse, atol=1e-4)
