"""Plumbing of the web backends: a SQLite cache, a polite rate limiter and page fetching.

Nothing here knows about a particular search engine; the engines in :mod:`agents.search.web_backends`
combine these parts.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from agents.search.contract import MissingSearchExtraError

__all__ = [
    "PageFetcher",
    "RateLimiter",
    "SearchCache",
    "default_cache_path",
    "html_to_text",
]

logger = logging.getLogger(__name__)


def default_cache_path() -> Path:
    """The search cache file of a web backend built without ``cache_path``: ``search.sqlite`` under
    ``$XDG_CACHE_HOME/mas-orchestra`` (``~/.cache/mas-orchestra`` without it).

    This lowest layer reads none of mas-orchestra's own variables: the layers above pass
    :func:`mas_orchestra.environment.search_cache_path` (which honours ``$MAS_SEARCH_CACHE`` and ``$MAS_CACHE_DIR``
    and otherwise equals this path; a test keeps the two rules equal).
    """
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "mas-orchestra" / "search.sqlite"


class SearchCache:
    """A small thread-safe key/value store in SQLite for query results and fetched pages.

    When the file cannot be opened the cache disables itself with a warning instead of failing the search.

    Args:
        path: The SQLite file (its folder is created).
        ttl: Entries older than ``ttl`` seconds are ignored (``None``: never expire).
    """

    def __init__(self, path: str | os.PathLike[str], *, ttl: float | None = None) -> None:
        self.path = Path(path)
        self.ttl = ttl
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS entries ("
                " kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, created REAL NOT NULL,"
                " PRIMARY KEY (kind, key))"
            )
            conn.commit()
            self._conn = conn
        except (OSError, sqlite3.Error) as exc:
            logger.warning("search cache %s unavailable (%s); continuing without a cache", self.path, exc)

    @property
    def enabled(self) -> bool:
        """Whether the cache has an open database (``False`` when it is switched off)."""
        return self._conn is not None

    def get(self, kind: str, key: str) -> str | None:
        """The stored value, or ``None`` when absent, expired or the cache is off.

        Args:
            kind: What is stored (query results or a page).
            key: Its key.

        Returns:
            The value, or ``None``.
        """
        if self._conn is None:
            return None
        with self._lock:
            try:
                row = self._conn.execute(
                    "SELECT value, created FROM entries WHERE kind = ? AND key = ?", (kind, key)
                ).fetchone()
            except sqlite3.Error as exc:
                logger.warning("search cache read failed: %s", exc)
                return None
        if row is None:
            return None
        value, created = row
        if self.ttl is not None and time.time() - created > self.ttl:
            return None
        return value

    def put(self, kind: str, key: str, value: str) -> None:
        """Store ``value`` (a write failure is logged, never raised).

        Args:
            kind: What is stored (query results or a page).
            key: Its key.
            value: The text to store.
        """
        if self._conn is None:
            return
        with self._lock:
            try:
                self._conn.execute(
                    "INSERT OR REPLACE INTO entries (kind, key, value, created) VALUES (?, ?, ?, ?)",
                    (kind, key, value, time.time()),
                )
                self._conn.commit()
            except sqlite3.Error as exc:
                logger.warning("search cache write failed: %s", exc)

    def close(self) -> None:
        """Close the cache's database; later lookups miss."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class RateLimiter:
    """At most one request per ``min_interval`` seconds, across all threads sharing this limiter.

    Args:
        min_interval: Seconds between requests (0: no limit).

    Raises:
        ValueError: ``min_interval`` is negative.
    """

    def __init__(self, min_interval: float = 1.0) -> None:
        if min_interval < 0:
            raise ValueError("min_interval must be >= 0")
        self.min_interval = float(min_interval)
        self._lock = threading.Lock()
        self._next = 0.0

    def wait(self) -> float:
        """Block until the next request may go out; returns the seconds slept."""
        if self.min_interval == 0:
            return 0.0
        # Sleeping while holding the lock is deliberate: waiting threads queue up one interval apart.
        with self._lock:
            now = time.monotonic()
            delay = self._next - now
            if delay > 0:
                time.sleep(delay)
                now = time.monotonic()
            self._next = now + self.min_interval
            return max(delay, 0.0)


_DROP_TAGS = ("script", "style", "noscript", "nav", "header", "footer", "aside", "form", "svg", "iframe",
              "template", "button")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")


def html_to_text(html: str, max_chars: int | None = None) -> str:
    """Readable text of an HTML page: scripts, styles and navigation removed, whitespace collapsed.

    Args:
        html: The page's HTML.
        max_chars: Cap on the text's length (``None``: no cap).

    Returns:
        The text.
    """
    try:
        from bs4 import BeautifulSoup
    except ImportError as exc:
        raise MissingSearchExtraError("page fetching", "beautifulsoup4") from exc
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(list(_DROP_TAGS)):
        tag.decompose()
    lines = (_SPACES.sub(" ", line).strip() for line in soup.get_text("\n").splitlines())
    text = "\n".join(line for line in lines if line)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars].rstrip() + " …"
    return text


class PageFetcher:
    """Fetch pages with ``httpx`` and reduce them to text, cached and rate limited.

    Failures return ``""`` (the caller keeps the search snippet) and are logged.

    Args:
        client: Any object with ``get(url, ...)`` returning an ``httpx.Response``-like object; by default an
            ``httpx.Client`` is created on first use.
        cache: Caches fetched pages (``None``: no cache).
        limiter: Spaces the requests (default: no limit).
        max_chars: Cap on a page's text.
        timeout: Request timeout in seconds of the default client.
        user_agent: The ``User-Agent`` header of the default client.
    """

    def __init__(
        self,
        *,
        client: Any | None = None,
        cache: SearchCache | None = None,
        limiter: RateLimiter | None = None,
        max_chars: int = 8000,
        timeout: float = 10.0,
        user_agent: str = "mas-orchestra/0.1 (research; +https://github.com/)",
    ) -> None:
        self._client = client
        self._own_client = client is None
        self.cache = cache
        self.limiter = limiter or RateLimiter(0.0)
        self.max_chars = max_chars
        self.timeout = timeout
        self.user_agent = user_agent
        self._lock = threading.Lock()

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import httpx
                except ImportError as exc:
                    raise MissingSearchExtraError("page fetching", "httpx") from exc
                self._client = httpx.Client(
                    timeout=self.timeout, follow_redirects=True, headers={"User-Agent": self.user_agent}
                )
            return self._client

    def fetch(self, url: str) -> str:
        """The text of ``url`` capped at ``max_chars``, or ``""`` when it cannot be fetched.

        Args:
            url: The page.

        Returns:
            Its text, or ``""``.
        """
        key = f"{self.max_chars}|{url}"
        if self.cache is not None:
            cached = self.cache.get("page", key)
            if cached is not None:
                return cached
        self.limiter.wait()
        try:
            response = self._http().get(url)
            status = getattr(response, "status_code", 200)
            if status >= 400:
                logger.info("fetching %s: HTTP %s", url, status)
                return ""
            ctype = str(response.headers.get("content-type", "text/html")).lower()
            if "html" in ctype or "xml" in ctype:
                text = html_to_text(response.text, self.max_chars)
            elif ctype.startswith("text/"):
                text = response.text.strip()
                if len(text) > self.max_chars:
                    text = text[: self.max_chars].rstrip() + " …"
            else:  # PDFs, images: nothing we can read here
                logger.info("fetching %s: skipped content type %s", url, ctype)
                return ""
        except ImportError:
            raise
        except Exception as exc:
            logger.info("fetching %s failed: %s", url, exc)
            return ""
        if self.cache is not None:
            self.cache.put("page", key, text)
        return text

    def close(self) -> None:
        """Close the HTTP client this fetcher opened (a client passed in stays open)."""
        with self._lock:
            if self._own_client and self._client is not None:
                self._client.close()
                self._client = None
