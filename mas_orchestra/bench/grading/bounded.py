"""Math-Verify within a time bound: persistent worker subprocesses that are killed when a check overruns.

Math-Verify runs with its own (signal based, main-thread only) timeouts disabled; this module bounds the
time itself by running the check in a persistent worker subprocess that is killed when ``timeout``
expires (the check is then False). A process, not a thread, because sympy can sit inside one C call that
never releases the GIL (``9^{9^{9^9}}``), which no thread timeout can interrupt. This makes grading safe
from any thread and inside a running event loop. Set ``MAS_GRADING_BACKEND=thread`` to use a
daemon thread instead (no subprocess; a runaway computation then keeps burning CPU in the background), and
``MAS_GRADING_WORKERS`` for the number of worker processes (default ``min(4, cpus)``); both are read at the first
check, not at import.

At module level this file imports only the standard library: each worker loads it by path in a bare interpreter
(see :class:`_Worker`); :mod:`mas_orchestra.environment` is imported in the parent only, when it reads the two
variables, and ``math_verify`` is imported in the worker (or lazily, in thread mode).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["verify_bounded"]

logger = logging.getLogger(__name__)

# How long a fresh worker may take to import sympy/math_verify; kept apart from the per-call timeout so a
# cold start is never mistaken for a pathological answer.
_STARTUP_TIMEOUT_S = 120.0


class _QuietTimeoutWarning(logging.Filter):
    """Drops Math-Verify's "timeout is disabled" warning: here the timeout is ours, on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _quiet_math_verify() -> None:
    for name in ("math_verify.parser", "math_verify.grader", "math_verify"):
        lg = logging.getLogger(name)
        if not any(isinstance(f, _QuietTimeoutWarning) for f in lg.filters):
            lg.addFilter(_QuietTimeoutWarning())


def _verify_pairs(pairs: Sequence[Sequence[str]]) -> bool:
    """Math-Verify every (gold, prediction) pair, no timeouts; runs in the worker (or a thread)."""
    from math_verify import parse, verify

    for gold, pred in pairs:
        g = parse(gold, parsing_timeout=None)
        if not g:
            return False
        p = parse(pred, parsing_timeout=None)
        if not p or not verify(g, p, timeout_seconds=None):
            return False
    return True


def _worker_loop() -> None:
    """Entry point of a worker subprocess: JSON lines in on stdin, JSON lines out on the original stdout."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    # Whatever sympy or a library prints must not corrupt the protocol channel.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    parent = os.getppid()

    def watchdog() -> None:
        # If the parent dies while we are stuck in a long computation, nobody would ever kill us.
        while True:
            time.sleep(2.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        import math_verify  # noqa: F401
    except Exception as exc:
        proto.write(json.dumps({"ready": False, "error": repr(exc)}) + "\n")
        return
    _quiet_math_verify()
    sys.setrecursionlimit(10_000)
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            ok = _verify_pairs(json.loads(line)["pairs"])
        except Exception:  # any parser/sympy failure is simply "not equivalent"
            ok = False
        proto.write(json.dumps({"ok": bool(ok)}) + "\n")


class _WorkerUnavailable(RuntimeError):
    """A worker subprocess could not be started (or could not import math_verify)."""


class _Worker:
    def __init__(self) -> None:
        path = str(Path(__file__).resolve())
        # Load this file by path under a private name: the child does not import the mas_orchestra
        # package (whose __init__ may pull in langgraph) nor re-run the parent's __main__ (unlike
        # multiprocessing's spawn), and it never inherits the parent's threads or locks (unlike fork).
        code = (
            "import importlib.util as u\n"
            f"s = u.spec_from_file_location('_mas_orchestra_grading_worker', {path!r})\n"
            "m = u.module_from_spec(s)\n"
            "s.loader.exec_module(m)\n"
            "m._worker_loop()\n"
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except (OSError, ValueError) as exc:
            raise _WorkerUnavailable(f"cannot start a grading worker: {exc}") from exc
        self._buf = b""
        self.ready = False

    def _readline(self, deadline: float) -> bytes | None:
        """One protocol line, or None when the deadline passes first. EOFError if the worker died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            # poll, not select: select fails for descriptors >= 1024, common in busy training processes.
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(max(1, int(remaining * 1000))):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("grading worker exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            line = self._readline(time.monotonic() + _STARTUP_TIMEOUT_S)
        except EOFError as exc:
            raise _WorkerUnavailable("grading worker exited during start-up") from exc
        msg = json.loads(line) if line else {}
        if not msg.get("ready"):
            reason = msg.get("error", "start-up timed out")
            raise _WorkerUnavailable(f"grading worker did not start: {reason}")
        self.ready = True

    def run(self, pairs: list[list[str]], timeout: float) -> bool | None:
        """True/False from Math-Verify; None if the worker timed out or died (it must then be killed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"pairs": pairs}) + "\n").encode("ascii"))
            self.proc.stdin.flush()
            line = self._readline(time.monotonic() + timeout)
        except (OSError, EOFError):
            return None
        if line is None:
            return None
        return bool(json.loads(line).get("ok"))

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # already gone; nothing else to do
            logger.debug("grading worker kill failed", exc_info=True)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class _WorkerPool:
    """At most ``size`` workers; a caller takes an idle one (or starts one) and hands it back."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.idle: list[_Worker] = []
        self.count = 0
        self.cond = threading.Condition()

    def acquire(self) -> _Worker:
        with self.cond:
            while not self.idle and self.count >= self.size:
                self.cond.wait()
            if self.idle:
                return self.idle.pop()
            self.count += 1
        try:
            return _Worker()
        except BaseException:
            with self.cond:
                self.count -= 1
                self.cond.notify()
            raise

    def release(self, worker: _Worker, broken: bool) -> None:
        if broken:
            worker.kill()
            if _USE_THREADS:  # workers cannot start here at all; do not keep trying
                with self.cond:
                    self.count -= 1
                    self.cond.notify()
                return
            try:
                # Start the replacement now so it imports sympy while nobody waits for it.
                worker = _Worker()
            except _WorkerUnavailable:
                with self.cond:
                    self.count -= 1
                    self.cond.notify()
                return
        with self.cond:
            self.idle.append(worker)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            workers, self.idle = self.idle, []
            self.count -= len(workers)
        for w in workers:
            w.kill()


_POOL: _WorkerPool | None = None


_POOL_LOCK = threading.Lock()


#: Whether checks run in threads: ``None`` until the first check reads ``MAS_GRADING_BACKEND``; set to True for
#: the rest of the process when workers cannot start.
_USE_THREADS: bool | None = None


def _use_threads() -> bool:
    global _USE_THREADS
    if _USE_THREADS is None:
        from mas_orchestra import environment

        backend = environment.choice("MAS_GRADING_BACKEND", None, field="backend", choices=("process", "thread"),
                                     default="process")
        _USE_THREADS = backend == "thread" or os.name != "posix"
    return _USE_THREADS


def _pool() -> _WorkerPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from mas_orchestra import environment

            size = environment.positive_int("MAS_GRADING_WORKERS") or min(4, os.cpu_count() or 1)
            _POOL = _WorkerPool(size)
            atexit.register(_POOL.close)
        return _POOL


def _verify_in_thread(pairs: list[list[str]], timeout: float) -> bool:
    import math_verify  # noqa: F401  -- fail here, loudly, rather than inside the thread

    _quiet_math_verify()
    result: dict[str, bool] = {}

    def target() -> None:
        try:
            result["ok"] = _verify_pairs(pairs)
        except Exception:
            result["ok"] = False

    t = threading.Thread(target=target, daemon=True, name="mas-orchestra-math-verify")
    t.start()
    t.join(timeout)
    if t.is_alive():
        logger.warning("math grading timed out after %.1fs (thread left running)", timeout)
        return False
    return result.get("ok", False)


def verify_bounded(pairs: list[list[str]], timeout: float) -> bool:
    """Math-Verify ``pairs`` within ``timeout`` seconds (after worker start-up); False on timeout.

    Args:
        pairs: The (gold, prediction) text pairs; True only when every one verifies.
        timeout: Seconds the verification may take.
    """
    global _USE_THREADS
    if _use_threads():
        return _verify_in_thread(pairs, timeout)
    pool = _pool()
    try:
        worker = pool.acquire()
    except _WorkerUnavailable as exc:
        logger.warning("%s; falling back to thread-based math grading", exc)
        _USE_THREADS = True
        return _verify_in_thread(pairs, timeout)
    broken = True
    try:
        worker.wait_ready()
        result = worker.run(pairs, timeout)
        broken = result is None
        if result is None:
            logger.info("math grading timed out after %.1fs; worker restarted", timeout)
            return False
        return result
    except _WorkerUnavailable as exc:
        logger.warning("%s; falling back to thread-based math grading", exc)
        _USE_THREADS = True
        return _verify_in_thread(pairs, timeout)
    finally:
        pool.release(worker, broken)
