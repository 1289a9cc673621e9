"""The attacks of issue 31 on a studio started as its users start it (``mas-orchestra studio`` in a process),
for the security tests and ``benchmarks/studio_attacks.py`` (which also runs them on the code before the fix).

Each attack returns what the server answered; nothing here asserts: the tests do, the benchmark prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.studio_server import DEMO, free_port

__all__ = [
    "ATTACKER", "SLOW", "StudioProcess", "body_too_large", "concurrent_starts", "cross_site_text_plain",
    "foreign_host", "foreign_origin_with_token", "many_streams", "no_token", "page_headers", "remote_vllm",
    "start_studio",
]

ATTACKER = "https://attacker.example"
SLOW = "python:tests.studio_models:slow_subagent"
RUN = {"question": "What is 2 + 3?", "orchestrator": DEMO, "subagent": "scripted:5"}


@dataclass
class StudioProcess:
    """A studio server process: its base URL, token (``None`` for a studio without one), pid and database."""

    base: str
    port: int
    token: str | None
    process: subprocess.Popen[str]
    db: Path
    printed: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers=self.auth, timeout=60, **kwargs)

    def rss_kib(self) -> tuple[int, int]:
        """The server's resident memory now and at its peak (KiB, from /proc)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        now = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        peak = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        return now, peak

    def thread_count(self) -> int:
        with self.client() as c:
            return len(c.get("/api/runs").json())


@contextlib.contextmanager
def start_studio(db: Path, *args: str, pythonpath: str | None = None, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> Iterator[StudioProcess]:
    """Start ``python -m mas_orchestra studio`` on a free port; read the URL it prints; stop it on exit."""
    port = free_port()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    if pythonpath:
        environment["PYTHONPATH"] = pythonpath
    process = subprocess.Popen(
        [sys.executable, "-m", "mas_orchestra", "studio", "--port", str(port), "--db", str(db),
         "--allow-python-models", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment, cwd=cwd,
    )
    try:
        assert process.stdout is not None
        printed = process.stdout.readline()
        match = re.search(r"http://\S+", printed)
        if not match:
            raise RuntimeError(f"the studio did not print its URL: {printed!r}{process.stdout.read()[:2000]}")
        url = match.group(0)
        token = (parse_qs(urlsplit(url).query).get("token") or [None])[0]
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/static/style.css", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the studio server did not answer") from None
                time.sleep(0.1)
        # Drain its output in the background so a chatty server never blocks on a full pipe.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield StudioProcess(base, port, token, process, db, printed.strip())
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


def no_token(studio: StudioProcess) -> dict[str, int]:
    """What any local process or page gets without the token."""
    return {path: httpx.get(f"{studio.base}{path}", timeout=30).status_code
            for path in ("/api/config", "/api/runs", "/")}


def foreign_host(studio: StudioProcess) -> int:
    """A page whose DNS name was rebound to 127.0.0.1: its requests carry its own Host (and, here, the token,
    to show that the Host check holds on its own)."""
    return httpx.get(f"{studio.base}/api/runs", headers={"Host": f"attacker.example:{studio.port}", **studio.auth},
                     timeout=30).status_code


def cross_site_text_plain(studio: StudioProcess) -> tuple[int, int]:
    """A ``text/plain`` POST from another site (no preflight; the browser sends no SameSite=Strict cookie):
    the answer and the number of threads it added."""
    before = studio.thread_count()
    status = httpx.post(f"{studio.base}/api/runs", content=json.dumps(RUN), timeout=60, headers={
        "Content-Type": "text/plain;charset=UTF-8", "Origin": ATTACKER, "Sec-Fetch-Site": "cross-site"}).status_code
    time.sleep(0.3)
    return status, studio.thread_count() - before


def foreign_origin_with_token(studio: StudioProcess) -> tuple[int, int]:
    """A JSON POST carrying the token but sent from another page's Origin: the answer and threads added."""
    before = studio.thread_count()
    status = httpx.post(f"{studio.base}/api/runs", json=RUN, timeout=60,
                        headers={"Origin": ATTACKER, **studio.auth}).status_code
    time.sleep(0.3)
    return status, studio.thread_count() - before


def remote_vllm(studio: StudioProcess) -> int:
    """A page choosing a vLLM server elsewhere (which would get the prompts, and before the fix the key)."""
    body = {**RUN, "orchestrator": "vllm:any@http://attacker.example:9/v1"}
    return httpx.post(f"{studio.base}/api/runs", json=body, headers=studio.auth, timeout=60).status_code


def page_headers(studio: StudioProcess) -> dict[str, str | None]:
    """The framing and script headers of the page (opened with the token, as the owner does)."""
    with studio.client(follow_redirects=True) as c:
        response = c.get(f"/?token={studio.token}" if studio.token else "/")
    return {name: response.headers.get(name) for name in ("x-frame-options", "content-security-policy")}


def body_too_large(studio: StudioProcess, size: int = 64 << 20, chunk: int = 1 << 16) -> dict[str, Any]:
    """POST a ``size``-byte body, streamed from a raw socket (``chunk`` bytes reused, never ``size`` in memory),
    until the server answers: its status, the bytes sent by then and the seconds it took."""
    head = (f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{studio.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in studio.auth.items()) + "\r\n")
    block = b" " * chunk
    sent = 0
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", studio.port), timeout=120) as sock:
        sock.sendall(head.encode())
        sock.setblocking(False)
        answer = b""
        while sent < size and not answer:
            try:
                answer = sock.recv(4096)
                if not answer:
                    break
            except BlockingIOError:
                pass
            try:
                sent += sock.send(block[: min(chunk, size - sent)])
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.setblocking(True)
        sock.settimeout(120)
        with contextlib.suppress(OSError):
            while b"\r\n" not in answer:
                more = sock.recv(4096)
                if not more:
                    break
                answer += more
    status = int(answer.split()[1]) if answer.startswith(b"HTTP/") else None
    return {"status": status, "bytes_sent": sent, "seconds": round(time.perf_counter() - started, 3)}


def concurrent_starts(studio: StudioProcess, count: int = 100, subagent: str = SLOW,
                      finish_timeout: float = 120.0) -> dict[str, Any]:
    """``count`` run starts at once (slow sub-agent calls, so they overlap): the answers, and whether every
    accepted run then finished."""

    async def start_all() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=count)
        async with httpx.AsyncClient(base_url=studio.base, headers=studio.auth, timeout=120, limits=limits) as c:
            body = {**RUN, "subagent": subagent}
            return list(await asyncio.gather(*(c.post("/api/runs", json=body) for _ in range(count))))

    responses = asyncio.run(start_all())
    codes: dict[int, int] = {}
    for response in responses:
        codes[response.status_code] = codes.get(response.status_code, 0) + 1
    accepted = [r.json()["thread_id"] for r in responses if r.status_code == 201]
    deadline = time.monotonic() + finish_timeout
    states: dict[str, str] = {}
    with studio.client() as c:
        while True:
            states = {t: c.get(f"/api/runs/{t}").json()["state"] for t in accepted}
            if all(s in ("finished", "failed", "stored") for s in states.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    return {"codes": codes, "accepted": len(accepted),
            "finished": sum(1 for s in states.values() if s in ("finished", "stored")),
            "rss_kib": studio.rss_kib()}


def many_streams(studio: StudioProcess, thread_id: str, count: int = 200) -> dict[str, Any]:
    """``count`` event-stream clients held open at once on one thread: the answers and the server's memory
    before, while they are open, and its peak."""
    rss_before = studio.rss_kib()[0]

    async def hold() -> tuple[dict[int, int], int]:
        limits = httpx.Limits(max_connections=count + 5)
        async with httpx.AsyncClient(base_url=studio.base, headers=studio.auth, timeout=60, limits=limits) as c:
            streams = [c.stream("GET", f"/api/runs/{thread_id}/events") for _ in range(count)]
            opened = await asyncio.gather(*(s.__aenter__() for s in streams))
            codes: dict[int, int] = {}
            for response in opened:
                codes[response.status_code] = codes.get(response.status_code, 0) + 1
            await asyncio.sleep(1.0)
            rss_open = studio.rss_kib()[0]
            for s in streams:
                await s.__aexit__(None, None, None)
            return codes, rss_open

    codes, rss_open = asyncio.run(hold())
    return {"codes": codes, "rss_before_kib": rss_before, "rss_open_kib": rss_open, "peak_kib": studio.rss_kib()[1]}
