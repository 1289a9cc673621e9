"""Helpers of the studio tests: a studio app served by uvicorn in a thread, and readers of its event stream."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["DEMO", "auth", "events_so_far", "free_port", "serve", "studio_client", "wait_state"]

DEMO = "python:mas_orchestra.studio.demo:orchestrator"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def auth(app: Any) -> dict[str, str]:
    """The header that carries a studio app's token."""
    return {"Authorization": f"Bearer {app.state.token}"}


def studio_client(app: Any) -> Any:
    """A Starlette TestClient of a studio app as its owner's scripts call it: a local Host and the token."""
    from starlette.testclient import TestClient

    return TestClient(app, base_url="http://127.0.0.1", headers=auth(app))


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 in a background thread; yields its base URL; stops it on exit."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the studio test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def events_so_far(client: Any, thread_id: str) -> list[dict[str, Any]]:
    """The events of a thread up to now (``follow=0``: the stream ends after the replay)."""
    response = client.get(f"/api/runs/{thread_id}/events", params={"follow": "0"})
    assert response.status_code == 200, response.text
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def wait_state(client: Any, thread_id: str, states: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
    """Poll a thread until its state is one of ``states``; returns its summary."""
    deadline = time.monotonic() + timeout
    while True:
        summary = client.get(f"/api/runs/{thread_id}").json()
        if summary["state"] in states:
            return dict(summary)
        if summary["state"] == "failed" or time.monotonic() > deadline:  # failed is final: say why at once
            errors = [e["message"] for e in events_so_far(client, thread_id) if e["type"] == "error"]
            raise AssertionError(f"thread {thread_id} stayed {summary['state']!r}, expected one of {states}; "
                                 f"its errors: {errors}")
        time.sleep(0.05)
