"""Web and local search for agents: backends (BM25, DuckDuckGo, Tavily) and the :class:`WebSearchAgent`."""

from agents.search.agent import WebSearchAgent
from agents.search.backends import (
    BM25Backend,
    DuckDuckGoBackend,
    Hit,
    MissingSearchExtraError,
    SearchBackend,
    SearchConfigError,
    SearchError,
    TavilyBackend,
    asearch,
    make_backend,
)

__all__ = [
    "BM25Backend",
    "DuckDuckGoBackend",
    "Hit",
    "MissingSearchExtraError",
    "SearchBackend",
    "SearchConfigError",
    "SearchError",
    "TavilyBackend",
    "WebSearchAgent",
    "asearch",
    "make_backend",
]
