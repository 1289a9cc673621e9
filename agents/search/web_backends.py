"""Web search backends: :class:`DuckDuckGoBackend` (no key) and :class:`TavilyBackend` (``TAVILY_API_KEY``).

Both derive from :class:`_WebBackend`, which adds a query cache, a process-wide polite rate limiter and
optional page fetching around one engine-specific ``_raw_search``. The engine-independent plumbing
(SQLite cache, rate limiter, page fetcher) lives in :mod:`agents.search.web`; the offline BM25 index in
:mod:`agents.search.backends`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from agents.search.contract import Hit, MissingSearchExtraError, SearchConfigError, SearchError
from agents.search.web import PageFetcher, RateLimiter, SearchCache, default_cache_path

__all__ = ["DuckDuckGoBackend", "TavilyBackend"]


_LIMITERS: dict[tuple[str, float], RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def _shared_limiter(name: str, min_interval: float) -> RateLimiter:
    # One limiter per service and interval for the whole process: politeness must hold across the many
    # backend instances a compiled multi-agent graph creates, not only within one of them.
    with _LIMITERS_LOCK:
        key = (name, float(min_interval))
        if key not in _LIMITERS:
            _LIMITERS[key] = RateLimiter(min_interval)
        return _LIMITERS[key]


class _WebBackend:
    """Shared machinery: query cache, polite rate limiting, optional page fetching.

    Keyword arguments of every web backend: ``cache_path`` (default :func:`~agents.search.web.default_cache_path`),
    ``cache`` (``False`` turns caching off), ``cache_ttl`` (seconds), ``min_interval``
    (seconds between requests to the service, shared by all instances in the process unless ``limiter``
    is given), ``fetch_pages`` (replace snippets by the pages' text), ``max_page_chars``, ``http_client``
    (an ``httpx.Client``-like object for page fetching) and ``timeout`` (seconds).
    """

    name = "web"

    def __init__(
        self,
        *,
        cache_path: str | os.PathLike[str] | None = None,
        cache: bool = True,
        cache_ttl: float | None = 7 * 24 * 3600,
        min_interval: float = 1.0,
        limiter: RateLimiter | None = None,
        fetch_pages: bool = False,
        max_page_chars: int = 8000,
        http_client: Any | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.cache = SearchCache(cache_path or default_cache_path(), ttl=cache_ttl) if cache else None
        self.limiter = limiter if limiter is not None else _shared_limiter(self.name, min_interval)
        self.fetch_pages = fetch_pages
        self.max_page_chars = max_page_chars
        self.timeout = timeout
        self._fetcher: PageFetcher | None = None
        self._http_client = http_client
        self._fetcher_lock = threading.Lock()

    def _fetch(self) -> PageFetcher:
        with self._fetcher_lock:
            if self._fetcher is None:
                self._fetcher = PageFetcher(
                    client=self._http_client, cache=self.cache, limiter=self.limiter,
                    max_chars=self.max_page_chars, timeout=self.timeout,
                )
            return self._fetcher

    def _raw_search(self, query: str, k: int) -> list[Hit]:
        raise NotImplementedError

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Search the web: cached results when fresh, else one rate-limited request; raises SearchError."""
        query = query.strip() if isinstance(query, str) else ""
        if not query or k <= 0:
            return []
        key = f"{self.name}|{k}|{query}"
        hits: list[Hit] | None = None
        if self.cache is not None:
            cached = self.cache.get("query", key)
            if cached is not None:
                hits = [Hit(**h) for h in json.loads(cached)]
        if hits is None:
            self.limiter.wait()
            try:
                hits = self._raw_search(query, k)
            except (SearchError, SearchConfigError):
                raise
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
                raise SearchError(f"{self.name} search for {query!r} failed: {reason}") from exc
            if self.cache is not None:
                self.cache.put("query", key, json.dumps([asdict(h) for h in hits]))
        if self.fetch_pages:
            hits = [self._with_page(h) for h in hits]
        return hits[:k]

    def _with_page(self, hit: Hit) -> Hit:
        if not hit.url:
            return hit
        text = self._fetch().fetch(hit.url)
        if not text:  # fetch failed or page empty: keep the snippet rather than lose the hit
            return hit
        return Hit(id=hit.id, title=hit.title, text=text, url=hit.url, score=hit.score)

    def close(self) -> None:
        """Close the HTTP client and the cache."""
        if self._fetcher is not None:
            self._fetcher.close()
        if self.cache is not None:
            self.cache.close()


class DuckDuckGoBackend(_WebBackend):
    """Web search through DuckDuckGo and friends (package ``ddgs``, no API key).

    Args:
        client: Replaces the ``ddgs.DDGS`` object: anything with ``text(query, max_results=k)`` returning
            dicts with ``title``, ``href`` and ``body`` (tests pass a recorded fake).
        region: ``ddgs``' region code.
        safesearch: ``ddgs``' safe-search level.
        backend: ``ddgs``' search backend.
        **kwargs: The keyword arguments of every web backend (cache, ``min_interval``, ``fetch_pages``,
            ``max_page_chars``, ``http_client``, ``timeout``).

    Raises:
        MissingSearchExtraError: No ``client`` and ``ddgs`` is not installed.
    """

    name = "ddg"

    def __init__(
        self,
        *,
        client: Any | None = None,
        region: str = "wt-wt",
        safesearch: str = "moderate",
        backend: str = "auto",
        **kwargs: Any,
    ) -> None:
        if client is None:
            try:
                from ddgs import DDGS
            except ImportError as exc:
                raise MissingSearchExtraError("DuckDuckGoBackend", "ddgs") from exc
            self._factory: Callable[[], Any] = lambda: DDGS(timeout=int(self.timeout))
        else:
            self._factory = lambda: client
        self.region, self.safesearch, self.ddg_backend = region, safesearch, backend
        super().__init__(**kwargs)

    def _raw_search(self, query: str, k: int) -> list[Hit]:
        client = self._factory()
        try:
            rows = client.text(
                query, max_results=k, region=self.region, safesearch=self.safesearch, backend=self.ddg_backend
            )
        except Exception as exc:
            # ddgs signals "nothing found" with an exception; that is an empty result, not a failure.
            if "no results" in str(exc).lower():
                return []
            raise
        hits = []
        for i, row in enumerate(rows or []):
            url = str(row.get("href") or row.get("url") or "")
            hits.append(
                Hit(id=url or f"ddg-{i}", title=str(row.get("title") or ""), text=str(row.get("body") or ""),
                    url=url, score=float(len(rows) - i))
            )
        return hits


class TavilyBackend(_WebBackend):
    """Web search through the Tavily API (``TAVILY_API_KEY``; package ``tavily-python``).

    Args:
        api_key: The API key (default: ``TAVILY_API_KEY``).
        base_url: Points the official client at another endpoint (tests use a fake server on 127.0.0.1).
        client: Replaces the client object entirely (anything with ``search(query, max_results=k)`` returning
            ``{"results": [{title, url, content, score}]}``).
        search_depth: Tavily's search depth.
        **kwargs: The keyword arguments of every web backend (cache, ``min_interval``, ``fetch_pages``,
            ``max_page_chars``, ``http_client``, ``timeout``).

    Raises:
        SearchConfigError: No ``client`` and no API key.
        MissingSearchExtraError: No ``client`` and ``tavily-python`` is not installed.
    """

    name = "tavily"

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        client: Any | None = None,
        search_depth: str = "basic",
        **kwargs: Any,
    ) -> None:
        if client is None:
            api_key = api_key or os.environ.get("TAVILY_API_KEY")
            if not api_key:
                raise SearchConfigError(
                    "TavilyBackend needs an API key: set the TAVILY_API_KEY environment variable "
                    "(or pass api_key=...)"
                )
            try:
                from tavily import TavilyClient
            except ImportError as exc:
                raise MissingSearchExtraError("TavilyBackend", "tavily-python") from exc
            client = TavilyClient(api_key=api_key, api_base_url=base_url)
        self._client = client
        self.search_depth = search_depth
        super().__init__(**kwargs)

    def _raw_search(self, query: str, k: int) -> list[Hit]:
        reply = self._client.search(query, max_results=k, search_depth=self.search_depth)
        rows = reply.get("results", []) if isinstance(reply, Mapping) else []
        hits = []
        for i, row in enumerate(rows):
            url = str(row.get("url") or "")
            hits.append(
                Hit(id=url or f"tavily-{i}", title=str(row.get("title") or ""),
                    text=str(row.get("content") or ""), url=url, score=float(row.get("score") or 0.0))
            )
        return hits
