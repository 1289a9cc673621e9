"""Tools of MCP servers, through ``langchain-mcp-adapters`` (extra ``mcp``): stdio and streamable HTTP.

The configuration is the usual ``{"mcpServers": {name: {...}}}`` shape (a dict or a JSON file): an entry with
``command`` (and ``args``, ``env``, ``cwd``) is a stdio server, one with ``url`` a streamable-HTTP server
(``"transport": "sse"`` for the older SSE transport). Each server's tools are listed when they are loaded,
within a time bound, so a server that does not start or does not answer is a :class:`McpServerError` naming
it — before anything runs.

Inside a run (:func:`mcp_run_sessions`, which :class:`~mas_orchestra.runtime.Orchestra` enters for every run)
each stdio server is started once, on its first call, and its session serves every later call of the run; the
run's end (or its cancellation) closes the sessions, which stops the server processes, so a run leaves no child
process behind. Outside a run, and for HTTP servers, each call opens its own session (the adapters' default).
Either way a server that dies mid-run fails that call only (the tool agent shows the failure as an
observation) and the next call starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool

from agents.errors import MasOrchestraError, MissingExtraError
from agents.tools.toolset import ToolsetError

__all__ = [
    "DEFAULT_LIST_TIMEOUT", "McpServerError", "McpSessions", "aload_mcp_tools", "load_mcp_tools", "mcp_connections",
    "mcp_run_sessions",
]

log = logging.getLogger(__name__)

#: Seconds a server gets to start and list its tools.
DEFAULT_LIST_TIMEOUT = 30.0


class McpServerError(MasOrchestraError, RuntimeError):
    """An MCP server could not be started or did not list its tools.

    Args:
        server: The server's name in the configuration.
        problem: What went wrong.

    Attributes:
        server: The server's name.
    """

    def __init__(self, server: str, problem: str) -> None:
        super().__init__(f"MCP server {server!r}: {problem}")
        self.server = server


def mcp_connections(config: Mapping[str, Any] | str | Path) -> dict[str, dict[str, Any]]:
    """The adapters' connection dicts of a ``{"mcpServers": {...}}`` configuration (dict or JSON file path).

    Args:
        config: The configuration, or a JSON file holding it.

    Returns:
        Server name → connection dict (``stdio`` or ``streamable_http``/``sse``).

    Raises:
        ToolsetError: A missing or unreadable file, or a malformed configuration (no servers, an entry without
            ``command`` or ``url``).
    """
    if isinstance(config, (str, Path)):
        path = Path(config)
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ToolsetError(f"MCP configuration {str(path)!r}: no such file") from None
        except (OSError, ValueError) as exc:
            raise ToolsetError(f"MCP configuration {str(path)!r}: not readable JSON ({exc})") from None
    if not isinstance(config, Mapping):
        raise ToolsetError(f"MCP configuration must be a JSON object, got {type(config).__name__}")
    servers = config.get("mcpServers", config)
    if not isinstance(servers, Mapping) or not servers:
        raise ToolsetError('MCP configuration names no servers; write {"mcpServers": {"name": {"command": ...}}}')
    connections: dict[str, dict[str, Any]] = {}
    for name, entry in servers.items():
        if not isinstance(entry, Mapping):
            raise ToolsetError(f"MCP server {name!r}: its entry must be an object with 'command' or 'url'")
        entry = dict(entry)
        transport = str(entry.pop("transport", entry.pop("type", "")) or "").lower()
        if "command" in entry:
            args = entry.get("args", [])
            if not isinstance(entry["command"], str) or not isinstance(args, list):
                raise ToolsetError(f"MCP server {name!r}: 'command' must be a string and 'args' a list")
            conn: dict[str, Any] = {"transport": "stdio", "command": entry["command"], "args": [str(a) for a in args]}
            for key in ("env", "cwd"):
                if entry.get(key) is not None:
                    conn[key] = entry[key]
        elif "url" in entry:
            kind = "sse" if transport == "sse" else "streamable_http"
            conn = {"transport": kind, "url": str(entry["url"])}
            if entry.get("headers"):
                conn["headers"] = dict(entry["headers"])
        else:
            raise ToolsetError(f"MCP server {name!r}: give 'command' (stdio) or 'url' (streamable HTTP)")
        connections[str(name)] = conn
    return connections


def _reason(exc: BaseException) -> str:
    """The innermost readable cause of a failure (task groups wrap it in exception groups)."""
    while getattr(exc, "exceptions", None):  # an ExceptionGroup (a builtin from Python 3.11)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False
    return True


def _ensure_server_stderr() -> None:
    """Give stdio servers a stderr with a file descriptor.

    ``mcp``'s ``stdio_client`` hands its ``errlog`` default — ``sys.stderr`` as it was when ``mcp`` was
    imported — to the server process, and the adapters do not pass one. Under Jupyter (and pytest's capture)
    that stream has no file descriptor and every server start fails with ``fileno``; the process's own stderr
    (or, without one, the null device) is used instead.
    """
    from mcp.client import stdio

    function = inspect.unwrap(stdio.stdio_client)  # under its asynccontextmanager wrapper
    defaults = function.__defaults__ or ()
    if defaults and not _has_fileno(defaults[0]):
        fallback = sys.__stderr__ if _has_fileno(sys.__stderr__) else open(os.devnull, "w")  # noqa: SIM115
        function.__defaults__ = (fallback,)


class McpSessions:
    """The stdio sessions of one run: one per server, started on its first call, all closed by :meth:`aclose`.

    Each session lives in a task of its own (the MCP client's streams must be opened and closed by the same
    task), so calls from any of the run's tasks share it and closing it never depends on which task asks.
    A session whose call fails is closed, and the server's next call starts it again.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[asyncio.Future[Any], asyncio.Event, asyncio.Task[None]]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.started = 0  # server processes started by this run (for tests and benchmarks)

    async def call(self, key: str, connection: Mapping[str, Any], tool: str, arguments: dict[str, Any]) -> Any:
        """Call ``tool`` on the session of ``key`` (started with ``connection`` when there is none).

        Args:
            key: Names the session (one server process per key).
            connection: How to start the server, when the session is new.
            tool: The tool's name.
            arguments: The tool's arguments.

        Returns:
            The tool's result. When the call fails, the session is dropped (the next call starts a fresh one)
            and the error re-raised.
        """
        session = await self._session(key, connection)
        try:
            return await session.call_tool(tool, arguments)
        except BaseException:
            # A dead, confused or still busy (timed-out call) server: closed in the background, and the next
            # call starts a fresh one; the run's end waits for the closing.
            self._drop(key)
            raise

    async def _session(self, key: str, connection: Mapping[str, Any]) -> Any:
        if self._closed:
            raise RuntimeError("the run's MCP sessions are closed")
        entry = self._sessions.get(key)
        if entry is None:
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            stop = asyncio.Event()
            task = asyncio.create_task(self._own(connection, ready, stop), name=f"mcp session {key}")
            entry = self._sessions[key] = (ready, stop, task)
            self.started += 1
        try:
            return await asyncio.shield(entry[0])
        except BaseException:
            self._drop(key)
            raise

    @staticmethod
    async def _own(connection: Mapping[str, Any], ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        from langchain_mcp_adapters.sessions import create_session

        try:
            async with create_session(dict(connection)) as session:  # type: ignore[arg-type]
                await session.initialize()
                ready.set_result(session)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(f"session stopped: {exc!r}"))
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise

    def _drop(self, key: str) -> None:
        """Forget ``key``'s session and let its task close it (the process stops); :meth:`aclose` waits."""
        entry = self._sessions.pop(key, None)
        if entry is None:
            return
        ready, stop, task = entry
        stop.set()
        if ready.done() and not ready.cancelled():
            ready.exception()  # retrieved: no "exception was never retrieved" warning
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self, timeout: float = 10.0) -> None:
        """Close every session and wait until their server processes have stopped; later calls raise.

        Args:
            timeout: Seconds to wait for the sessions to close; those still open are then cancelled (their
                processes killed), with as long again to wait.
        """
        self._closed = True
        for key in list(self._sessions):
            self._drop(key)
        pending = list(self._closing)
        if not pending:
            return
        done, late = await asyncio.wait(pending, timeout=timeout)
        for task in late:  # a session that does not close in time is cancelled (its process is killed)
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=timeout)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.debug("MCP session %s ended with %r", task.get_name(), task.exception())


_RUN_SESSIONS: contextvars.ContextVar[McpSessions | None] = contextvars.ContextVar("mcp_run_sessions", default=None)


@contextlib.asynccontextmanager
async def mcp_run_sessions() -> AsyncIterator[McpSessions]:
    """Share one session per stdio MCP server among the calls made inside this block (a run), and close them
    all when it ends, however it ends. Nested blocks share the outer one's sessions."""
    current = _RUN_SESSIONS.get()
    if current is not None:
        yield current
        return
    sessions = McpSessions()
    token = _RUN_SESSIONS.set(sessions)
    try:
        yield sessions
    finally:
        with contextlib.suppress(ValueError):  # closed from another context (a generator finalised elsewhere)
            _RUN_SESSIONS.reset(token)
        await asyncio.shield(sessions.aclose())


def _run_session_interceptor(name: str, connection: Mapping[str, Any]) -> Any:
    """The adapters' tool-call hook of one server: inside a run, its stdio calls go to the run's session."""
    key = f"{name}:{json.dumps(connection, sort_keys=True, default=str)}"

    async def intercept(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        sessions = _RUN_SESSIONS.get()
        if sessions is None or connection.get("transport") != "stdio" or request.headers:
            return await handler(request)
        return await sessions.call(key, connection, request.name, request.args)

    return intercept


async def aload_mcp_tools(
    config: Mapping[str, Any] | str | Path, *, timeout: float = DEFAULT_LIST_TIMEOUT
) -> list[BaseTool]:
    """Start each configured server, list its tools within ``timeout`` seconds, and return them all.

    Args:
        config: A ``{"mcpServers": {name: {"command": …, "args": […]} | {"url": …}}}`` dict or JSON file path.
        timeout: Seconds each server may take to start and list its tools.

    Returns:
        The servers' tools as LangChain tools (each call opens its own session).

    Raises:
        McpServerError: A server did not start or list its tools in time (the message names it).
        MissingExtraError: The ``mcp`` extra is not installed.
    """
    connections = mcp_connections(config)
    try:
        from langchain_mcp_adapters.client import MultiServerMCPClient
    except ImportError as exc:
        raise MissingExtraError("MCP tools", "mcp", "langchain-mcp-adapters") from exc
    _ensure_server_stderr()
    tools: list[BaseTool] = []
    for name, conn in connections.items():
        client = MultiServerMCPClient({name: conn}, tool_interceptors=[_run_session_interceptor(name, conn)])  # type: ignore[dict-item]
        try:
            listed = await asyncio.wait_for(client.get_tools(server_name=name), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            raise McpServerError(name, f"did not start and list its tools within {timeout:g} s") from None
        except Exception as exc:
            raise McpServerError(name, f"could not be started or listed ({_reason(exc)}); check its "
                                       f"command/url: {json.dumps(conn, default=str)[:300]}") from None
        for tool in listed:
            # The adapters turn a tool's error result into ordinary content; raised instead, it is recorded as a
            # failed call (the agent log, the run's tool_errors) and still shown to the model as the observation.
            tool.handle_tool_error = False
        tools.extend(listed)
    return tools


def load_mcp_tools(config: Mapping[str, Any] | str | Path, *, timeout: float = DEFAULT_LIST_TIMEOUT) -> list[BaseTool]:
    """:func:`aload_mcp_tools` from synchronous code (inside a running event loop it uses a worker thread).

    Args:
        config: A ``{"mcpServers": {name: {"command": …, "args": […]} | {"url": …}}}`` dict or JSON file path.
        timeout: Seconds each server may take to start and list its tools.

    Returns:
        The servers' tools as LangChain tools (each call opens its own session).

    Raises:
        McpServerError: A server did not start or list its tools in time (the message names it).
        MissingExtraError: The ``mcp`` extra is not installed.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aload_mcp_tools(config, timeout=timeout))
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["tools"] = asyncio.run(aload_mcp_tools(config, timeout=timeout))
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, name="mcp-tools", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return list(box["tools"])
