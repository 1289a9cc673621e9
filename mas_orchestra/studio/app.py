"""The studio's ASGI app (Starlette): the page, its static assets, JSON routes and server-sent events.

``create_app(runs=[...], db=..., data=[...])`` builds it; ``app`` (module level) is the same app configured from
the environment (``MAS_STUDIO_RUNS``: folders separated by ``os.pathsep``, ``MAS_STUDIO_DB``, ``MAS_STUDIO_DATA``)
for ASGI servers that import an app by name, e.g. ``"http": {"app": "mas_orchestra/studio/app.py:app"}`` in
``langgraph.json``. Routes name run folders and records by number and threads by id; no route takes a path.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from mas_orchestra.errors import MissingExtraError
from mas_orchestra.models.resolve import MODEL_FORMS
from mas_orchestra.registry import default_registry
from mas_orchestra.studio.browse import RowFilter, RunFolder, open_run_folders
from mas_orchestra.studio.common import StudioInputError
from mas_orchestra.studio.demo import DEMO_ORCHESTRATOR
from mas_orchestra.studio.graph import graph_of
from mas_orchestra.studio.live import LiveRuns, RunRequest, validate_edit
from mas_orchestra.studio.samples import load_samples

try:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the studio web app", "studio", "starlette") from exc

__all__ = ["DEFAULT_DB", "STATIC", "create_app"]  # and the lazily built ``app`` (see the module docstring)

STATIC = Path(__file__).parent / "static"
DEFAULT_DB = "studio.sqlite"
_KEEPALIVE_S = 15.0


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status)


async def _body(request: Request) -> Any:
    try:
        return await request.json()
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
    """The state behind the routes: live threads, run folders and samples."""

    def __init__(self, runs: Sequence[str | os.PathLike[str]], db: str | os.PathLike[str],
                 data: Sequence[str | os.PathLike[str]], allow_python_models: bool) -> None:
        self.folders = open_run_folders(list(runs))
        self.samples = load_samples(data)
        self.live = LiveRuns(db, allow_python_models=allow_python_models)

    def folder(self, request: Request) -> RunFolder:
        number = request.path_params["folder"]
        if not 0 <= number < len(self.folders):
            raise StudioInputError(f"no run folder {number}; the studio was started with {len(self.folders)}",
                                   status=404)
        return self.folders[number]

    # -- routes -------------------------------------------------------------------------------

    # File and SQLite reads run in worker threads: the event loop stays free for the live streams (and the
    # LangGraph dev server, which flags blocking calls on its loop, accepts the app).

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def config(self, request: Request) -> Response:
        return _json({
            "agents": [{"name": k.name, "block": k.block, "needs_search": k.needs_search}
                       for k in default_registry.kinds()],
            "model_forms": list(MODEL_FORMS), "demo_orchestrator": DEMO_ORCHESTRATOR,
            "db": str(self.live.db), "folders": len(self.folders),
        })

    async def samples_route(self, request: Request) -> Response:
        return _json(self.samples)

    async def validate(self, request: Request) -> Response:
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
        live = await self.live.start(RunRequest.from_json(await _body(request)))
        return _json({"thread_id": live.thread_id}, status=201)

    async def threads(self, request: Request) -> Response:
        return _json(await self.live.threads())

    async def thread(self, request: Request) -> Response:
        live = await self.live.get(request.path_params["thread"])
        return _json(live.summary())

    async def events(self, request: Request) -> Response:
        live = await self.live.get(request.path_params["thread"])
        after = _int(request.query_params, "after", -1)
        last = request.headers.get("last-event-id")
        if last and last.isdigit():  # an EventSource reconnecting: go on after what it already has
            after = int(last)
        # follow=0: the events so far, then the response ends (for scripts and tests); default: a live stream.
        follow = request.query_params.get("follow", "1") != "0"
        watch = live.watch(after if after is not None else -1, follow=follow, keepalive=_KEEPALIVE_S)
        return StreamingResponse(_sse(watch), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def resume(self, request: Request) -> Response:
        body = await _body(request)
        if not isinstance(body, dict):
            raise StudioInputError("send {\"action\": \"approve\" | \"reject\"} or {\"spec\": text}")
        live = await self.live.resume(request.path_params["thread"], body)
        return _json({"thread_id": live.thread_id, "state": live.state})

    async def folders_route(self, request: Request) -> Response:
        return _json([await asyncio.to_thread(folder.summary) for folder in self.folders])

    async def folder_route(self, request: Request) -> Response:
        return _json(await asyncio.to_thread(self.folder(request).summary))

    async def rows(self, request: Request) -> Response:
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
        return _json(await asyncio.to_thread(self.folder(request).sample, request.path_params["row"]))

    async def curve(self, request: Request) -> Response:
        return _json(await asyncio.to_thread(self.folder(request).curve))


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
    data: Sequence[str | os.PathLike[str]] = (), *, allow_python_models: bool = False,
) -> Starlette:
    """The studio app. ``runs``: eval/training output folders to browse; ``db``: the SQLite file of live
    threads; ``data``: JSONL files of sample questions. Bad folders raise :class:`RunFolderError` here."""
    studio = Studio(runs, db, data, allow_python_models)
    routes = [
        Route("/", studio.index),
        Route("/api/config", studio.config),
        Route("/api/samples", studio.samples_route),
        Route("/api/validate", studio.validate, methods=["POST"]),
        Route("/api/runs", studio.start_run, methods=["POST"]),
        Route("/api/runs", studio.threads, methods=["GET"]),
        Route("/api/runs/{thread}", studio.thread),
        Route("/api/runs/{thread}/events", studio.events),
        Route("/api/runs/{thread}/resume", studio.resume, methods=["POST"]),
        Route("/api/folders", studio.folders_route),
        Route("/api/folders/{folder:int}", studio.folder_route),
        Route("/api/folders/{folder:int}/rows", studio.rows),
        Route("/api/folders/{folder:int}/rows/{row:int}", studio.sample),
        Route("/api/folders/{folder:int}/curve", studio.curve),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    application = Starlette(routes=routes, exception_handlers={StudioInputError: _studio_error})
    application.state.studio = studio
    return application


def _from_environment() -> Starlette:
    def paths(name: str) -> list[str]:
        return [p for p in os.environ.get(name, "").split(os.pathsep) if p]

    return create_app(paths("MAS_STUDIO_RUNS"), os.environ.get("MAS_STUDIO_DB", DEFAULT_DB), paths("MAS_STUDIO_DATA"))


def __getattr__(name: str) -> Any:
    # ``app`` is built on first access, so importing this module (tests, the CLI) creates no database file.
    if name == "app":
        built = _from_environment()
        globals()["app"] = built
        return built
    raise AttributeError(name)
