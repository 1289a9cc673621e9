"""A bound on in-flight model calls shared by every sub-agent call of a graph."""

from __future__ import annotations

import asyncio
import threading
import weakref

__all__ = ["CallLimiter"]


class CallLimiter:
    """A bound on in-flight model calls that works across event loops.

    ``asyncio.Semaphore`` binds to the first loop that waits on it; a compiled graph may be run from
    several loops (each ``asyncio.run``), so this keeps one semaphore per running loop.

    Args:
        limit: Most calls in flight per event loop (at least 1).

    Raises:
        ValueError: ``limit`` is below 1.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"concurrency limit must be >= 1, got {limit}")
        self.limit = limit
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._per_loop.get(loop)
            if sem is None:
                sem = self._per_loop[loop] = asyncio.Semaphore(self.limit)
            return sem

    async def __aenter__(self) -> None:
        await self._semaphore().acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._semaphore().release()
