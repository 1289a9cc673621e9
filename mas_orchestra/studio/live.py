"""Live runs: each an :class:`~mas_orchestra.runtime.Orchestra` run on a checkpointed thread of one SQLite file.

A run is started from a :class:`RunRequest` (the page's form) and driven by a server task that outlives any
browser connection: a tab that closes mid-run loses nothing, and every tab watching the thread gets every
event (:class:`LiveRun` keeps them, numbered, and replays them to a tab that joins late or reconnects).
With approval on, the run stops before execution (the runtime's approval interrupt) until the page resumes
it with approve, reject or an edited spec, validated here first so every problem is shown in place.

The request behind each thread is stored next to LangGraph's checkpoints (table ``studio_threads``), so after
a server restart a thread is rebuilt from the file: a finished one shows its stored outcome, a waiting one its
plan, and one cut off mid-run goes on from its last checkpoint. Reading never starts anything: a stored thread
is loaded (and, if it was cut off, goes on) only when the page POSTs ``/api/runs/{id}/open``.

The server's bounds (:class:`~mas_orchestra.studio.security.StudioLimits`) hold here: at most
``max_live_runs`` runs execute at once (one more is a 429), a run's time-out is at most ``max_run_timeout_s``,
and only the newest ``keep_finished`` finished threads stay in memory (the rest are in the database and
reopened from it when asked for). The models a request names pass the server's
:class:`~mas_orchestra.studio.security.ModelPolicy` first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mas_orchestra.config import OrchestraConfig
from mas_orchestra.errors import MasOrchestraError, SpecError
from mas_orchestra.models.policy import ModelNotAllowedError, ModelPolicy, keyless
from mas_orchestra.runtime import Orchestra
from mas_orchestra.runtime.threads import NO_RESUME
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import GraphSpec, spec_from_data
from mas_orchestra.studio.calls import CallCollector
from mas_orchestra.studio.common import StudioInputError
from mas_orchestra.studio.graph import graph_of
from mas_orchestra.studio.security import StudioLimits, studio_model_policy

__all__ = ["LiveRun", "LiveRuns", "RunRequest", "build_orchestra", "create_private_file"]

log = logging.getLogger(__name__)

_THREAD_ID = re.compile(r"[A-Za-z0-9_.-]{1,80}")
_CONSTRAINED = {"auto": None, "on": True, "off": False}


class RunRequest(BaseModel):
    """What the page's run form sends."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    question: str = Field(min_length=1, max_length=50_000)
    orchestrator: str = Field("embedded", min_length=1)
    subagent: str = Field("embedded", min_length=1)
    dom: Literal["high", "low"] = "high"
    constrained: Literal["auto", "on", "off"] = "auto"
    agents: list[str] | None = None
    approval: bool = False
    expected: str | list[str] | None = None
    timeout: float | None = Field(None, gt=0)
    call_timeout: float | None = Field(None, gt=0)
    retries: int | None = Field(None, ge=0, le=10)

    @classmethod
    def from_json(cls, data: Any) -> RunRequest:
        """Validate a request body (``StudioInputError`` listing every problem).

        Args:
            data: The decoded JSON body.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = [f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()]
            raise StudioInputError("invalid run request: " + "; ".join(problems), problems=problems) from None


def check_thread_id(thread_id: str) -> str:
    if not _THREAD_ID.fullmatch(thread_id):
        raise StudioInputError(f"thread id {thread_id!r}: use 1-80 letters, digits, '.', '_' or '-'", status=404)
    return thread_id


def create_private_file(path: Path) -> None:
    """Create ``path`` readable by its owner only (0600), or narrow an existing one to that (SQLite gives the
    journal and WAL files the database file's mode, so they stay private too)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)


def build_orchestra(request: RunRequest, db: Path, *, policy: ModelPolicy, max_run_timeout_s: float) -> Orchestra:
    """The Orchestra of a request, within the server's model policy and time-out ceiling.

    Args:
        request: The run request.
        db: The checkpoint file.
        policy: The model policy.
        max_run_timeout_s: The time-out ceiling in seconds.

    Raises:
        StudioInputError: a model the policy refuses (403), or a model string or option the runtime refuses.
    """
    for role, model in (("orchestrator", request.orchestrator), ("sub-agent", request.subagent)):
        try:
            policy.check(role, model)
        except ModelNotAllowedError as exc:
            raise StudioInputError(str(exc), status=403) from None
    timeout = min(request.timeout or max_run_timeout_s, max_run_timeout_s)
    try:
        config = OrchestraConfig(
            dom=request.dom, agents=tuple(request.agents) if request.agents is not None else None,
            interrupt_before_execute=request.approval, constrained=_CONSTRAINED[request.constrained],
        )
        bounds = {"timeout": timeout, "call_timeout": request.call_timeout, "max_retries": request.retries}
        settings = RunSettings.model_validate({k: v for k, v in bounds.items() if v is not None})
        return Orchestra(
            keyless(request.orchestrator, request.call_timeout), keyless(request.subagent, request.call_timeout),
            config=config, settings=settings, checkpointer=str(db),
        )
    except (MasOrchestraError, ValueError, TypeError, KeyError, ImportError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise StudioInputError(f"cannot set up this run: {message}") from None


class LiveRun:
    """One thread as the studio drives it: its request, its numbered events and the tabs watching it.

    Args:
        thread_id: The thread's id.
        request: The run request.
    """

    def __init__(self, thread_id: str, request: RunRequest) -> None:
        self.thread_id = thread_id
        self.request = request
        self.events: list[dict[str, Any]] = []
        self.state = "idle"  # running | waiting (for approval) | finished | failed
        self.task: asyncio.Task[None] | None = None
        self.finished_at = 0.0  # monotonic time it last stopped (finished or failed), for eviction
        self._watchers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._t0 = time.perf_counter()

    def emit(self, event: dict[str, Any]) -> None:
        """Number and time-stamp an event, keep it and send it to every watcher."""
        numbered = {**event, "seq": len(self.events), "t": round(time.perf_counter() - self._t0, 3)}
        self.events.append(numbered)
        for queue in self._watchers:
            queue.put_nowait(numbered)

    async def watch(self, after: int = -1, *, follow: bool = True,
                    keepalive: float | None = None) -> AsyncIterator[dict[str, Any] | None]:
        """Every event numbered above ``after``, then (``follow``) new ones as they come, until the watcher goes
        away; ``None`` after ``keepalive`` seconds without an event (so a stream can show it is alive).

        Args:
            after: The last event number the watcher has (-1: none).
            follow: Keep waiting for new events.
            keepalive: Seconds without an event before a ``None`` (``None``: wait indefinitely).
        """
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            sent = after
            for event in list(self.events[after + 1:]):
                sent = event["seq"]
                yield event
            while follow:
                try:
                    event = await asyncio.wait_for(queue.get(), keepalive)
                except (asyncio.TimeoutError, TimeoutError):
                    yield None
                    continue
                if event["seq"] > sent:
                    sent = event["seq"]
                    yield event
        finally:
            self._watchers.discard(queue)

    def summary(self) -> dict[str, Any]:
        """The thread's id, state, event count and request, for listings."""
        return {"thread_id": self.thread_id, "state": self.state, "events": len(self.events),
                "request": self.request.model_dump(mode="json")}


class LiveRuns:
    """The studio's live threads, all in one SQLite checkpoint file.

    Args:
        db: The checkpoint file (created readable by its owner only).
        allow_python_models: Accept ``python:`` models in the default policy.
        policy: The model policy (default: :func:`studio_model_policy`).
        limits: The studio's bounds (default: :class:`StudioLimits`).
    """

    def __init__(self, db: str | os.PathLike[str], *, allow_python_models: bool = False,
                 policy: ModelPolicy | None = None, limits: StudioLimits | None = None) -> None:
        self.db = Path(db).expanduser().resolve()
        self.policy = policy or studio_model_policy(allow_python_models=allow_python_models)
        self.limits = limits or StudioLimits()
        self._runs: dict[str, LiveRun] = {}
        self._orchestras: dict[str, Orchestra] = {}
        self._lock = asyncio.Lock()
        self._executing = 0  # runs holding one of the max_live_runs slots
        self.db.parent.mkdir(parents=True, exist_ok=True)
        create_private_file(self.db)
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn, conn:
            conn.execute("CREATE TABLE IF NOT EXISTS studio_threads "
                         "(thread_id TEXT PRIMARY KEY, created REAL, request TEXT)")

    async def aclose(self) -> None:
        """Cancel every run this server executes and wait until each closed its checkpoint (a stopped server
        leaves no write lock on the file; a cut-off run goes on from its last checkpoint when opened again)."""
        tasks = [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=30)

    # -- threads ------------------------------------------------------------------------------

    async def _sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """One statement on the threads table, off the event loop (a server may forbid blocking calls there)."""

        def run() -> list[tuple[Any, ...]]:
            with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn, conn:
                return conn.execute(statement, params).fetchall()

        return await asyncio.to_thread(run)

    async def threads(self) -> list[dict[str, Any]]:
        """Every thread of the file, newest first, with its state when it is live in this server."""
        rows = await self._sql("SELECT thread_id, created, request FROM studio_threads ORDER BY created DESC")
        out = []
        for thread_id, created, request in rows:
            live = self._runs.get(thread_id)
            question = json.loads(request).get("question", "")
            out.append({"thread_id": thread_id, "created": created, "question": question[:200],
                        "state": live.state if live else "stored"})
        return out

    @property
    def executing(self) -> int:
        """Runs executing now (each holds one of ``limits.max_live_runs`` slots)."""
        return self._executing

    @property
    def in_memory(self) -> int:
        """Threads held in memory (live, waiting and the newest finished ones)."""
        return len(self._runs)

    async def get(self, thread_id: str) -> LiveRun:
        """The thread as this server holds it; a thread only in the file is a 409 that says to open it (a read
        starts nothing).

        Args:
            thread_id: The thread's id.

        Raises:
            StudioInputError: 404 (no such thread) or 409 (stored, not open).
        """
        check_thread_id(thread_id)
        live = self._runs.get(thread_id)
        if live is not None:
            return live
        if await self._sql("SELECT 1 FROM studio_threads WHERE thread_id = ?", thread_id):
            raise StudioInputError(f"thread {thread_id} is stored but not open in this server: POST "
                                   f"/api/runs/{thread_id}/open to load it", status=409)
        raise StudioInputError(f"no thread {thread_id!r} in {self.db}", status=404)

    async def stored_summary(self, thread_id: str) -> dict[str, Any]:
        """The summary of a thread, open or only stored (``state: "stored"``); reads only."""
        check_thread_id(thread_id)
        live = self._runs.get(thread_id)
        if live is not None:
            return live.summary()
        rows = await self._sql("SELECT request FROM studio_threads WHERE thread_id = ?", thread_id)
        if not rows:
            raise StudioInputError(f"no thread {thread_id!r} in {self.db}", status=404)
        return {"thread_id": thread_id, "state": "stored", "events": 0, "request": json.loads(rows[0][0])}

    async def open(self, thread_id: str) -> LiveRun:
        """The thread, rebuilt from the file (and resumed where it was cut off) when this server does not hold
        it: a finished one shows its stored outcome, a waiting one its plan.

        Args:
            thread_id: The thread's id.

        Raises:
            StudioInputError: 404 (no such thread) or 429 (``max_live_runs`` runs are executing).
        """
        check_thread_id(thread_id)
        async with self._lock:
            live = self._runs.get(thread_id)
            if live is not None:
                return live
            rows = await self._sql("SELECT request FROM studio_threads WHERE thread_id = ?", thread_id)
            if not rows:
                raise StudioInputError(f"no thread {thread_id!r} in {self.db}", status=404)
            self._claim_slot()
            live = LiveRun(thread_id, RunRequest.model_validate_json(rows[0][0]))
            self._runs[thread_id] = live
            live.emit({"type": "restored", "request": live.request.model_dump(mode="json")})
            self._drive(live, NO_RESUME)
            return live

    async def start(self, request: RunRequest) -> LiveRun:
        """Start a run on a new thread (the models are set up first, so a bad model string starts nothing).

        Args:
            request: The run request.

        Raises:
            StudioInputError: 429 when ``max_live_runs`` runs are executing; 400 for a time-out above the
                ceiling; 403/400 for a model the policy or the runtime refuses.
        """
        ceiling = self.limits.max_run_timeout_s
        if request.timeout is not None and request.timeout > ceiling:
            raise StudioInputError(f"timeout {request.timeout:g} s is above this studio's ceiling of {ceiling:g} s "
                                   "(--max-run-timeout)")
        self._claim_slot()  # before any await: concurrent starts cannot all pass the check
        try:
            await self.orchestra_for(request)
            thread_id = f"studio-{uuid.uuid4().hex[:12]}"
            await self._sql(
                "INSERT INTO studio_threads VALUES (?, ?, ?)", thread_id, time.time(), request.model_dump_json()
            )
        except BaseException:
            self._release_slot()
            raise
        live = LiveRun(thread_id, request)
        self._runs[thread_id] = live
        live.emit({"type": "started", "request": request.model_dump(mode="json")})
        self._drive(live, NO_RESUME)
        return live

    async def resume(self, thread_id: str, decision: dict[str, Any]) -> LiveRun:
        """Answer the approval interrupt: ``{"action": "approve" | "reject", "reason"?}`` or ``{"spec": text}``."""
        live = await self.get(thread_id)
        if live.state == "running":
            raise StudioInputError(f"thread {thread_id} is running; wait for it to stop before answering", status=409)
        if live.state != "waiting":
            raise StudioInputError(f"thread {thread_id} is not waiting for approval (it is {live.state})", status=409)
        orchestra = await self.orchestra_for(live.request)
        value: Any
        if "spec" in decision:
            spec = validate_edit(decision["spec"], orchestra)
            value = {"spec": spec.model_dump(mode="json")}
            live.emit({"type": "resumed", "action": "edit"})
        elif decision.get("action") in ("approve", "reject"):
            value = {"action": decision["action"], "reason": str(decision.get("reason") or "rejected in the studio")}
            live.emit({"type": "resumed", "action": decision["action"]})
        else:
            raise StudioInputError('resume with {"action": "approve"}, {"action": "reject"} or {"spec": text}')
        if live.state != "waiting":  # another request answered it meanwhile
            raise StudioInputError(f"thread {thread_id} was answered already (it is {live.state})", status=409)
        self._claim_slot()
        self._drive(live, value)
        return live

    # -- internals ----------------------------------------------------------------------------

    async def orchestra_for(self, request: RunRequest) -> Orchestra:
        """The (cached) Orchestra of a request's models and options.

        Args:
            request: The run request (its question and expected answer do not matter).
        """
        key = request.model_dump_json(exclude={"question", "expected"})
        orchestra = self._orchestras.get(key)
        if orchestra is None:
            # Loading a local model takes a while: off the event loop, so other tabs stay served.
            orchestra = await asyncio.to_thread(
                build_orchestra, request, self.db, policy=self.policy,
                max_run_timeout_s=self.limits.max_run_timeout_s,
            )
            if len(self._orchestras) >= 8:
                self._orchestras.pop(next(iter(self._orchestras)))
            self._orchestras[key] = orchestra
        return orchestra

    def _claim_slot(self) -> None:
        if self._executing >= self.limits.max_live_runs:
            raise StudioInputError(
                f"{self._executing} runs are executing, this studio's limit (--max-live-runs "
                f"{self.limits.max_live_runs}); wait for one to finish", status=429)
        self._executing += 1

    def _release_slot(self) -> None:
        self._executing = max(0, self._executing - 1)

    def _evict_finished(self) -> None:
        """Drop the oldest finished threads beyond ``keep_finished`` (they stay in the database)."""
        done = [r for r in self._runs.values() if r.state in ("finished", "failed")]
        extra = len(done) - self.limits.keep_finished
        if extra > 0:
            for old in sorted(done, key=lambda r: r.finished_at)[:extra]:
                self._runs.pop(old.thread_id, None)

    def _drive(self, live: LiveRun, resume: Any) -> None:
        """Run (or resume) ``live`` in a server task; the caller has claimed a slot, released when it stops."""
        live.state = "running"
        live.emit({"type": "state", "state": "running"})
        live.task = asyncio.create_task(self._run(live, resume), name=f"studio run {live.thread_id}")

    async def _run(self, live: LiveRun, resume: Any) -> None:
        state, stop_reason = "failed", "the run stopped"
        collector = CallCollector(live.emit)
        try:
            orchestra = await self.orchestra_for(live.request)
            async for event in orchestra.astream(
                live.request.question, callbacks=[collector], thread_id=live.thread_id, resume=resume
            ):
                public = await public_event(event, live.request)
                if public["type"] == "outcome":
                    state = "waiting" if public["status"] == "interrupted" else "finished"
                    stop_reason = public["error"] or stop_reason
                live.emit(public)
        except (MasOrchestraError, ValueError) as exc:
            live.emit({"type": "error", "message": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:  # never let a run die silently: the page shows it
            log.exception("studio run %s failed", live.thread_id)
            live.emit({"type": "error", "message": f"{type(exc).__name__}: {exc}"})
        finally:
            collector.abandon(stop_reason)
            self._release_slot()
            live.state = state
            live.finished_at = time.monotonic()
            live.emit({"type": "state", "state": state})
            self._evict_finished()


def validate_edit(text: Any, orchestra: Orchestra) -> GraphSpec:
    """An edited spec (JSON or orchestration text) validated with the run's DoM and agents; every problem is
    listed in a :class:`StudioInputError` (HTTP 422).

    Args:
        text: The edited spec.
        orchestra: The run's Orchestra.
    """
    if not isinstance(text, str) or not text.strip():
        raise StudioInputError("the edited spec is empty", status=422)
    try:
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                problem = f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
                raise StudioInputError(f"the edited spec is not valid JSON: {problem}", status=422,
                                       problems=[problem]) from None
            return spec_from_data(data, registry=orchestra.registry)
        return orchestra.parse(text)
    except SpecError as exc:
        raise StudioInputError(f"the edited spec is invalid: {exc}", status=422, problems=exc.problems) from None


async def public_event(event: dict[str, Any], request: RunRequest) -> dict[str, Any]:
    """A runtime event as JSON for the page."""
    kind = event["type"]
    if kind == "spec":
        spec: GraphSpec = event["spec"]
        return {"type": "spec", "graph": graph_of(spec), "spec_text": spec.to_xml(),
                "spec_json": spec.model_dump(mode="json")}
    if kind != "outcome":
        return dict(event)
    outcome = event["outcome"]
    public: dict[str, Any] = {
        "type": "outcome", "status": outcome.status.value, "answer": outcome.answer, "error": outcome.error,
        "failed_node": outcome.failed_node, "usage": outcome.usage.model_dump(mode="json"),
        "node_results": {k: v.model_dump(mode="json") for k, v in outcome.node_results.items()},
        "graph": graph_of(outcome.spec) if outcome.spec is not None else None,
        "orchestration": outcome.orchestration, "interrupt": outcome.interrupt, "thread_id": outcome.thread_id,
        "expected": request.expected, "match": None, "grade_error": None,
    }
    if outcome.spec is not None:
        public["spec_text"] = outcome.spec.to_xml()
    if outcome.answer is not None and request.expected not in (None, "", []):
        public["match"], public["grade_error"] = await grade_answer(outcome.answer, request.expected)
    return public


async def grade_answer(answer: str, expected: str | list[str]) -> tuple[bool | None, str | None]:
    """Math grading (the eval's default) of a final answer against the expected one; errors say why not."""
    from mas_orchestra.bench.grading import grade

    try:
        return await asyncio.to_thread(grade, answer, expected, "math"), None
    except (MasOrchestraError, ValueError, ImportError) as exc:
        return None, f"cannot grade: {exc}"
