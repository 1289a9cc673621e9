"""The contract every search backend shares: :class:`Hit`, :class:`SearchBackend`, the errors and :func:`asearch`.

Kept apart from the backends so that the offline index (:mod:`agents.search.backends`) and the web
backends (:mod:`agents.search.web_backends`) can both build on it without importing each other.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agents.errors import MasOrchestraError, MissingExtraError, install_command

__all__ = [
    "PIP_HINT",
    "Hit",
    "MissingSearchExtraError",
    "SearchBackend",
    "SearchConfigError",
    "SearchError",
    "asearch",
]

SEARCH_EXTRA = "search"
PIP_HINT = install_command(SEARCH_EXTRA)
"""The install command named in every missing-package error."""


@dataclass(frozen=True)
class Hit:
    """One search result: a passage with its title, where it came from and how well it matched.

    Attributes:
        id: The document's id.
        title: Its title.
        text: The passage.
        url: Where it came from (empty for a local corpus).
        score: How well it matched (backend-specific scale).
    """

    id: str
    title: str
    text: str
    url: str = ""
    score: float = 0.0

    def source(self) -> dict[str, str]:
        """The citation of this hit: ``{id, title, url}``."""
        return {"id": self.id, "title": self.title, "url": self.url}


@runtime_checkable
class SearchBackend(Protocol):
    """Anything with ``search(query, k) -> list[Hit]``; an ``async asearch(query, k)`` twin is optional."""

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` best hits for ``query``, best first.

        Args:
            query: The search text.
            k: Most hits returned.
        """
        ...


class SearchError(MasOrchestraError, RuntimeError):
    """A search could not be carried out (network failure, bad reply); the message names the query."""


class SearchConfigError(MasOrchestraError, ValueError):
    """A backend is misconfigured (e.g. a missing API key); raised when it is constructed."""


class MissingSearchExtraError(MissingExtraError):
    """A package of the ``search`` extra is not installed; the message carries the exact ``pip install``.

    The shared :class:`agents.errors.MissingExtraError` (same attributes: ``extra``, ``command``,
    ``package``) with the extra fixed to ``search``: ``except MissingExtraError`` and ``except ImportError``
    both catch it.

    Args:
        what: What needed it (``"the BM25 backend"``).
        package: The missing package.
    """

    def __init__(self, what: str, package: str) -> None:
        super().__init__(what, SEARCH_EXTRA, package)


async def asearch(backend: SearchBackend, query: str, k: int = 5) -> list[Hit]:
    """Search without blocking the event loop.

    Uses the backend's own coroutine ``asearch`` when it has one, otherwise runs the blocking ``search``
    in a worker thread.

    Args:
        backend: Any search backend.
        query: The query.
        k: Hits wanted.

    Returns:
        The hits, best first.
    """
    native = getattr(backend, "asearch", None)
    if native is not None and inspect.iscoroutinefunction(native):
        return list(await native(query, k))
    return list(await asyncio.to_thread(backend.search, query, k))
