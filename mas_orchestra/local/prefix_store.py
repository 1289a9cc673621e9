"""Long prompt prefixes kept on disk, so that a new process does not prefill the orchestrator's instructions again.

Every ``mas-orchestra run`` or ``eval`` starts a process whose first orchestrator call prefills the same
~1,150-token instructions (about 5 s on two CPU cores). :class:`PrefixStore` keeps the key/values of long
prompts (at least :data:`MIN_PERSISTED_TOKENS` tokens) as safetensors files, one folder per model identity, and
loads them into a model's in-memory :class:`~mas_orchestra.local.prefix_cache.PrefixCache` when the model is
loaded; a later prompt then prefills only what differs (the question).

* **Identity.** The folder is named by a hash of the in-memory identity (path, device, dtype, tokenizer) plus a
  fingerprint of the weight files (name, size, modification time): a model re-saved at the same path gets a new
  folder, so stale key/values of other weights are never served.
* **What is written.** A prompt is written only when no stored prefix covered at least half of it (so each run
  of the same instructions does not write another copy), atomically (a temporary file, then a rename).
* **Bounds.** ``MAS_PREFIX_STORE_MB`` (default 512; ``0`` turns the store off) per model folder; the least
  recently used files go first. ``MAS_PREFIX_STORE_DIR`` sets the root (default ``prefixes`` under
  :func:`mas_orchestra.environment.cache_root`). A file that cannot be read is deleted with a warning.

Imports torch and safetensors lazily.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from mas_orchestra import environment
from mas_orchestra.local.prefix_cache import budget_bytes

__all__ = [
    "MIN_PERSISTED_TOKENS",
    "PREFIX_STORE_DIR_ENV_VAR",
    "PREFIX_STORE_MB_ENV_VAR",
    "PrefixStore",
    "weights_fingerprint",
]

log = logging.getLogger(__name__)

PREFIX_STORE_DIR_ENV_VAR = "MAS_PREFIX_STORE_DIR"
PREFIX_STORE_MB_ENV_VAR = "MAS_PREFIX_STORE_MB"
DEFAULT_PREFIX_STORE_MB = 512
#: Shorter prompts are not written: their prefill is cheap next to reading a file.
MIN_PERSISTED_TOKENS = 512
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def weights_fingerprint(model_dir: str | Path) -> str:
    """Name, size and modification time of every weight file in ``model_dir`` (changes when the weights do).

    Args:
        model_dir: The model folder.

    Returns:
        ``name:size:mtime_ns`` of each weight file, ``;``-joined.
    """
    folder = Path(model_dir)
    parts = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.suffix in _WEIGHT_SUFFIXES and path.is_file():
            stat = path.stat()
            parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return ";".join(parts)


class PrefixStore:
    """The on-disk prefixes of one model (see the module docstring).

    Args:
        identity: The model's in-memory identity (path, device, dtype, tokenizer).
        fingerprint: A fingerprint of its weight files.
        root: The root folder (default: ``MAS_PREFIX_STORE_DIR``, else ``prefixes`` under the cache root).
        max_bytes: The bound on the model's folder (default: ``MAS_PREFIX_STORE_MB``, else 512 MiB; 0: off).
    """

    def __init__(self, identity: str, fingerprint: str, *, root: str | Path | None = None,
                 max_bytes: int | None = None) -> None:
        configured = environment.text(PREFIX_STORE_DIR_ENV_VAR, None if root is None else str(root))
        base = Path(configured).expanduser() if configured else environment.cache_root() / "prefixes"
        digest = hashlib.sha256(f"{identity}|{fingerprint}".encode()).hexdigest()[:24]
        self.folder = base / digest
        if max_bytes is None:
            max_bytes = budget_bytes(PREFIX_STORE_MB_ENV_VAR, DEFAULT_PREFIX_STORE_MB)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether the store is on (its byte budget is above 0)."""
        return self.max_bytes > 0

    def load_into(self, cache: Any) -> int:
        """Put every readable stored prefix into ``cache`` (a PrefixCache); returns how many were loaded.

        Args:
            cache: The in-memory prefix cache.

        Returns:
            How many prefixes were loaded.
        """
        if not self.enabled or not self.folder.is_dir():
            return 0
        from safetensors.torch import load_file

        loaded = 0
        files = sorted(self.folder.glob("*.safetensors"), key=lambda p: p.stat().st_mtime, reverse=True)
        for path in files:
            try:
                tensors = load_file(str(path))
                tokens = tensors.pop("tokens")
                count = len(tensors) // 2
                layers = [(tensors[f"k{i}"], tensors[f"v{i}"]) for i in range(count)]
            except Exception as exc:  # a truncated or foreign file: drop it, never fail a model load
                log.warning("prefix store: cannot read %s (%s); deleting it", path, exc)
                path.unlink(missing_ok=True)
                continue
            if cache.store(cache.identity, tokens, layers, persist=False):
                loaded += 1
                os.utime(path)  # recently used: evicted last
        return loaded

    def save(self, tokens: Any, layers: list[tuple[Any, Any]]) -> Path | None:
        """Write one prompt's key/values (atomically), then evict beyond the budget; returns the file.

        Args:
            tokens: The prompt's token ids.
            layers: Per layer ``(keys, values)``.

        Returns:
            The file written, or ``None`` when nothing was.
        """
        if not self.enabled or len(tokens) < MIN_PERSISTED_TOKENS:
            return None
        from safetensors.torch import save_file

        tensors = {"tokens": tokens.reshape(-1).cpu().contiguous()}
        for i, (keys, values) in enumerate(layers):
            tensors[f"k{i}"] = keys.detach().cpu().contiguous()
            tensors[f"v{i}"] = values.detach().cpu().contiguous()
        name = hashlib.sha256(tensors["tokens"].numpy().tobytes()).hexdigest()[:24] + ".safetensors"
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=self.folder, suffix=".part")
            os.close(handle)
            try:
                save_file(tensors, temp)
                os.replace(temp, self.folder / name)
            finally:
                Path(temp).unlink(missing_ok=True)
            self._evict()
        return self.folder / name

    def _evict(self) -> None:
        files = sorted(self.folder.glob("*.safetensors"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        while files and total > self.max_bytes:
            oldest = files.pop(0)
            total -= oldest.stat().st_size
            oldest.unlink(missing_ok=True)
