"""Keep a CPU training run's resident memory at what it uses, not at the highest it ever reached.

On glibc, a freed block goes back to the heap it came from; torch frees and reallocates tensors of hundreds of
MiB every step (activations, the rollouts' key/values), and with glibc's default the threshold above which a
block is mmapped (and so returned to the OS on free) grows with every large free, up to 32 MiB on 64-bit.
Blocks below it stay in the heap, fragment it, and the process keeps their pages: measured on the CPU learning
recipe, the resident size between steps stayed at ~7 GiB although a step needs far less at its start.

:func:`release_freed_memory` fixes the mmap threshold (so large tensors are always mmapped and their pages
returned when freed) and :func:`trim_heap` hands the heap's free pages back after each step
(``malloc_trim``). Both are no-ops where glibc is not the allocator (macOS, musl, jemalloc preloaded).

Returning every large block costs time where the same sizes are freed and allocated again and again: each fresh
mapping is zero-filled page by page. Decoding does exactly that (each pass allocates its key/value copies and logits
anew), so :func:`reuse_freed_memory` lifts the threshold for the duration of a block (the rollouts) and trims the
heap when it ends: the block's peak may hold freed blocks, the phase after it starts from a trimmed heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

__all__ = ["MMAP_THRESHOLD_BYTES", "release_freed_memory", "reuse_freed_memory", "trim_heap"]

log = logging.getLogger(__name__)

#: Blocks at least this large are mmapped: a 576-wide fp32 activation of ~450 tokens and up.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt parameter numbers from glibc's malloc.h
_M_TRIM_THRESHOLD = -1
#: While :func:`reuse_freed_memory` is active: glibc's own ceiling for its dynamic threshold on 64-bit.
REUSE_THRESHOLD_BYTES = 32 << 20
_applied_threshold: int | None = None  # what release_freed_memory set (None: glibc's defaults are in force)


@lru_cache(maxsize=1)
def _glibc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not all(hasattr(libc, fn) for fn in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return None  # not glibc
    return libc


def _set_thresholds(libc: Any, threshold: int) -> bool:
    """Set glibc's mmap and trim thresholds to ``threshold`` bytes (the two move together here); True if both took."""
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, threshold))


def release_freed_memory(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes (and the trim threshold with it); True if applied.

    Args:
        threshold: Blocks of at least this many bytes are mmapped, so freeing them returns them to the system.
    """
    libc = _glibc()
    if libc is None:
        return False
    applied = _set_thresholds(libc, int(threshold))
    if applied:
        global _applied_threshold
        _applied_threshold = int(threshold)
        log.info("glibc allocator: blocks >= %d KiB are mmapped and returned when freed", threshold // 1024)
    return applied


def trim_heap() -> bool:
    """Return the heap's free pages to the OS (``malloc_trim(0)``); True if glibc released any."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


@contextmanager
def reuse_freed_memory() -> Iterator[None]:
    """Within the block, blocks below 32 MiB are served from the heap again; at its end the threshold set by
    :func:`release_freed_memory` is restored and the heap trimmed. A no-op when that was never applied."""
    libc = _glibc()
    threshold = _applied_threshold
    if libc is None or threshold is None:
        yield
        return
    _set_thresholds(libc, REUSE_THRESHOLD_BYTES)
    try:
        yield
    finally:
        _set_thresholds(libc, threshold)
        libc.malloc_trim(0)
