"""The local engine's options object and its one generation path for a model whose cache cannot be batched."""

from __future__ import annotations

import importlib.util

import pytest

from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.local.packed_weights import DecodeWeightsError
from mas_orchestra.local.precision import PrecisionError
from mas_orchestra.local.prefix_cache import PREFIX_CACHE_ENV_VAR, PrefixCacheError
from mas_orchestra.local.threads import THREADS_ENV_VAR, TorchThreadsError


def test_explicit_options_are_checked_when_built() -> None:
    with pytest.raises(PrecisionError, match="prefill_precision='half'"):
        LocalEngineOptions(prefill_precision="half")
    with pytest.raises(DecodeWeightsError, match="decode_weights='int8'"):
        LocalEngineOptions(decode_weights="int8")
    with pytest.raises(TorchThreadsError, match="torch_threads=-1"):
        LocalEngineOptions(torch_threads=-1)
    with pytest.raises(PrefixCacheError, match="prefix_cache_mb=-1"):
        LocalEngineOptions(prefix_cache_mb=-1)
    with pytest.raises(ValueError, match="max_batch=0"):
        LocalEngineOptions(max_batch=0)
    with pytest.raises(AttributeError):
        LocalEngineOptions().device = "cuda"  # type: ignore[misc]  # frozen


def test_options_read_the_environment_when_used_and_explicit_values_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_ENV_VAR, "3")
    monkeypatch.setenv(PREFIX_CACHE_ENV_VAR, "2")
    options = LocalEngineOptions()
    assert options.threads() == 3 and options.prefix_cache_bytes() == 2 * 2**20
    assert LocalEngineOptions(torch_threads=0).threads() is None  # torch's own setting
    assert LocalEngineOptions(torch_threads=2, prefix_cache_mb=0).threads() == 2
    assert LocalEngineOptions(prefix_cache_mb=0).prefix_cache_bytes() == 0
    assert LocalEngineOptions().prefix_store_bytes() is None  # the store reads MAS_PREFIX_STORE_MB itself
    assert LocalEngineOptions(prefix_store_mb=1).prefix_store_bytes() == 2**20
    monkeypatch.setenv(PREFIX_CACHE_ENV_VAR, "lots")
    with pytest.raises(PrefixCacheError, match=PREFIX_CACHE_ENV_VAR):
        options.prefix_cache_bytes()


_HAVE_TRANSFORMERS = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


@pytest.mark.skipif(not _HAVE_TRANSFORMERS, reason="torch/transformers not installed")
def test_a_sliding_window_model_decodes_batched_with_generates_tokens() -> None:
    """Sliding-window layers go through the engine's one path: decoded on full-length layers, batched, the window
    kept by the attention mask, greedy tokens equal to ``generate``'s (prompts and replies longer than the window)."""
    import torch
    from transformers import DynamicCache, MistralConfig, MistralForCausalLM

    from mas_orchestra.local.batching import GenerationBatcher, GenerationRequest, supports_batching

    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=6, max_position_embeddings=128,
                           pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    layout = DynamicCache(config=config)
    assert {type(layer).__name__ for layer in layout.layers} == {"DynamicSlidingWindowLayer"}
    assert supports_batching(layout)

    class Tokenizer:
        pad_token_id = 0

        def decode(self, ids, skip_special_tokens=True):  # type: ignore[no-untyped-def]
            return " ".join(map(str, ids))

    prompts = [torch.tensor([[2, 5, 9, 11, 4, 7, 30, 21, 8]]), torch.tensor([[2, 40, 41, 3]])]
    expected = []
    with torch.inference_mode():
        for ids in prompts:
            out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=[99],
                                 attention_mask=torch.ones_like(ids))
            expected.append(out[0, ids.shape[1]:].tolist())
    batcher = GenerationBatcher(model, Tokenizer(), "cpu", end_ids={99})
    futures = batcher.run([GenerationRequest(input_ids=ids, max_new_tokens=12, threads=1) for ids in prompts])
    assert [future.result().token_ids for future in futures] == expected
    assert batcher.peak_batch == 2  # decoded together


def test_a_cache_the_engine_cannot_decode_is_refused_by_name() -> None:
    from types import SimpleNamespace

    from mas_orchestra.local.batching import supports_batching

    class LinearAttentionLayer:
        pass

    assert not supports_batching(SimpleNamespace(layers=[LinearAttentionLayer()]))
    assert not supports_batching(SimpleNamespace(layers=[]))
