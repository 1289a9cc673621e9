"""Every knob of the local engine in one frozen object: :class:`LocalEngineOptions`.

Each field left at ``None`` is read from its environment variable when it is used (explicit value > variable >
default, the rule of :mod:`mas_orchestra.environment`); nothing is read at import or at construction. The
per-request knobs (threads, prefix caching, jump-forward, prefill precision, decode weights) apply to each call;
the per-model ones (the prefix cache's and the prefix store's budgets, the store's folder, the batch size and
layout) are
fixed when a model's batcher is first made (:meth:`~mas_orchestra.local.engine.LocalEngine.submit`): the first
options that reach a loaded model decide them for it.

Imports no torch (the methods that need it import it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mas_orchestra import environment
from mas_orchestra.local.batching import BATCH_LAYOUTS, DEFAULT_MAX_BATCH, BatchLayoutError
from mas_orchestra.local.packed_weights import DECODE_WEIGHTS, DecodeWeightsError, decode_packed
from mas_orchestra.local.precision import PREFILL_PRECISIONS, PrecisionError, resolve_prefill_dtype
from mas_orchestra.local.prefix_cache import DEFAULT_PREFIX_CACHE_MB, PREFIX_CACHE_ENV_VAR, PrefixCacheError
from mas_orchestra.local.threads import TorchThreadsError, default_torch_threads

__all__ = ["LocalEngineOptions"]


@dataclass(frozen=True)
class LocalEngineOptions:
    """How the local engine runs a model (see the module docstring for when each field is read).

    Attributes:
        device: Where the model runs (``cpu``, ``cuda``, ``cuda:1`` …).
        torch_threads: Torch intra-op threads of this model's generations (restored afterwards); ``None``:
            :func:`~mas_orchestra.local.threads.default_torch_threads` (``MAS_TORCH_THREADS``, else
            ``OMP_NUM_THREADS``, else the usable cores divided by the processes per machine); ``0``: torch's own.
        prefix_caching: Reuse the key/values of a prompt prefix seen before
            (:mod:`~mas_orchestra.local.prefix_cache`).
        jump_forward: Append text a grammar forces in one forward pass.
        prefill_precision: ``auto`` | ``float32`` | ``bfloat16``; ``None``: ``MAS_PREFILL_DTYPE``, else ``auto``
            (:mod:`~mas_orchestra.local.precision`).
        decode_weights: ``auto`` | ``float32`` | ``int4``; ``None``: ``MAS_DECODE_WEIGHTS``, else ``auto``
            (:mod:`~mas_orchestra.local.packed_weights`).
        prefix_cache_mb: In-memory prefix-cache budget per model in MiB (``0``: off); ``None``:
            ``MAS_PREFIX_CACHE_MB``, else 256.
        prefix_store_mb: On-disk prefix-store budget per model in MiB (``0``: off); ``None``:
            ``MAS_PREFIX_STORE_MB``, else 512 (:mod:`~mas_orchestra.local.prefix_store`).
        prefix_store_dir: The store's folder; ``None``: ``MAS_PREFIX_STORE_DIR``, else ``<cache root>/prefixes``.
        max_batch: Rows decoded together at most.
        batch_layout: ``auto`` | ``ragged`` | ``padded``: how the decode batch lays out its rows
            (:mod:`~mas_orchestra.local.ragged`); ``None``: ``MAS_BATCH_LAYOUT``, else ``auto``.
    """

    device: str = "cpu"
    torch_threads: int | None = None
    prefix_caching: bool = True
    jump_forward: bool = True
    prefill_precision: str | None = None
    decode_weights: str | None = None
    prefix_cache_mb: float | None = None
    prefix_store_mb: float | None = None
    prefix_store_dir: str | None = None
    max_batch: int = DEFAULT_MAX_BATCH
    batch_layout: str | None = None

    def __post_init__(self) -> None:
        """Reject explicit values of the wrong form at once (the message names the field)."""
        if self.prefill_precision is not None:
            _check(self.prefill_precision, "prefill_precision", PREFILL_PRECISIONS, PrecisionError)
        if self.decode_weights is not None:
            _check(self.decode_weights, "decode_weights", DECODE_WEIGHTS, DecodeWeightsError)
        if self.torch_threads is not None and self.torch_threads < 0:
            raise TorchThreadsError(f"torch_threads={self.torch_threads!r}: use a positive count, 0 or None")
        for name in ("prefix_cache_mb", "prefix_store_mb"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise PrefixCacheError(f"{name}={value!r}: a size in MiB (>= 0); 0 turns it off")
        if self.batch_layout is not None:
            _check(self.batch_layout, "batch_layout", BATCH_LAYOUTS, BatchLayoutError)
        if self.max_batch < 1:
            raise ValueError(f"max_batch={self.max_batch!r}: at least 1 row")

    def threads(self) -> int | None:
        """Torch threads for a generation (``None``: leave torch's setting)."""
        return default_torch_threads() if self.torch_threads is None else (self.torch_threads or None)

    def prefill_dtype(self, device: str, model_dtype: Any) -> Any:
        """The dtype prompts are prefilled in on ``device`` (``torch.bfloat16``), or ``None`` for the model's own.

        Args:
            device: Where the model runs.
            model_dtype: The model's dtype.

        Returns:
            A torch dtype, or ``None``.
        """
        return resolve_prefill_dtype(device, model_dtype, self.prefill_precision)

    def packed(self, model: Any, device: str) -> bool:
        """Whether decode steps of ``model`` on ``device`` read its packed int4 weights (packs it on first use).

        Args:
            model: The transformers model.
            device: Where it runs.

        Returns:
            True when decode steps run packed.
        """
        return decode_packed(model, device, self.decode_weights)

    def prefix_cache_bytes(self) -> int:
        """The in-memory prefix-cache budget in bytes (``0``: caching off)."""
        explicit = None if self.prefix_cache_mb is None else int(self.prefix_cache_mb * 2**20)
        return environment.mebibytes(PREFIX_CACHE_ENV_VAR, DEFAULT_PREFIX_CACHE_MB, explicit, error=PrefixCacheError)

    def prefix_store_bytes(self) -> int | None:
        """The on-disk prefix-store budget in bytes, or ``None`` for ``MAS_PREFIX_STORE_MB`` (else 512 MiB)."""
        return None if self.prefix_store_mb is None else int(self.prefix_store_mb * 2**20)


def _check(value: str, field: str, choices: tuple[str, ...], error: type[Exception]) -> None:
    if value.strip().lower() not in choices:
        raise error(f"{field}={value!r}: valid values are {', '.join(choices)}")
