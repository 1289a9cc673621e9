"""Small guards of the runtime's public API: a question must be text, and the sync wrappers must not run inside
an event loop."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["check_question", "run_sync"]


def check_question(question: Any) -> None:
    """Refuse a question that is not text before anything runs.

    Args:
        question: What the caller passed as the task.

    Raises:
        TypeError: ``question`` is not a ``str``.
    """
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous code (the sync wrappers of the async API).

    Args:
        coro: The coroutine; it is closed unrun when refused.

    Returns:
        The coroutine's result.

    Raises:
        RuntimeError: Called inside a running event loop (use the ``a``-prefixed method there).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called the sync API inside a running event loop; use `await orchestra.arun(...)`")
