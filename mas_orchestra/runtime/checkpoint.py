"""Checkpointers for compiled specs and Orchestra runs.

Any LangGraph checkpointer works with :func:`mas_orchestra.compile.compile_spec` and
:class:`mas_orchestra.runtime.Orchestra`. This module adds what makes them safe and convenient here:

- :func:`checkpoint_serde`: LangGraph's msgpack serializer with an explicit allowlist of the only custom
  types a checkpoint of ours holds (:data:`CHECKPOINT_TYPES`: a node's ``AgentResult`` and its usage
  records). With it, resuming logs no "unregistered type" warning and works unchanged when LangGraph's
  strict msgpack mode (``LANGGRAPH_STRICT_MSGPACK=true``) is on; any other custom type is refused.
- :func:`memory_checkpointer`, :func:`open_sqlite_checkpointer` (sync) and
  :func:`open_async_sqlite_checkpointer`: savers built with that serializer. The SQLite openers check the
  file first and raise :class:`~mas_orchestra.errors.CheckpointError` naming it when it is corrupt, not
  a database, a directory or locked; they never recreate or truncate a file, so nothing stored is lost.

SQLite needs the ``checkpoint`` extra (``langgraph-checkpoint-sqlite``); Postgres works through
``langgraph-checkpoint-postgres`` (``PostgresSaver`` / ``AsyncPostgresSaver``) passed as ``checkpointer=``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from mas_orchestra.errors import CheckpointError, MissingExtraError

__all__ = [
    "CHECKPOINT_TYPES",
    "check_sqlite_file",
    "checkpoint_serde",
    "memory_checkpointer",
    "open_async_sqlite_checkpointer",
    "open_sqlite_checkpointer",
]

# (module, class) of every non-builtin type our graph states hold. MASState.results holds AgentResult
# (whose fields hold Usage/ModelUsage); the end-to-end graph's state is plain JSON-like data only.
CHECKPOINT_TYPES: tuple[tuple[str, str], ...] = (
    ("agents.base", "AgentResult"),
    ("agents.base", "Usage"),
    ("agents.base", "ModelUsage"),
)

# How long a writer waits for another writer's lock before the run fails with CheckpointError. Generous because
# several runs may share one file (the studio runs every thread on one), and on a loaded machine one run's
# checkpoint write can hold the lock for seconds: at 5 s a resumed studio run failed under a busy CI machine.
DEFAULT_LOCK_TIMEOUT_S = 30.0

# SQLite's `synchronous` setting for checkpoint files (the savers use WAL journaling). NORMAL: a committed
# checkpoint survives a crash or kill -9 of the process; an OS crash or power cut may lose the last few
# (the file stays consistent). FULL also survives those, at about twice the per-node cost
# (benchmarks/checkpoint_overhead.py).
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
DEFAULT_SYNCHRONOUS = "NORMAL"


def _synchronous_pragma(synchronous: str) -> str:
    mode = str(synchronous).upper()
    if mode not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, got {synchronous!r}")
    return f"PRAGMA synchronous={mode}"


def checkpoint_serde() -> Any:
    """LangGraph's ``JsonPlusSerializer`` allowing exactly LangGraph's safe types plus :data:`CHECKPOINT_TYPES`.

    Resuming then logs no "unregistered type" warning, refuses any other custom type, and works under
    ``LANGGRAPH_STRICT_MSGPACK=true``.

    Returns:
        The serializer, for any LangGraph saver's ``serde=``.
    """
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_TYPES)


def memory_checkpointer() -> Any:
    """An ``InMemorySaver`` with :func:`checkpoint_serde` (threads live as long as the object).

    Returns:
        The saver.
    """
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver(serde=checkpoint_serde())


def _fix_for(problem: str) -> str:
    if "locked" in problem or "busy" in problem:
        return "another process holds a write lock on it: wait for it to finish, or use another --db file"
    return (
        "it is kept as it is (nothing was changed); move it aside and point --db / checkpointer= at a new "
        "file to start fresh"
    )


def as_checkpoint_error(path: str | Path, exc: BaseException) -> CheckpointError:
    """Turn a ``sqlite3`` error raised while using the store at ``path`` into a :class:`CheckpointError`.

    Args:
        path: The SQLite file.
        exc: The error ``sqlite3`` raised.

    Returns:
        The error naming the file, the problem and the fix (its cause is ``exc``).
    """
    problem = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        problem = f"corrupt or not a SQLite database ({problem})"
    error = CheckpointError(str(path), problem, _fix_for(problem))
    error.__cause__ = exc
    return error


def check_sqlite_file(path: str | Path, *, lock_timeout: float | None = None) -> Path:
    """Check that ``path`` can hold checkpoints: raise :class:`CheckpointError` naming it if not.

    A missing file is fine (it will be created). An existing one must be a readable SQLite database that
    no other process holds a write lock on for ``lock_timeout`` seconds. Nothing is written.

    Args:
        path: The SQLite file.
        lock_timeout: Seconds to wait for another writer's lock (default :data:`DEFAULT_LOCK_TIMEOUT_S`).

    Returns:
        ``path`` as a ``Path``.

    Raises:
        CheckpointError: A directory, a missing folder, a corrupt or non-SQLite file, or a locked one.
    """
    lock_timeout = DEFAULT_LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout
    target = Path(path)
    if target.is_dir():
        raise CheckpointError(str(target), "is a directory", "give a file path such as runs.sqlite")
    if not target.parent.exists():
        raise CheckpointError(str(target), f"folder {str(target.parent)!r} does not exist", "create it first")
    if not target.exists():
        return target
    try:
        conn = sqlite3.connect(str(target), timeout=lock_timeout)
    except sqlite3.Error as exc:
        raise as_checkpoint_error(target, exc) from exc
    try:
        # Reading the schema fails on a file that is not SQLite or whose header is damaged.
        conn.execute("SELECT name FROM sqlite_master").fetchall()
        # A reserved (write) lock that we release at once: fails if another writer holds the file.
        conn.execute("BEGIN IMMEDIATE")
        conn.rollback()
    except sqlite3.Error as exc:
        raise as_checkpoint_error(target, exc) from exc
    finally:
        conn.close()
    return target


#: Seconds between tries to switch a file to WAL journaling while another connection holds it.
_WAL_RETRY_S = 0.05
_WAL_PRAGMA = "PRAGMA journal_mode=WAL"


def _locked(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _switch_to_wal(conn: sqlite3.Connection, lock_timeout: float) -> None:
    """Put the file in WAL journaling (the savers' setup does it too), waiting up to ``lock_timeout`` seconds.

    Switching a file's journal mode needs it to itself, and SQLite answers "database is locked" at once, without
    its busy timeout, while another connection uses the file: two runs of one server opening a new file together
    failed so. Once the file is in WAL mode (it stays so), the setup's own switch has nothing to do.
    """
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            conn.execute(_WAL_PRAGMA)
            return
        except sqlite3.Error as exc:
            if not _locked(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(_WAL_RETRY_S)


async def _switch_to_wal_async(conn: Any, lock_timeout: float) -> None:
    """:func:`_switch_to_wal` on an ``aiosqlite`` connection, waiting without blocking the event loop."""
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            await conn.execute(_WAL_PRAGMA)
            return
        except sqlite3.Error as exc:
            if not _locked(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(_WAL_RETRY_S)


def _sqlite_extra() -> None:
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("SQLite checkpoints", "checkpoint", "langgraph-checkpoint-sqlite") from exc


@contextlib.contextmanager
def open_sqlite_checkpointer(
    path: str | Path, *, lock_timeout: float | None = None, synchronous: str = DEFAULT_SYNCHRONOUS
) -> Iterator[Any]:
    """A synchronous ``SqliteSaver`` on ``path`` (for ``graph.invoke`` / ``graph.get_state``), closed on exit.

    Args:
        path: The SQLite file (created when missing; an existing one is never recreated or truncated).
        lock_timeout: Seconds to wait for another writer's lock (default :data:`DEFAULT_LOCK_TIMEOUT_S`).
        synchronous: SQLite's ``synchronous`` setting, ``NORMAL`` (default: a committed checkpoint survives a
            process crash) or ``FULL`` (also a power cut, at about twice the per-node cost); see
            :data:`DEFAULT_SYNCHRONOUS`.

    Yields:
        The saver, with :func:`checkpoint_serde` as its serializer.

    Raises:
        CheckpointError: The file is a directory, corrupt, not SQLite, or locked by another writer.
        MissingExtraError: The ``checkpoint`` extra is not installed.
        ValueError: An unknown ``synchronous`` mode.
    """
    lock_timeout = DEFAULT_LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout
    pragma = _synchronous_pragma(synchronous)
    _sqlite_extra()
    from langgraph.checkpoint.sqlite import SqliteSaver

    target = check_sqlite_file(path, lock_timeout=lock_timeout)
    conn = sqlite3.connect(str(target), check_same_thread=False, timeout=lock_timeout)
    try:
        saver = SqliteSaver(conn, serde=checkpoint_serde())
        try:
            _switch_to_wal(conn, lock_timeout)
            conn.execute(pragma)
            saver.setup()
        except sqlite3.Error as exc:
            raise as_checkpoint_error(target, exc) from exc
        yield saver
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def open_async_sqlite_checkpointer(
    path: str | Path, *, lock_timeout: float | None = None, synchronous: str = DEFAULT_SYNCHRONOUS
) -> AsyncIterator[Any]:
    """An ``AsyncSqliteSaver`` on ``path`` bound to the running event loop, closed on exit.

    Args:
        path: The SQLite file (created when missing; an existing one is never recreated or truncated).
        lock_timeout: Seconds to wait for another writer's lock (default :data:`DEFAULT_LOCK_TIMEOUT_S`).
        synchronous: SQLite's ``synchronous`` setting, ``NORMAL`` (default: a committed checkpoint survives a
            process crash) or ``FULL`` (also a power cut, at about twice the per-node cost); see
            :data:`DEFAULT_SYNCHRONOUS`.

    Yields:
        The saver, with :func:`checkpoint_serde` as its serializer.

    Raises:
        CheckpointError: The file is a directory, corrupt, not SQLite, or locked by another writer.
        MissingExtraError: The ``checkpoint`` extra is not installed.
        ValueError: An unknown ``synchronous`` mode.
    """
    lock_timeout = DEFAULT_LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout
    pragma = _synchronous_pragma(synchronous)
    _sqlite_extra()
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    # The file check is synchronous SQLite: off the event loop, which servers (langgraph dev) keep non-blocking.
    target = await asyncio.to_thread(check_sqlite_file, path, lock_timeout=lock_timeout)
    try:
        conn = await aiosqlite.connect(str(target), timeout=lock_timeout)
    except sqlite3.Error as exc:
        raise as_checkpoint_error(target, exc) from exc
    try:
        saver = AsyncSqliteSaver(conn, serde=checkpoint_serde())
        try:
            await _switch_to_wal_async(conn, lock_timeout)
            await conn.execute(pragma)
            await saver.setup()
        except sqlite3.Error as exc:
            raise as_checkpoint_error(target, exc) from exc
        yield saver
    finally:
        await conn.close()
