"""Keep a CPU training run's resident memory at what it uses, not at the highest it ever reached.

On glibc, a freed block goes back to the heap it came from; torch frees and reallocates tensors of hundreds of
MiB every step (activations, the rollouts' key/values), and with glibc's default the threshold above which a
block is mmapped (and so returned to the OS on free) grows with every large free, up to 32 MiB on 64-bit.
Blocks below it stay in the heap, fragment it, and the process keeps their pages: measured on the CPU learning
recipe, the resident size between steps stayed at ~7 GiB although a step needs far less at its start.

:func:`release_freed_memory` fixes the mmap threshold (so large tensors are always mmapped and their pages
returned when freed) and :func:`trim_heap` hands the heap's free pages back after each step
(``malloc_trim``). Both are no-ops where glibc is not the allocator (macOS, musl, jemalloc preloaded).

Trimming costs time where the heap shrinks and grows again and again: each page handed back and touched again
is a fresh zero-filled page. Decoding does exactly that (every pass allocates and frees its small temporaries),
so :func:`reuse_freed_memory` lifts the trim threshold for the duration of a block (the rollouts) and trims
the heap when it ends. It leaves the mmap threshold where it is: the batch's key/value buffers (10–15 MiB per
layer) are still mmapped, so the heap never holds them. Lifting the mmap threshold as well (to glibc's 32 MiB
ceiling, as this block once did) put those buffers on the heap, where regrowing and replacing them fragmented
it. Measured on the CPU wiring recipe (2 steps each, separate runs on an idle machine, training/README.md "Time
and memory on a CPU"): both thresholds lifted, the second step's rollouts peaked at 3,018 MiB and the training
phases after them at 3,355 MiB; nothing lifted, 2,423 and 2,297 MiB but rollouts took 61 s instead of 42–48 s;
the trim threshold only, rollouts at 45–48 s (on the recipe's depth-3-only variant).
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
#: The trim threshold while :func:`reuse_freed_memory` is active (glibc's ceiling for its dynamic thresholds).
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
    """Within the block, freed heap memory is kept for reuse (trim threshold at 32 MiB); at its end the trim
    threshold set by :func:`release_freed_memory` is restored and the heap trimmed. Large blocks stay mmapped.
    A no-op when :func:`release_freed_memory` was never applied."""
    libc = _glibc()
    threshold = _applied_threshold
    if libc is None or threshold is None:
        yield
        return
    libc.mallopt(_M_TRIM_THRESHOLD, REUSE_THRESHOLD_BYTES)
    try:
        yield
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, threshold)
        libc.malloc_trim(0)
