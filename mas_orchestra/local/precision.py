"""Which precision a local model's prefill runs in: bf16 where the CPU multiplies bf16 natively.

A prompt's prefill is a large matrix multiply per layer; on a CPU with native bf16 instructions (AVX-512 BF16,
AMX) it runs faster in bf16 than in float32, while one-token decode steps, which are bound by reading the
weights, do not gain under autocast, which casts the weights at every step (measured side by side by
``benchmarks/batched_generation.py --parts precision``; a 4-bit model's decode steps gain from reading its
weights packed instead, :mod:`mas_orchestra.local.packed_weights`). So a
float32 model prefills long prompts under ``torch.autocast(bfloat16)`` and decodes in float32: the key/values
the prefill wrote are cast back to float32 before decoding (and before the prefix cache keeps them).

The choice, per request: ``HFChatModel(prefill_precision=...)``, else ``MAS_PREFILL_DTYPE``, else ``auto``.

* ``auto``: bf16 for a float32 model on a CPU with native bf16, the model's own precision otherwise;
* ``float32``: always the model's own precision (bit-for-bit what ``model.generate`` computes);
* ``bfloat16``: bf16 prefill on any CPU (slow where bf16 is emulated).

Measured on a CPU with native bf16 (AMD EPYC with AVX-512 BF16, 2 threads): the 1,287-token orchestrator prompt
prefilled in 1.67 s in bf16 against 2.21 s in float32 (0.76×), a decode step took 108 ms under bf16 autocast
against 68 ms in float32 (1.59×), and greedy text was the same. On a CPU without native bf16 (AMD EPYC, AVX2)
the bf16 prefill took 6.4× as long as float32 and a bf16 decode step 1.6× as long, which is why ``auto`` asks
for the CPU flag.

Only prompts with at least :data:`MIN_BF16_PREFILL_TOKENS` uncached tokens are prefilled in bf16 (a few
tokens gain nothing and pay the weights' cast). bf16 rounds the prompt's key/values to about three significant
digits, so sampled and even greedy text can differ from a float32 prefill; ``float32`` restores exactness.

Imports torch lazily.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from mas_orchestra import environment
from mas_orchestra.errors import MasOrchestraError

__all__ = [
    "KERNEL_CACHE_ENTRIES",
    "MIN_BF16_PREFILL_TOKENS",
    "PREFILL_DTYPE_ENV_VAR",
    "PREFILL_PRECISIONS",
    "PrecisionError",
    "bound_kernel_caches",
    "cast_cache",
    "cpu_has_native_bf16",
    "prefill_autocast",
    "read_setting",
    "resolve_prefill_dtype",
]

PREFILL_DTYPE_ENV_VAR = "MAS_PREFILL_DTYPE"
PREFILL_PRECISIONS: tuple[str, ...] = ("auto", "float32", "bfloat16")
MIN_BF16_PREFILL_TOKENS = 64
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


#: Entries each of PyTorch's CPU kernel caches keeps (ideep's ``LRU_CACHE_CAPACITY``, oneDNN's
#: ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``; both 1024 by default). bf16 matrix products go through oneDNN, whose
#: kernels are made and cached per shape: a training step's packed sequence has a new length every step, and a
#: forward and backward of 200 distinct lengths of one linear layer kept 423 MiB (2 threads, heap trimmed), with
#: both caches at 128 entries 118 MiB. 256: room for several training steps' new shapes (~40 a step) besides
#: the ones every step uses. Side by side (``benchmarks/grpo_step.py --cases after,kcache1024``) a wiring step
#: took 88.5 s at 256 and 83.7 s at 1024 (0.945x; not shown to be more than noise).
KERNEL_CACHE_ENTRIES = 256


def bound_kernel_caches(entries: int = KERNEL_CACHE_ENTRIES) -> None:
    """Bound the entries of PyTorch's ideep and oneDNN kernel caches, unless the user has set them.

    The libraries read the capacities when they first make a kernel: call this before the first bf16 product.
    A training run on a CPU does (its resident size grew by 35-40 MiB a step without it).

    Args:
        entries: Most cached kernels per cache.
    """
    for name in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY"):
        environment.prefer_library_default(name, str(int(entries)))


class PrecisionError(MasOrchestraError, ValueError):
    """A prefill precision setting is not one of the known values."""


@lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """True when this CPU multiplies bf16 natively (its flags list AVX-512 BF16 or AMX-BF16)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return any(flag in flags.split() for flag in _NATIVE_BF16_FLAGS)


def read_setting(setting: str | None, *, field: str, env_var: str, choices: tuple[str, ...],
                 error: type[MasOrchestraError], default: str = "auto") -> str:
    """``setting``, else ``env_var``'s value, else ``default``, lower-cased.

    Args:
        setting: The caller's value.
        field: The setting's name, for the message.
        env_var: The environment variable read when ``setting`` is ``None``.
        choices: The valid values.
        error: Raised, naming the field (or the variable) and the valid ``choices``, for any other value.
        default: The value when neither is set.
    """
    return environment.choice(env_var, setting, field=field, choices=choices, default=default, error=error)


def _setting(setting: str | None) -> str:
    return read_setting(setting, field="prefill_precision", env_var=PREFILL_DTYPE_ENV_VAR,
                        choices=PREFILL_PRECISIONS, error=PrecisionError)


def resolve_prefill_dtype(device: str, model_dtype: Any, setting: str | None = None) -> Any:
    """The torch dtype to prefill in (``torch.bfloat16``), or ``None`` for the model's own precision.

    Args:
        device: The model's device (only a CPU prefills in bf16).
        model_dtype: The model's dtype (only a float32 model prefills in bf16).
        setting: ``float32`` | ``bfloat16`` | ``auto`` (default: ``MAS_PREFILL_DTYPE``, else ``auto``: bf16 where
            the CPU has native bf16).
    """
    import torch

    value = _setting(setting)
    if value == "float32" or model_dtype != torch.float32 or not str(device).startswith("cpu"):
        return None
    if value == "bfloat16" or cpu_has_native_bf16():
        return torch.bfloat16
    return None


@contextlib.contextmanager
def prefill_autocast(dtype: Any) -> Iterator[None]:
    """Run the block under CPU autocast to ``dtype`` (nothing for ``None``).

    Args:
        dtype: The torch dtype, or ``None``.
    """
    if dtype is None:
        yield
        return
    import torch

    with torch.autocast(device_type="cpu", dtype=dtype):
        yield


def cast_cache(cache: Any, dtype: Any) -> None:
    """Cast every layer's keys and values of a transformers cache to ``dtype`` in place.

    Args:
        cache: The transformers cache.
        dtype: The torch dtype.
    """
    for layer in getattr(cache, "layers", []):
        # each on its own: under autocast the keys come out of the rotary embedding in float32, the values not
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and tensor.dtype != dtype:
                setattr(layer, name, tensor.to(dtype))
