"""PostgreSQL checkpoints: threads that several stateless worker processes share and resume.

``Orchestra(checkpointer="postgresql://user:password@host:5432/db")`` and ``mas-orchestra run --db
postgresql://…`` open a LangGraph ``AsyncPostgresSaver`` per run (like a SQLite path) with the project's
:func:`~mas_orchestra.runtime.checkpoint.checkpoint_serde` allowlist. Any worker that reaches the same database
can resume, approve or read any thread; a node's result is committed before the next superstep starts
(``durability="sync"``), so a worker killed with ``kill -9`` loses no finished node.

What can go wrong is said with the store named by host, port and database and the password replaced by ``***``:

- the server cannot be reached or refuses the login: :class:`CheckpointConnectionError`;
- the database's checkpoint schema was written by a newer ``langgraph-checkpoint-postgres`` than the one
  installed, or its tables are not LangGraph's: :class:`~mas_orchestra.errors.CheckpointError`;
- the connection is lost mid-run: :class:`CheckpointConnectionError`; every node finished before the loss is
  committed, so running the thread again once the database is back resumes it.

An older schema is migrated forward by LangGraph's own ``setup()`` (its migrations are additive).
Needs the ``postgres`` extra (``langgraph-checkpoint-postgres``, ``psycopg[binary]``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mas_orchestra.errors import CheckpointError, MissingExtraError

__all__ = [
    "CheckpointConnectionError",
    "is_database_error",
    "is_postgres_url",
    "open_async_postgres_checkpointer",
    "open_postgres_checkpointer",
    "postgres_error",
    "redact_url",
]

#: Seconds a worker waits for the server to accept a connection before the run fails.
DEFAULT_CONNECT_TIMEOUT_S = 5

_SCHEMES = ("postgresql://", "postgres://")


class CheckpointConnectionError(CheckpointError):
    """The PostgreSQL checkpoint store cannot be reached, refuses the login, or dropped the connection.

    The password never appears in the message.

    Args:
        url: The connection URL.
        problem: What went wrong.
        fix: What to do about it.

    Attributes:
        host: The server's host.
        port: The server's port.
        database: The database.
        url: The connection URL with its password replaced by ``***``.
    """

    def __init__(self, url: str, problem: str, fix: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 5432
        self.database = parts.path.lstrip("/") or (parts.username or "")
        self.url = redact_url(url)
        super().__init__(f"database {self.database!r} on {self.host}:{self.port} ({self.url})", problem, fix)


def is_postgres_url(value: Any) -> bool:
    """True for a ``postgresql://`` / ``postgres://`` connection URL.

    Args:
        value: Anything (a checkpointer argument).

    Returns:
        Whether it is such a URL.
    """
    return isinstance(value, str) and value.strip().lower().startswith(_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` with the password (if any) replaced by ``***``.

    Args:
        url: A connection URL.

    Returns:
        The URL, safe to print.
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address keeps its brackets
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _postgres_extra() -> None:
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            "PostgreSQL checkpoints", "postgres", "langgraph-checkpoint-postgres and psycopg[binary]"
        ) from exc


def is_database_error(exc: BaseException) -> bool:
    """True for an error raised by the PostgreSQL driver (without importing it when it is not installed).

    Args:
        exc: The error.
    """
    return any(cls.__module__.split(".")[0] == "psycopg" for cls in type(exc).__mro__)


def postgres_error(url: str, exc: BaseException) -> CheckpointError:
    """A driver error raised while using the store at ``url`` as a typed error naming the store.

    Args:
        url: The store's URL (its password is redacted from the message).
        exc: The driver's error.

    Returns:
        A :class:`CheckpointConnectionError` for the driver's ``OperationalError`` (no connection, a refused
        login, a lost connection), else a :class:`CheckpointError`.
    """
    import psycopg

    text = " ".join(str(exc).split()) or type(exc).__name__
    password = urlsplit(url).password
    if password:
        text = text.replace(password, "***")
    if isinstance(exc, psycopg.OperationalError):
        lowered = text.lower()
        if "password" in lowered or "authentication" in lowered or ("role" in lowered and "exist" in lowered):
            fix = "check the user name and password in the URL (or PGPASSWORD / ~/.pgpass)"
        elif "database" in lowered and "does not exist" in lowered:
            fix = "create the database first (createdb NAME) or name an existing one in the URL"
        else:
            fix = ("check that the server runs and accepts connections at that host and port; every node "
                   "finished before the connection was lost is stored: run the thread again once the database "
                   "is back and it resumes")
        error: CheckpointError = CheckpointConnectionError(url, f"{type(exc).__name__}: {text}", fix)
    else:
        error = CheckpointError(redact_url(url), f"{type(exc).__name__}: {text}",
                                "the database's checkpoint tables cannot be used; point the URL at another database")
    error.__cause__ = exc
    return error


def _schema_problem(version: int | None, known: int) -> str | None:
    if version is not None and version >= known:
        return (f"its checkpoint schema is version {version}, newer than the {known - 1} the installed "
                "langgraph-checkpoint-postgres knows (a newer release wrote it)")
    return None


_HAS_SCHEMA_QUERY = "SELECT to_regclass('checkpoint_migrations') IS NOT NULL AS present"
_SCHEMA_QUERY = "SELECT max(v) AS v FROM checkpoint_migrations"
_SCHEMA_FIX = ("upgrade with pip install -U langgraph-checkpoint-postgres, or point the URL at another database; "
               "nothing in it was changed")


@contextlib.contextmanager
def open_postgres_checkpointer(url: str, *, connect_timeout: int = DEFAULT_CONNECT_TIMEOUT_S) -> Iterator[Any]:
    """A synchronous ``PostgresSaver`` on ``url`` (schema checked and set up), closed on exit.

    Args:
        url: ``postgresql://user:password@host:5432/db`` (the password never appears in an error).
        connect_timeout: Seconds to wait for the server to accept the connection.

    Yields:
        The saver, with :func:`~mas_orchestra.runtime.checkpoint.checkpoint_serde` as its serializer.

    Raises:
        CheckpointConnectionError: The server cannot be reached, refuses the login, or the database is missing.
        CheckpointError: The database's checkpoint schema is newer than the installed package knows.
        MissingExtraError: The ``postgres`` extra is not installed.
    """
    _postgres_extra()
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from mas_orchestra.runtime.checkpoint import checkpoint_serde

    try:
        conn = psycopg.Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                                          connect_timeout=connect_timeout)
    except psycopg.Error as exc:
        raise postgres_error(url, exc) from exc
    try:
        saver = PostgresSaver(conn, serde=checkpoint_serde())  # type: ignore[arg-type]
        try:
            present = conn.execute(_HAS_SCHEMA_QUERY).fetchone()
            row = conn.execute(_SCHEMA_QUERY).fetchone() if present and present["present"] else None
            problem = _schema_problem(row["v"] if row else None, len(saver.MIGRATIONS))
            if problem:
                raise CheckpointError(redact_url(url), problem, _SCHEMA_FIX)
            saver.setup()
        except psycopg.Error as exc:
            raise postgres_error(url, exc) from exc
        yield saver
    finally:
        with contextlib.suppress(Exception):
            conn.close()


@contextlib.asynccontextmanager
async def open_async_postgres_checkpointer(
    url: str, *, connect_timeout: int = DEFAULT_CONNECT_TIMEOUT_S
) -> AsyncIterator[Any]:
    """An ``AsyncPostgresSaver`` on ``url`` bound to the running event loop (schema checked), closed on exit.

    Args:
        url: ``postgresql://user:password@host:5432/db`` (the password never appears in an error).
        connect_timeout: Seconds to wait for the server to accept the connection.

    Yields:
        The saver, with :func:`~mas_orchestra.runtime.checkpoint.checkpoint_serde` as its serializer.

    Raises:
        CheckpointConnectionError: The server cannot be reached, refuses the login, or the database is missing.
        CheckpointError: The database's checkpoint schema is newer than the installed package knows.
        MissingExtraError: The ``postgres`` extra is not installed.
    """
    _postgres_extra()
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    from mas_orchestra.runtime.checkpoint import checkpoint_serde

    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0,
                                                     row_factory=dict_row, connect_timeout=connect_timeout)
    except psycopg.Error as exc:
        raise postgres_error(url, exc) from exc
    try:
        saver = AsyncPostgresSaver(conn, serde=checkpoint_serde())  # type: ignore[arg-type]
        try:
            present = await (await conn.execute(_HAS_SCHEMA_QUERY)).fetchone()
            row = await (await conn.execute(_SCHEMA_QUERY)).fetchone() if present and present["present"] else None
            problem = _schema_problem(row["v"] if row else None, len(saver.MIGRATIONS))
            if problem:
                raise CheckpointError(redact_url(url), problem, _SCHEMA_FIX)
            await saver.setup()
        except psycopg.Error as exc:
            raise postgres_error(url, exc) from exc
        yield saver
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
