"""Prefix caching for local generation: the key/value cache of a prompt prefix, computed once and reused.

Calls to one local model share long prompt prefixes: the orchestrator's instructions and agent list, a
sub-agent's system prompt, the same prompt for every rollout of a GRPO group. :class:`PrefixCache` keeps the
per-layer key/value tensors of recent prompts; a new prompt reuses the longest common token prefix with any
entry (cut to that length) and only the rest of the prompt is prefilled.

Entries are keyed by the model identity as well as the token ids: a cache is created per loaded model, and
every lookup also checks the identity string (model path, device, dtype, tokenizer), so a prefix computed by
another model or tokenizer is never served. Memory is bounded: least recently used entries are evicted once the
stored tensors exceed ``max_bytes`` (``MAS_PREFIX_CACHE_MB``, default 256; ``0`` turns caching off).

Tensors are treated as values: nothing writes into a stored tensor (the decode loop concatenates new tensors).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from mas_orchestra import environment
from mas_orchestra.errors import MasOrchestraError

__all__ = [
    "PREFIX_CACHE_ENV_VAR",
    "PrefixCache",
    "PrefixCacheError",
    "PrefixHit",
    "budget_bytes",
    "prefix_cache_bytes",
]

log = logging.getLogger(__name__)

PREFIX_CACHE_ENV_VAR = "MAS_PREFIX_CACHE_MB"
DEFAULT_PREFIX_CACHE_MB = 256
#: Prompts shorter than this are not stored (their prefill is cheap; entries would only churn the cache).
MIN_STORED_TOKENS = 32


class PrefixCacheError(MasOrchestraError, ValueError):
    """The prefix-cache size setting is not a non-negative number of MiB."""


def budget_bytes(env_var: str, default_mib: int) -> int:
    """A byte budget given in MiB by ``env_var`` (``default_mib`` when unset; ``0`` turns the feature off).

    Args:
        env_var: The variable holding MiB (declared in :mod:`mas_orchestra.environment`).
        default_mib: MiB when it is unset.

    Returns:
        Bytes.

    Raises:
        PrefixCacheError: Not a non-negative number (a ``ValueError`` naming the variable).
    """
    return environment.mebibytes(env_var, default_mib, error=PrefixCacheError)


def prefix_cache_bytes() -> int:
    """The byte budget from ``MAS_PREFIX_CACHE_MB`` (default 256 MiB; 0 disables the cache)."""
    return budget_bytes(PREFIX_CACHE_ENV_VAR, DEFAULT_PREFIX_CACHE_MB)


@dataclass
class PrefixHit:
    """The cached key/values of the first ``length`` prompt tokens (per layer ``(keys, values)``).

    Attributes:
        length: Prompt tokens covered.
        layers: Per layer, the ``(keys, values)`` tensors.
    """

    length: int
    layers: list[tuple[Any, Any]]


@dataclass
class _Entry:
    tokens: Any  # 1-D LongTensor on CPU
    layers: list[tuple[Any, Any]]  # per layer (keys, values), shape [1, heads, len(tokens), head_dim]
    nbytes: int


class PrefixCache:
    """A thread-safe LRU of prompt key/value caches for one model, bounded by bytes.

    Args:
        identity: The model's identity (path, device, dtype, tokenizer); every lookup checks it.
        max_bytes: The bound on the cached key/values.
    """

    def __init__(self, identity: str, max_bytes: int) -> None:
        self.identity = identity
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self._bytes = 0
        self._lock = threading.Lock()
        #: Where long prompts are also written for later processes (None: memory only).
        self.persister: Any = None

    @property
    def nbytes(self) -> int:
        """Bytes of key/value tensors held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every cached prefix."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def lookup(self, identity: str, tokens: Any, *, max_length: int) -> PrefixHit | None:
        """The longest cached prefix of ``tokens`` (at most ``max_length`` tokens), or ``None``.

        ``identity`` must equal the cache's own: a caller holding another model's cache gets nothing.

        Args:
            identity: The caller's model identity.
            tokens: The prompt's token ids.
            max_length: The longest prefix to reuse.

        Returns:
            The hit, or ``None``.
        """
        if identity != self.identity or self.max_bytes <= 0:
            return None
        import torch

        tokens = tokens.reshape(-1).cpu()
        best_key, best_len = None, 0
        with self._lock:
            for key, entry in self._entries.items():
                n = min(len(entry.tokens), len(tokens), max_length)
                if n <= best_len:
                    continue
                differs = torch.nonzero(entry.tokens[:n] != tokens[:n])
                common = int(differs[0, 0]) if len(differs) else n
                if common > best_len:
                    best_key, best_len = key, common
            if best_key is None or best_len == 0:
                self.misses += 1
                return None
            entry = self._entries[best_key]
            self._entries.move_to_end(best_key)
            self.hits += 1
            self.reused_tokens += best_len
            layers = [(k[:, :, :best_len], v[:, :, :best_len]) for k, v in entry.layers]
        return PrefixHit(length=best_len, layers=layers)

    def store(self, identity: str, tokens: Any, layers: list[tuple[Any, Any]], *, reused: int = 0,
              persist: bool = True) -> bool:
        """Keep the key/values of ``tokens`` (skipped when short, too large or already covered).

        With a :attr:`persister` (a :class:`~mas_orchestra.local.prefix_store.PrefixStore`) a kept prompt is
        also written to disk when ``persist`` and less than half of it came from the cache (``reused`` tokens).

        Args:
            identity: The caller's model identity.
            tokens: The prompt's token ids.
            layers: Per layer ``(keys, values)``.
            reused: How many prompt tokens came from the cache.
            persist: Whether the prompt may be written to the store.

        Returns:
            Whether it was kept.
        """
        if identity != self.identity or self.max_bytes <= 0 or len(tokens) < MIN_STORED_TOKENS:
            return False
        tokens = tokens.reshape(-1).cpu()
        n = len(tokens)
        kept = [(k[:, :, :n], v[:, :, :n]) for k, v in layers]
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kept)
        if nbytes > self.max_bytes:
            return False
        with self._lock:
            for entry in self._entries.values():  # an entry that already starts with these tokens covers them
                if len(entry.tokens) >= n and bool((entry.tokens[:n] == tokens).all()):
                    return False
            self._entries[self._next_key] = _Entry(tokens=tokens.clone(), layers=kept, nbytes=nbytes)
            self._next_key += 1
            self._bytes += nbytes
            while self._bytes > self.max_bytes and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes
        if persist and self.persister is not None and reused * 2 < n:
            try:
                self.persister.save(tokens, kept)
            except OSError as exc:  # a full or read-only disk costs the next process a prefill, nothing more
                log.warning("prefix store: cannot write (%s)", exc)
        return True
