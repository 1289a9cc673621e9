"""The studio's ASGI app (Starlette): the page, its static assets, JSON routes and server-sent events.

``create_app(runs=[...], db=..., data=[...])`` builds it; ``app`` (module level) is the same app configured from
the environment (``MAS_STUDIO_RUNS``: folders separated by ``os.pathsep``, ``MAS_STUDIO_DB``, ``MAS_STUDIO_DATA``)
for ASGI servers that import an app by name, e.g. ``"http": {"app": "mas_orchestra/studio/app.py:app"}`` in
``langgraph.json``. Routes name run folders and records by number and threads by id; no route takes a path.

Every route is wrapped by :class:`~mas_orchestra.studio.security.Guarded` (token, Host, Origin, content type,
body size, security headers; see :mod:`mas_orchestra.studio.security`): the page ``/`` needs the token once
(``/?token=...`` sets the cookie and redirects to ``/``), ``/api/*`` needs it on every request, ``/static/*`` is
public (our own HTML/JS/CSS, no data). Threads are only read by GETs; ``POST /api/runs/{id}/open`` loads a
stored one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from mas_orchestra import environment
from mas_orchestra.errors import MissingExtraError
from mas_orchestra.models.policy import ModelPolicy
from mas_orchestra.models.resolve import MODEL_FORMS
from mas_orchestra.registry import default_registry
from mas_orchestra.studio.browse import RowFilter, RunFolder, open_run_folders
from mas_orchestra.studio.common import StudioInputError
from mas_orchestra.studio.demo import DEMO_ORCHESTRATOR
from mas_orchestra.studio.graph import graph_of
from mas_orchestra.studio.live import LiveRuns, RunRequest, validate_edit
from mas_orchestra.studio.samples import load_samples
from mas_orchestra.studio.security import TOKEN_ENV, AccessPolicy, Guarded, StudioLimits, new_token, studio_model_policy

try:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import (
        FileResponse,
        HTMLResponse,
        JSONResponse,
        RedirectResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Mount, Route, request_response
    from starlette.staticfiles import StaticFiles
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the studio web app", "studio", "starlette") from exc

__all__ = ["DEFAULT_DB", "STATIC", "create_app"]  # and the lazily built ``app`` (see the module docstring)

STATIC = Path(__file__).parent / "static"
DEFAULT_DB = "studio.sqlite"
_KEEPALIVE_S = 15.0
_NO_TOKEN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mas-orchestra studio</title>
</head><body><h1>mas-orchestra studio</h1><p>This page needs the studio's token. Open the URL that
<code>mas-orchestra studio</code> printed when it started: it ends in <code>/?token=&hellip;</code>.</p>
<p>{detail}</p></body></html>"""


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status)


async def _body(request: Request) -> Any:
    try:
        return await request.json()
    except StudioInputError:  # the body limit (413), raised while the body streams in
        raise
    except (ValueError, UnicodeDecodeError):
        raise StudioInputError("the request body must be JSON") from None


def _int(params: Any, name: str, default: int | None = None) -> int | None:
    value = params.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise StudioInputError(f"query parameter {name}={value!r} must be an integer") from None


class Studio:
    """The state behind the routes: live threads, run folders and samples.

    Args:
        runs: Run folders to browse (or folders of them).
        db: The checkpoint file of the live threads.
        data: JSONL data files whose rows join the samples.
        access: The token and host checks.
        models: The model policy.
        limits: The studio's bounds.
    """

    def __init__(self, runs: Sequence[str | os.PathLike[str]], db: str | os.PathLike[str],
                 data: Sequence[str | os.PathLike[str]], access: AccessPolicy, models: ModelPolicy,
                 limits: StudioLimits) -> None:
        self.access = access
        self.limits = limits
        self.folders = open_run_folders(list(runs))
        self.samples = load_samples(data)
        self.live = LiveRuns(db, policy=models, limits=limits)
        self.streams = 0  # event streams open now (at most limits.max_streams)

    def folder(self, request: Request) -> RunFolder:
        """The run folder a request's ``{folder}`` path parameter names (``StudioInputError`` 404 for none).

        Args:
            request: The HTTP request.
        """
        number = request.path_params["folder"]
        if not 0 <= number < len(self.folders):
            raise StudioInputError(f"no run folder {number}; the studio was started with {len(self.folders)}",
                                   status=404)
        return self.folders[number]

    # -- routes -------------------------------------------------------------------------------

    # File and SQLite reads run in worker threads: the event loop stays free for the live streams (and the
    # LangGraph dev server, which flags blocking calls on its loop, accepts the app).

    async def index(self, request: Request) -> Response:
        """``GET /``: the page; a ``?token=`` sets the token cookie and redirects (401 pages without a valid token).

        Args:
            request: The HTTP request (``?token=`` query parameter, headers, cookies).
        """
        given = request.query_params.get("token")
        if given is not None:
            if not self.access.token_matches(given):
                return HTMLResponse(_NO_TOKEN_PAGE.format(detail="The token in this URL is not this studio's "
                                                          "(it changes at every start unless --token is given)."),
                                    status_code=401)
            # The cookie carries the token from now on; the redirect drops it from the address bar and history.
            response = RedirectResponse("/", status_code=303)
            response.headers["set-cookie"] = self.access.cookie_header()
            response.headers["cache-control"] = "no-store"
            return response
        if not self.access.authorized(dict(request.headers), dict(request.cookies)):
            return HTMLResponse(_NO_TOKEN_PAGE.format(detail=""), status_code=401)
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def config(self, request: Request) -> Response:
        """``GET /api/config``: agent kinds, model forms and allowed models, limits and current load, for the page.

        Args:
            request: The HTTP request (unused).
        """
        return _json({
            "agents": [{"name": k.name, "block": k.block, "needs_search": k.needs_search}
                       for k in default_registry.kinds()],
            "model_forms": list(MODEL_FORMS), "demo_orchestrator": DEMO_ORCHESTRATOR,
            "db": str(self.live.db), "folders": len(self.folders),
            "allowed_models": list(self.live.policy.patterns),
            "limits": {"max_body_bytes": self.limits.max_body_bytes, "max_live_runs": self.limits.max_live_runs,
                       "max_streams": self.limits.max_streams, "max_run_timeout_s": self.limits.max_run_timeout_s,
                       "keep_finished": self.limits.keep_finished},
            "load": {"executing": self.live.executing, "streams": self.streams, "in_memory": self.live.in_memory},
        })

    async def samples_route(self, request: Request) -> Response:
        """``GET /api/samples``: the sample questions.

        Args:
            request: The HTTP request (unused).
        """
        return _json(self.samples)

    async def validate(self, request: Request) -> Response:
        """``POST /api/validate``: check an edited spec against a thread's Orchestra; its graph or its problems.

        Args:
            request: The HTTP request (JSON body: ``{"spec": text, "thread_id": id}``).
        """
        body = await _body(request)
        if not isinstance(body, dict):
            raise StudioInputError("send {\"spec\": text, \"thread_id\": id}")
        live = await self.live.get(str(body.get("thread_id", "")))
        orchestra = await self.live.orchestra_for(live.request)
        try:
            spec = validate_edit(body.get("spec"), orchestra)
        except StudioInputError as exc:
            return _json({"ok": False, "problems": exc.problems})
        return _json({"ok": True, "problems": [], "graph": graph_of(spec)})

    async def start_run(self, request: Request) -> Response:
        """``POST /api/runs``: start a run on a new thread (201 with its id).

        Args:
            request: The HTTP request (JSON body: a :class:`RunRequest`).
        """
        live = await self.live.start(RunRequest.from_json(await _body(request)))
        return _json({"thread_id": live.thread_id}, status=201)

    async def threads(self, request: Request) -> Response:
        """``GET /api/runs``: every thread of the checkpoint file, newest first.

        Args:
            request: The HTTP request (unused).
        """
        return _json(await self.live.threads())

    async def thread(self, request: Request) -> Response:
        """``GET /api/runs/{thread}``: the thread's summary, open or only stored.

        Args:
            request: The HTTP request.
        """
        return _json(await self.live.stored_summary(request.path_params["thread"]))

    async def open_thread(self, request: Request) -> Response:
        """``POST /api/runs/{thread}/open``: open a stored thread in this server (see :meth:`LiveRuns.open`).

        Args:
            request: The HTTP request.
        """
        live = await self.live.open(request.path_params["thread"])
        return _json(live.summary())

    async def events(self, request: Request) -> Response:
        """``GET /api/runs/{thread}/events``: the thread's events as a server-sent event stream (429 at the limit).

        Args:
            request: The HTTP request (``after`` / ``Last-Event-ID``: the last event it has; ``follow=0``:
                the events so far, then the end).
        """
        live = await self.live.get(request.path_params["thread"])
        after = _int(request.query_params, "after", -1)
        last = request.headers.get("last-event-id")
        if last and last.isdigit():  # an EventSource reconnecting: go on after what it already has
            after = int(last)
        # follow=0: the events so far, then the response ends (for scripts and tests); default: a live stream.
        follow = request.query_params.get("follow", "1") != "0"
        if self.streams >= self.limits.max_streams:
            raise StudioInputError(f"{self.streams} event streams are open, this studio's limit (--max-streams "
                                   f"{self.limits.max_streams}); close a tab", status=429)
        self.streams += 1  # taken here, given back when the response ends, however it ends
        watch = live.watch(after if after is not None else -1, follow=follow, keepalive=_KEEPALIVE_S)
        return _CountedStream(_sse(watch), self._stream_ended, media_type="text/event-stream",
                              headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    def _stream_ended(self) -> None:
        self.streams -= 1

    async def resume(self, request: Request) -> Response:
        """``POST /api/runs/{thread}/resume``: answer the approval interrupt (see :meth:`LiveRuns.resume`).

        Args:
            request: The HTTP request (JSON body: ``{"action": "approve" | "reject"}`` or ``{"spec": text}``).
        """
        body = await _body(request)
        if not isinstance(body, dict):
            raise StudioInputError("send {\"action\": \"approve\" | \"reject\"} or {\"spec\": text}")
        live = await self.live.resume(request.path_params["thread"], body)
        return _json({"thread_id": live.thread_id, "state": live.state})

    async def folders_route(self, request: Request) -> Response:
        """``GET /api/folders``: the summary of every run folder.

        Args:
            request: The HTTP request (unused).
        """
        return _json([await asyncio.to_thread(folder.summary) for folder in self.folders])

    async def folder_route(self, request: Request) -> Response:
        """``GET /api/folders/{folder}``: the run folder's summary.

        Args:
            request: The HTTP request.
        """
        return _json(await asyncio.to_thread(self.folder(request).summary))

    async def rows(self, request: Request) -> Response:
        """``GET /api/folders/{folder}/rows``: one page of the rows passing the filters.

        Args:
            request: The HTTP request (filters ``status``, ``correct`` yes/no, ``kind``, ``agents``, ``step``,
                ``q``; ``offset``, ``limit``).
        """
        params = request.query_params
        correct = params.get("correct")
        if correct not in (None, "", "yes", "no"):
            raise StudioInputError(f"correct={correct!r}: use yes or no")
        text = (params.get("q") or "").strip().lower()
        row_filter = RowFilter(
            status=params.get("status") or None, correct=None if not correct else correct == "yes",
            kind=params.get("kind") or None, agents=_int(params, "agents"), step=_int(params, "step"),
            text=text or None,
        )
        offset, limit = _int(params, "offset", 0) or 0, _int(params, "limit", 50) or 50
        return _json(await asyncio.to_thread(self.folder(request).page, row_filter, offset, limit))

    async def sample(self, request: Request) -> Response:
        """``GET /api/folders/{folder}/rows/{row}``: one record with what the page derives from it.

        Args:
            request: The HTTP request.
        """
        return _json(await asyncio.to_thread(self.folder(request).sample, request.path_params["row"]))

    async def curve(self, request: Request) -> Response:
        """``GET /api/folders/{folder}/curve``: the folder's training curve.

        Args:
            request: The HTTP request.
        """
        return _json(await asyncio.to_thread(self.folder(request).curve))


class _CountedStream(StreamingResponse):
    """A streaming response that calls ``release`` when it is over: sent, failed, or cut by a client that left
    before its first byte (when the body iterator never starts, its own ``finally`` would never run)."""

    def __init__(self, content: AsyncIterator[str], release: Any, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _sse(events: AsyncIterator[dict[str, Any] | None]) -> AsyncIterator[str]:
    async for event in events:
        if event is None:
            yield ": keep-alive\n\n"  # lets proxies and the browser see that the stream is alive
        else:
            yield f"id: {event['seq']}\ndata: {json.dumps(event, default=str)}\n\n"


async def _studio_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StudioInputError)
    return _json({"error": str(exc), "problems": exc.problems}, status=exc.status)


def create_app(
    runs: Sequence[str | os.PathLike[str]] = (), db: str | os.PathLike[str] = DEFAULT_DB,
    data: Sequence[str | os.PathLike[str]] = (), *, allow_python_models: bool = False, token: str | None = None,
    allowed_hosts: Sequence[str] = (), models: ModelPolicy | None = None, limits: StudioLimits | None = None,
) -> Starlette:
    """The studio app.

    Args:
        runs: eval/training output folders to browse.
        db: the SQLite file of live threads (created 0600).
        data: JSONL files of sample questions.
        allow_python_models: accept ``python:`` model strings (ignored when ``models`` is given).
        token: the token every API request needs; a random one when ``None`` (read it from
            ``app.state.token``).
        allowed_hosts: Host names served besides the loopback ones.
        models: which model strings requests may name (default: :func:`studio_model_policy`).
        limits: body size, live runs, streams, time-out ceiling, finished threads kept.

    Returns:
        The Starlette app; ``app.state.token`` and ``app.state.studio`` hold the token and the state.

    Raises:
        RunFolderError: a ``runs`` path that is not a run folder.
        StudioInputError: a token shorter than 8 characters or a limit below 1.
    """
    limits = limits or StudioLimits()
    access = AccessPolicy(token or new_token(), frozenset(allowed_hosts), limits.max_body_bytes)
    models = models or studio_model_policy(allow_python_models=allow_python_models)
    studio = Studio(runs, db, data, access, models, limits)

    def route(path: str, endpoint: Any, methods: list[str] | None = None, *, api: bool = True) -> Route:
        return Route(path, Guarded(request_response(endpoint), access, api=api), methods=methods or ["GET"])

    routes = [
        route("/", studio.index, api=False),  # checks the token itself (without it: a page naming the URL to open)
        route("/api/config", studio.config),
        route("/api/samples", studio.samples_route),
        route("/api/validate", studio.validate, ["POST"]),
        route("/api/runs", studio.start_run, ["POST"]),
        route("/api/runs", studio.threads),
        route("/api/runs/{thread}", studio.thread),
        route("/api/runs/{thread}/open", studio.open_thread, ["POST"]),
        route("/api/runs/{thread}/events", studio.events),
        route("/api/runs/{thread}/resume", studio.resume, ["POST"]),
        route("/api/folders", studio.folders_route),
        route("/api/folders/{folder:int}", studio.folder_route),
        route("/api/folders/{folder:int}/rows", studio.rows),
        route("/api/folders/{folder:int}/rows/{row:int}", studio.sample),
        route("/api/folders/{folder:int}/curve", studio.curve),
        Mount("/static", app=Guarded(StaticFiles(directory=STATIC), access, api=False), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await studio.live.aclose()  # runs cut off by the stop close their checkpoints before the process goes

    application = Starlette(routes=routes, exception_handlers={StudioInputError: _studio_error}, lifespan=lifespan)
    application.state.studio = studio
    application.state.token = access.token
    return application


def _from_environment() -> Starlette:
    """The app of ``langgraph.json``: configured from ``MAS_STUDIO_*`` variables, with the same token checks.

    The token is ``$MAS_STUDIO_TOKEN`` or, without it, a random one written to stderr (the LangGraph server's
    log) as the path to open on that server.
    """
    token = environment.text(TOKEN_ENV)
    app = create_app(
        environment.paths("MAS_STUDIO_RUNS"), environment.text("MAS_STUDIO_DB", default=DEFAULT_DB) or DEFAULT_DB,
        environment.paths("MAS_STUDIO_DATA"), token=token, allowed_hosts=environment.items("MAS_STUDIO_ALLOW_HOSTS"),
        models=studio_model_policy(environment.items("MAS_STUDIO_ALLOW_MODELS")),
    )
    if token is None:
        print(f"mas-orchestra studio: open /?token={app.state.token} on this server (set {TOKEN_ENV} to choose "
              "the token)", file=sys.stderr, flush=True)
    return app


def __getattr__(name: str) -> Any:
    # ``app`` is built on first access, so importing this module (tests, the CLI) creates no database file.
    if name == "app":
        built = _from_environment()
        globals()["app"] = built
        return built
    raise AttributeError(name)
