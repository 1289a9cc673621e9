"""The served graphs' checkpoints on PostgreSQL: ``langgraph dev --config langgraph.postgres.json``.

``langgraph.postgres.json`` is ``langgraph.json`` plus ``"checkpointer": {"path": …:checkpointer}``, the LangGraph
server's custom-checkpointer hook: the server enters :func:`checkpointer` once at start-up and stores every
thread's checkpoints (the orchestration, the approval, every node result) in the database named by
``$MAS_POSTGRES_URL`` (``postgresql://user:password@host:5432/db``), through
:func:`mas_orchestra.runtime.postgres.open_async_postgres_checkpointer` (the project's serializer allowlist, the
schema check, errors naming the database without its password). The in-memory server keeps its own thread and
run records in memory; only the checkpoints live in PostgreSQL, so ``mas-orchestra`` workers and scripts can read
and resume the served threads there (see docs/guides/postgresql.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mas_orchestra import environment
from mas_orchestra.runtime.postgres import open_async_postgres_checkpointer

__all__ = ["POSTGRES_URL_ENV", "checkpointer"]

#: Environment variable holding the database URL the server's checkpoints go to.
POSTGRES_URL_ENV = "MAS_POSTGRES_URL"


@contextlib.asynccontextmanager
async def checkpointer() -> AsyncIterator[Any]:
    """An ``AsyncPostgresSaver`` on ``$MAS_POSTGRES_URL`` for the server's lifetime."""
    url = environment.text(POSTGRES_URL_ENV, default="") or ""
    if not url:
        raise ValueError(f"langgraph.postgres.json needs ${POSTGRES_URL_ENV}=postgresql://user:password@host:5432/db "
                         "(e.g. export MAS_POSTGRES_URL=$(bash scripts/start_postgres.sh))")
    async with open_async_postgres_checkpointer(url) as saver:
        yield saver
