"""Who may use the studio: a per-start token, local Host names, same-origin writes, bounded requests and models.

The studio can start runs that spend the user's API keys and shows every prompt and reply, and the browser of
the user runs every web page they visit on the same loopback interface. Binding to 127.0.0.1 therefore keeps
out other machines only; this module keeps out other web pages and other local users too:

* **Token** — every ``/api/*`` route, the event streams included, needs the start's token: the
  ``Authorization: Bearer <token>`` header or the HttpOnly ``SameSite=Strict`` cookie that opening the printed
  URL ``/?token=<token>`` sets (the page then works without ever seeing the token).
* **Host** — only the loopback names (``127.0.0.1``, ``localhost``, ``[::1]``) and those the server was started
  to accept are served, so a page whose DNS name is rebound to 127.0.0.1 gets 403.
* **Writes** — a POST needs ``Content-Type: application/json`` (a form or ``text/plain`` body, which a foreign
  page may send without a CORS preflight, is refused) and an ``Origin`` naming the studio itself when a browser
  sends one; ``Sec-Fetch-Site: cross-site`` is refused.
* **Bounds** — a body larger than :attr:`StudioLimits.max_body_bytes` is answered 413 before it is read (from
  ``Content-Length``, or while it streams in).
* **Page headers** — ``X-Frame-Options: DENY`` and a Content-Security-Policy that allows only the studio's own
  scripts, styles and connections, ``Referrer-Policy: no-referrer`` (the token URL never leaks).
* **Models** — :func:`studio_model_policy` (a :class:`~mas_orchestra.models.policy.ModelPolicy`) decides which
  model strings the page may ask for.

The guard wraps each route (:class:`Guarded`), not the whole app, so the same checks hold when the LangGraph
server merges the studio's routes into its own (``langgraph dev``) without touching the LangGraph API's routes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mas_orchestra.models.policy import ModelPolicy, is_loopback_host
from mas_orchestra.studio.common import StudioInputError
from mas_orchestra.studio.demo import DEMO_ORCHESTRATOR

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

__all__ = [
    "DEFAULT_MODEL_PATTERNS",
    "LOOPBACK_HOSTS",
    "TOKEN_ENV",
    "AccessPolicy",
    "BodyTooLargeError",
    "Guarded",
    "ModelPolicy",
    "StudioLimits",
    "is_loopback_host",
    "new_token",
    "studio_model_policy",
]

#: The environment variable a token may be given in (``--token`` wins).
TOKEN_ENV = "MAS_STUDIO_TOKEN"
#: Host names always served.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: Model strings the page may always ask for: the local embedded model, scripted replies and the demo.
DEFAULT_MODEL_PATTERNS = ("embedded", "scripted:*", DEMO_ORCHESTRATOR)  # the first two: BASE_MODEL_PATTERNS

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: What the page may load: its own files only (no inline script, no framing, no foreign connection).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def new_token() -> str:
    """A random token (192 bits, URL-safe)."""
    return secrets.token_urlsafe(24)


def _host_name(value: str) -> str:
    """The name of a ``Host`` header value (``[::1]:8123`` → ``::1``, ``localhost:8123`` → ``localhost``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class StudioLimits:
    """The studio's bounds (each a ``mas-orchestra studio`` flag; the defaults are for one person's machine).

    Attributes:
        max_body_bytes: largest request body (``--max-body-bytes``); larger ones get 413 before being read.
        max_live_runs: runs executing at once (``--max-live-runs``); one more gets 429.
        max_streams: open event streams (``--max-streams``); one more gets 429.
        max_run_timeout_s: ceiling of a run's time-out (``--max-run-timeout``); a run without one gets it.
        keep_finished: finished threads kept in memory (``--keep-finished``); older ones are dropped and
            reopened from the database when asked for.
    """

    max_body_bytes: int = 1 << 20
    max_live_runs: int = 4
    max_streams: int = 32
    max_run_timeout_s: float = 900.0
    keep_finished: int = 100

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_live_runs", "max_streams", "keep_finished"):
            if getattr(self, name) < 1:
                raise StudioInputError(f"studio limit {name} must be at least 1, got {getattr(self, name)}")
        if not self.max_run_timeout_s > 0:
            raise StudioInputError(f"studio limit max_run_timeout_s must be > 0, got {self.max_run_timeout_s}")


def studio_model_policy(extra: Iterable[str] = (), **options: Any) -> ModelPolicy:
    """The studio's :class:`ModelPolicy`: :data:`DEFAULT_MODEL_PATTERNS`, the server's own default models
    (``$MAS_ORCHESTRATOR``, ``$MAS_SUBAGENT``) and ``extra`` (``--allow-model``), with the flags in ``options``
    (``allow_python_models``, ``allow_remote_vllm``, ``allow_hf_paths``).

    Args:
        extra: The ``--allow-model`` patterns.
        **options: The policy's flags.
    """
    return ModelPolicy.with_extra([DEMO_ORCHESTRATOR, *extra], **options)


class BodyTooLargeError(StudioInputError):
    """A request body over the limit (HTTP 413).

    Args:
        limit: The limit in bytes.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes (--max-body-bytes)", status=413)


@dataclass
class AccessPolicy:
    """The token, the Host names served and the body limit, shared by every guarded route.

    Attributes:
        token: the secret of this start (see :func:`new_token`).
        allowed_hosts: Host names served besides the loopback ones (``--host``, ``--allow-host``).
        max_body_bytes: largest request body.
    """

    token: str
    allowed_hosts: frozenset[str] = frozenset()
    max_body_bytes: int = StudioLimits.max_body_bytes

    def __post_init__(self) -> None:
        if len(self.token) < 8:
            raise StudioInputError("the studio token must have at least 8 characters (--token / $MAS_STUDIO_TOKEN)")
        self.allowed_hosts = frozenset(h.strip().strip("[]").lower() for h in self.allowed_hosts if h.strip())

    @property
    def cookie_name(self) -> str:
        """The cookie of this token: studios on other ports (cookies ignore ports) each keep their own."""
        return "mas_studio_" + hashlib.sha256(self.token.encode()).hexdigest()[:12]

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether a ``Host`` header names this machine (loopback) or a host allowed with ``--allow-host``.

        Args:
            host_header: The ``Host`` header (missing: not allowed).
        """
        if not host_header:
            return False
        name = _host_name(host_header)
        return is_loopback_host(name) or name in self.allowed_hosts

    def token_matches(self, candidate: str | None) -> bool:
        """Whether ``candidate`` is the token (compared in constant time).

        Args:
            candidate: The token a request carries, if any.
        """
        return bool(candidate) and hmac.compare_digest(str(candidate).encode(), self.token.encode())

    def authorized(self, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        """Whether a request carries the token: ``Authorization: Bearer <token>`` or the studio's cookie.

        Args:
            headers: The request's headers (lower-case names).
            cookies: The request's cookies.
        """
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(value.strip()):
            return True
        return self.token_matches(cookies.get(self.cookie_name))

    def cookie_header(self) -> str:
        """The ``Set-Cookie`` value that gives a browser the token (HttpOnly, SameSite=Strict)."""
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _cookies(header: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = value
    return out


async def _refuse(send: Any, status: int, message: str, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    import json

    body = json.dumps({"error": message, "problems": [message]}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), *SECURITY_HEADERS, *extra]})
    await send({"type": "http.response.body", "body": body})


def _origin_problem(headers: dict[str, str]) -> str | None:
    """Why a state-changing request from a browser is not from the studio's own page (``None``: it is)."""
    if headers.get("sec-fetch-site", "") == "cross-site":
        return "a cross-site request (Sec-Fetch-Site: cross-site) may not change anything here"
    origin = headers.get("origin")
    if origin is None:
        return None  # not sent by a browser page (a script with the token); browsers always send it on POST
    parts = urlsplit(origin)
    if origin == "null" or parts.scheme not in ("http", "https") or parts.netloc.lower() != headers.get(
            "host", "").lower():
        host = headers.get("host", "?")
        return f"Origin {origin!r} is not this studio ({host}); requests from other pages are refused"
    return None


class Guarded:
    """``app`` (an ASGI app: a route's endpoint or the static files) behind the studio's checks.

    An ASGI app that answers 403 (Host, Origin), 401 (token), 415 (content type) or 413 (body size) itself
    and adds the security headers to every response of ``app``. A class, not a closure: Starlette's ``Route``
    takes a plain function as a request handler, an object as an ASGI app.

    Args:
        app: the ASGI app to protect.
        policy: token, Host names and body limit.
        api: whether it is an ``/api/*`` route (token required; writes checked) or a public asset.
    """

    def __init__(self, app: Any, policy: AccessPolicy, *, api: bool) -> None:
        self.app = app
        self.policy = policy
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope`` if it passes the policy's checks; else answer with the refusal."""
        app, policy, api = self.app, self.policy, self.api
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = _headers(scope)
        if not policy.host_allowed(headers.get("host")):
            await _refuse(send, 403, f"Host {headers.get('host', '')!r} is not served here: open the studio as "
                                     "127.0.0.1 or localhost (or start it with --allow-host NAME)")
            return
        method = scope["method"].upper()
        if api:
            if not policy.authorized(headers, _cookies(headers.get("cookie", ""))):
                await _refuse(send, 401, "this needs the studio's token: open the URL printed at start-up "
                                         "(/?token=...) or send Authorization: Bearer <token>",
                              [(b"www-authenticate", b'Bearer realm="mas-orchestra studio"')])
                return
            if method not in _SAFE_METHODS:
                problem = _origin_problem(headers)
                if problem:
                    await _refuse(send, 403, problem)
                    return
                media = headers.get("content-type", "").split(";")[0].strip().lower()
                if media != "application/json":
                    await _refuse(send, 415, f"send the body as JSON with Content-Type: application/json "
                                             f"(got {media or 'none'!r})")
                    return
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > policy.max_body_bytes:
            await _refuse(send, 413, f"the request body ({length} bytes) is larger than {policy.max_body_bytes} "
                                     "bytes (--max-body-bytes)")
            return
        received = 0

        async def bounded_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > policy.max_body_bytes:  # a chunked body without Content-Length
                    raise BodyTooLargeError(policy.max_body_bytes)
            return message

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await app(scope, bounded_receive, with_headers)
