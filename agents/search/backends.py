"""Search backends: the :class:`SearchBackend` protocol, an offline BM25 index and the web backends.

A backend turns a query into ranked :class:`Hit` objects. The offline :class:`BM25Backend` indexes a
local JSONL corpus with ``bm25s`` and keeps the index on disk beside the corpus; the online
:class:`DuckDuckGoBackend` (no key) and :class:`TavilyBackend` (``TAVILY_API_KEY``) live here too and
share the cache, rate limiter and page fetcher of :mod:`agents.search.web`.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agents.search.web import PageFetcher, RateLimiter, SearchCache, default_cache_path

__all__ = [
    "PIP_HINT",
    "BM25Backend",
    "DuckDuckGoBackend",
    "Hit",
    "SearchBackend",
    "SearchConfigError",
    "SearchError",
    "TavilyBackend",
    "asearch",
    "light_stem",
    "make_backend",
]

logger = logging.getLogger(__name__)

PIP_HINT = "pip install 'mas-orchestra[search]'"
"""The install command named in every missing-package error."""


# --------------------------------------------------------------------------------------------------
# Contract
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One search result: a passage with its title, where it came from and how well it matched."""

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

    def search(self, query: str, k: int = 5) -> list[Hit]: ...


class SearchError(RuntimeError):
    """A search could not be carried out (network failure, bad reply); the message names the query."""


class SearchConfigError(ValueError):
    """A backend is misconfigured (e.g. a missing API key); raised when it is constructed."""


async def asearch(backend: SearchBackend, query: str, k: int = 5) -> list[Hit]:
    """Search without blocking the event loop.

    Uses the backend's own coroutine ``asearch`` when it has one, otherwise runs the blocking ``search``
    in a worker thread.
    """
    native = getattr(backend, "asearch", None)
    if native is not None and inspect.iscoroutinefunction(native):
        return list(await native(query, k))
    return list(await asyncio.to_thread(backend.search, query, k))


# --------------------------------------------------------------------------------------------------
# Text analysis: folding, stop words, stemming
# --------------------------------------------------------------------------------------------------

# A conventional English stop list (function words, auxiliaries, question words). Question words matter
# here: queries are often questions and "which"/"what" would otherwise match every question-like passage.
_STOP_LIST = """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can cannot could couldn did didn do does doesn doing don down during each
    few for from further had hadn has hasn have haven having he her here hers herself him himself his how
    i if in into is isn it its itself just ll me more most mustn my myself no nor not now of off on once
    only or other ought our ours ourselves out over own re same shan she should shouldn so some such than
    that the their theirs them themselves then there these they this those through to too under until up
    ve very was wasn we were weren what when where which while who whom whose why will with won would
    wouldn you your yours yourself yourselves also however yet via
"""
STOPWORDS_EN: frozenset[str] = frozenset(_STOP_LIST.split())

_TOKEN_RE = re.compile(r"\w\w+")


def _fold(text: str) -> str:
    """Lower-case and strip accents, so that "Beyoncé" and "Beyonce" meet in the index."""
    text = text.lower()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in "aeiou":
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's *m*: the number of vowel→consonant transitions in ``stem``."""
    m, prev_vowel = 0, False
    for i in range(len(stem)):
        cons = _is_consonant(stem, i)
        if cons and prev_vowel:
            m += 1
        prev_vowel = not cons
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    n = len(word)
    return (
        n >= 3
        and _is_consonant(word, n - 3)
        and not _is_consonant(word, n - 2)
        and _is_consonant(word, n - 1)
        and word[-1] not in "wxy"
    )


_STEP2 = sorted(
    {
        "ational": "ate", "tional": "tion", "enci": "ence", "anci": "ance", "izer": "ize", "bli": "ble",
        "alli": "al", "entli": "ent", "eli": "e", "ousli": "ous", "ization": "ize", "ation": "ate",
        "ator": "ate", "alism": "al", "iveness": "ive", "fulness": "ful", "ousness": "ous", "aliti": "al",
        "iviti": "ive", "biliti": "ble",
    }.items(),
    key=lambda kv: -len(kv[0]),
)
_STEP3 = sorted(
    {"icate": "ic", "ative": "", "alize": "al", "iciti": "ic", "ical": "ic", "ful": "", "ness": ""}.items(),
    key=lambda kv: -len(kv[0]),
)
_STEP4_SUFFIXES = "al ance ence er ic able ible ant ement ment ent ion ou ism ate iti ous ive ize"
_STEP4 = sorted(_STEP4_SUFFIXES.split(), key=lambda s: -len(s))


def _replace_first(word: str, rules: Iterable[tuple[str, str]], min_measure: int) -> str:
    # Porter: only the longest matching suffix of a step is considered, whether or not its condition holds.
    for suffix, repl in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + repl if _measure(stem) > min_measure else word
    return word


def light_stem(word: str) -> str:
    """Stem one lower-case English word (the classic Porter rules, written here from the algorithm).

    Used when PyStemmer is not installed; tokens with digits and very short words are left alone.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    # Step 1a: plurals.
    if word.endswith(("sses", "ies")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # Step 1b: -eed, -ed, -ing.
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif _double_consonant(word) and word[-1] not in "lsz":
                    word = word[:-1]
                elif _measure(word) == 1 and _cvc(word):
                    word += "e"
                break
    # Step 1c: terminal y.
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace_first(word, _STEP2, 0)
    word = _replace_first(word, _STEP3, 0)
    # Step 4: drop suffixes from long stems.
    for suffix in _STEP4:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if _measure(stem) > 1 and (suffix != "ion" or stem.endswith(("s", "t"))):
                word = stem
            break
    # Step 5: final -e and -ll.
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


def _default_stemmer() -> tuple[str, Callable[[str], str]]:
    """PyStemmer's Snowball English stemmer when installed (fast, C), else :func:`light_stem`."""
    try:
        import Stemmer  # type: ignore[import-not-found]
    except ImportError:
        return "light-porter", light_stem
    stemmer = Stemmer.Stemmer("english")
    return "pystemmer-english", stemmer.stemWord


class _Analyzer:
    """Text → stemmed terms, the same way for documents and queries."""

    def __init__(self, stem: Callable[[str], str], stopwords: frozenset[str] = STOPWORDS_EN) -> None:
        self.stem = stem
        self.stopwords = stopwords

    def terms(self, text: str) -> list[str]:
        return [self.stem(t) for t in _TOKEN_RE.findall(_fold(text)) if t not in self.stopwords]

    def encode_corpus(self, texts: Iterable[str]) -> tuple[list[list[int]], dict[str, int]]:
        """Token ids per document and the stem vocabulary, stemming each distinct surface form once."""
        vocab: dict[str, int] = {}
        surface: dict[str, int] = {}  # surface token -> stem id, or -1 for a stop word
        corpus: list[list[int]] = []
        stop, stem = self.stopwords, self.stem
        for text in texts:
            ids: list[int] = []
            for tok in _TOKEN_RE.findall(_fold(text)):
                tid = surface.get(tok)
                if tid is None:
                    tid = -1 if tok in stop else vocab.setdefault(stem(tok), len(vocab))
                    surface[tok] = tid
                if tid >= 0:
                    ids.append(tid)
            corpus.append(ids)
        return corpus, vocab


# --------------------------------------------------------------------------------------------------
# BM25 over a local corpus
# --------------------------------------------------------------------------------------------------

_INDEX_FORMAT = 1
_META = "meta.json"
_OFFSETS = "offsets.npy"
_FINGERPRINT_BYTES = 1 << 20


def _row_hit(row: Mapping[str, Any], index: int, score: float) -> Hit:
    ident = row.get("id")
    return Hit(
        id=str(ident) if ident is not None else str(index),
        title=str(row.get("title") or ""),
        text=str(row.get("text") or ""),
        url=str(row.get("url") or ""),
        score=score,
    )


def _row_text(row: Mapping[str, Any], fields: Sequence[str]) -> str:
    return "\n".join(str(row[f]) for f in fields if row.get(f))


def _corpus_fingerprint(
    path: Path, text_fields: Sequence[str], stemmer: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    stat = path.stat()
    digest = hashlib.sha1()
    with path.open("rb") as fh:
        digest.update(fh.read(_FINGERPRINT_BYTES))
    return {
        "format": _INDEX_FORMAT,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha1_first_mb": digest.hexdigest(),
        "text_fields": list(text_fields),
        "stemmer": stemmer,
        "bm25": dict(params),
    }


class _MemoryStore:
    def __init__(self, rows: list[Mapping[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, indices: Sequence[int]) -> list[Mapping[str, Any]]:
        return [self.rows[i] for i in indices]


class _FileStore:
    """Rows read back from the corpus file by byte offset: the index needs no copy of the texts."""

    def __init__(self, path: Path, offsets: Any) -> None:
        self.path = path
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, indices: Sequence[int]) -> list[Mapping[str, Any]]:
        rows = []
        try:
            # A fresh handle per call keeps concurrent searches (threads) from sharing a file position.
            with self.path.open("rb") as fh:
                for i in indices:
                    fh.seek(int(self.offsets[i]))
                    rows.append(json.loads(fh.readline()))
        except (OSError, ValueError) as exc:
            raise SearchError(
                f"cannot read documents from {self.path} ({exc}); was the corpus changed after indexing? "
                "Construct the backend again to rebuild the index."
            ) from exc
        return rows


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    rows: list[dict[str, Any]] = []
    offsets: list[int] = []
    pos = 0
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            start, pos = pos, pos + len(line)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not a JSON object ({exc})") from exc
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
            offsets.append(start)
    return rows, offsets


class BM25Backend:
    """Okapi BM25 over a fixed corpus of ``{id, title, text[, url]}`` rows (``bm25s``).

    Build with :meth:`from_jsonl` (index cached on disk beside the corpus) or :meth:`from_documents`
    (in memory). Queries and documents share one analyzer: accent folding, English stop words and
    stemming. Thread-safe for concurrent searches.

    Attributes:
        loaded_from_disk: ``True`` when the index was read from a saved directory instead of built.
        index_path: where the index is (or would be) saved; ``None`` for in-memory backends.
        saved: ``True`` when this construction wrote the index to ``index_path``.
        build_seconds: time spent building (0.0 when loaded).
    """

    name = "bm25"

    def __init__(
        self,
        documents: Sequence[Mapping[str, Any]],
        *,
        text_fields: Sequence[str] = ("title", "text"),
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        """Index ``documents`` in memory (same as :meth:`from_documents`)."""
        rows = list(documents)
        self._setup(text_fields, k1, b)
        self._store: _MemoryStore | _FileStore = _MemoryStore(rows)
        self._retriever = self._build(rows)
        self.index_path: Path | None = None

    def _setup(self, text_fields: Sequence[str], k1: float, b: float) -> None:
        if isinstance(text_fields, str):
            text_fields = (text_fields,)
        if not text_fields:
            raise ValueError("text_fields must name at least one field")
        self.text_fields = tuple(text_fields)
        self.params = {"k1": float(k1), "b": float(b), "method": "lucene"}
        self.stemmer_name, stem = _default_stemmer()
        self._analyzer = _Analyzer(stem)
        self.loaded_from_disk = False
        self.saved = False
        self.build_seconds = 0.0

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Mapping[str, Any]],
        *,
        text_fields: Sequence[str] = ("title", "text"),
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Backend:
        """An in-memory index over ``documents``: dicts with ``id``, ``title``, ``text``, optional ``url``."""
        return cls(documents, text_fields=text_fields, k1=k1, b=b)

    @classmethod
    def from_jsonl(
        cls,
        path: str | os.PathLike[str],
        text_fields: Sequence[str] = ("title", "text"),
        index_dir: str | os.PathLike[str] | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        mmap: bool = False,
    ) -> BM25Backend:
        """Index a JSONL corpus, reusing the index saved in ``index_dir`` (default ``<corpus>.bm25/``).

        The saved index carries a fingerprint of the corpus (size, mtime, SHA-1 of its first MiB) and of
        the analysis settings; when it does not match, the index is rebuilt and saved again. When the
        directory cannot be written the backend still works, in memory, and logs a warning.
        """
        corpus = Path(path)
        if not corpus.is_file():
            raise FileNotFoundError(f"BM25 corpus not found: {corpus}")
        self = cls.__new__(cls)
        self._setup(text_fields, k1, b)
        default_dir = corpus.with_name(corpus.name + ".bm25")
        self.index_path = Path(index_dir) if index_dir is not None else default_dir
        fingerprint = _corpus_fingerprint(corpus, self.text_fields, self.stemmer_name, self.params)
        if self._try_load(corpus, fingerprint, mmap=mmap):
            return self
        rows, offsets = _read_jsonl(corpus)
        self._retriever = self._build(rows)
        import numpy as np

        self._store = _FileStore(corpus, np.asarray(offsets, dtype=np.int64))
        del rows
        self._try_save(fingerprint)
        return self

    # -- building, saving, loading -------------------------------------------------------------------

    def _build(self, rows: Sequence[Mapping[str, Any]]) -> Any:
        bm25s = _import_bm25s()
        started = time.perf_counter()
        ids, vocab = self._analyzer.encode_corpus(_row_text(r, self.text_fields) for r in rows)
        retriever = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method=self.params["method"])
        if rows:
            retriever.index((ids, vocab), show_progress=False)
        self._num_docs = len(rows)
        self.build_seconds = time.perf_counter() - started
        logger.info("BM25 index of %d documents built in %.2fs", len(rows), self.build_seconds)
        return retriever

    def _try_load(self, corpus: Path, fingerprint: Mapping[str, Any], *, mmap: bool) -> bool:
        assert self.index_path is not None
        meta_path = self.index_path / _META
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if meta.get("fingerprint") != fingerprint:
            logger.info("BM25 index at %s is stale (corpus or settings changed); rebuilding", self.index_path)
            return False
        started = time.perf_counter()
        try:
            import numpy as np

            bm25s = _import_bm25s()
            offsets = np.load(self.index_path / _OFFSETS, mmap_mode="r" if mmap else None)
            retriever = bm25s.BM25.load(str(self.index_path), mmap=mmap, show_progress=False)
        except Exception as exc:  # a half-written or foreign directory: rebuild rather than fail
            logger.warning("could not load BM25 index at %s (%s); rebuilding", self.index_path, exc)
            return False
        if len(offsets) != meta.get("num_docs"):
            return False
        self._retriever = retriever
        self._store = _FileStore(corpus, offsets)
        self._num_docs = len(offsets)
        self.loaded_from_disk = True
        logger.info("BM25 index loaded from %s in %.3fs", self.index_path, time.perf_counter() - started)
        return True

    def _try_save(self, fingerprint: Mapping[str, Any]) -> None:
        assert self.index_path is not None and isinstance(self._store, _FileStore)
        target = self.index_path
        tmp: Path | None = None
        try:
            import numpy as np

            target.parent.mkdir(parents=True, exist_ok=True)
            # Build in a sibling directory and swap it in, so a reader never sees a half-written index.
            tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
            if self._num_docs:
                self._retriever.save(str(tmp), show_progress=False)
            np.save(tmp / _OFFSETS, np.asarray(self._store.offsets, dtype=np.int64))
            meta = {"fingerprint": dict(fingerprint), "num_docs": self._num_docs, "created": time.time()}
            (tmp / _META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
            tmp = None
            self.saved = True
        except OSError as exc:
            logger.warning("BM25 index not saved to %s (%s); using it in memory only", target, exc)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    # -- querying ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._num_docs

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The top ``k`` documents for ``query``; ``[]`` for an empty query or one of only stop words."""
        if not isinstance(query, str) or k <= 0 or self._num_docs == 0:
            return []
        vocab = self._retriever.vocab_dict
        terms = list(dict.fromkeys(t for t in self._analyzer.terms(query) if t in vocab))
        if not terms:
            return []
        import numpy as np

        scores = self._retriever.get_scores(terms)
        k = min(k, self._num_docs)
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        # Stable order: score descending, then corpus position, so equal scores rank reproducibly.
        order = sorted((int(i) for i in top if scores[i] > 0), key=lambda i: (-float(scores[i]), i))
        rows = self._store.get(order)
        return [_row_hit(row, i, float(scores[i])) for row, i in zip(rows, order, strict=True)]


def _import_bm25s() -> Any:
    try:
        import bm25s
    except ImportError as exc:
        raise ImportError(f"the BM25 backend needs the 'bm25s' package: {PIP_HINT}") from exc
    return bm25s


# --------------------------------------------------------------------------------------------------
# Web backends
# --------------------------------------------------------------------------------------------------


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

    Keyword arguments of every web backend: ``cache_path`` (default ``~/.cache/mas-orchestra/
    search.sqlite``), ``cache`` (``False`` turns caching off), ``cache_ttl`` (seconds), ``min_interval``
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

    ``client`` replaces the ``ddgs.DDGS`` object: anything with ``text(query, max_results=k)`` returning
    dicts with ``title``, ``href`` and ``body`` (tests pass a recorded fake). The other keyword
    arguments (cache, ``min_interval``, ``fetch_pages``, ``max_page_chars``, ``http_client``) are those
    of every web backend.
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
                raise ImportError(f"DuckDuckGoBackend needs the 'ddgs' package: {PIP_HINT}") from exc
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

    ``base_url`` points the official client at another endpoint (tests use a fake server on
    127.0.0.1); ``client`` replaces the client object entirely (anything with
    ``search(query, max_results=k)`` returning ``{"results": [{title, url, content, score}]}``).
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
                raise ImportError(f"TavilyBackend needs the 'tavily-python' package: {PIP_HINT}") from exc
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


# --------------------------------------------------------------------------------------------------
# Construction from a short spec string
# --------------------------------------------------------------------------------------------------

_VALID_SPECS = '"bm25:<path to corpus.jsonl>", "ddg" (or "duckduckgo"), "tavily"'


def make_backend(spec: str, **kwargs: Any) -> SearchBackend:
    """Build a backend from ``"bm25:<path>"``, ``"ddg"`` or ``"tavily"``; extra kwargs go to its constructor.

    Raises:
        ValueError: for an unknown spec (the message lists the valid forms).
        SearchConfigError: for ``"tavily"`` without ``TAVILY_API_KEY``.
        FileNotFoundError: for a BM25 corpus that does not exist.
    """
    if not isinstance(spec, str):
        raise ValueError(f"search backend spec must be a string, one of {_VALID_SPECS}; got {spec!r}")
    kind, sep, arg = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind == "bm25":
        if not sep or not arg.strip():
            raise ValueError(
                f"'bm25' needs a corpus path, e.g. 'bm25:data/corpus.jsonl'; valid forms: {_VALID_SPECS}"
            )
        return BM25Backend.from_jsonl(os.path.expanduser(arg.strip()), **kwargs)
    if kind in ("ddg", "duckduckgo") and not arg:
        return DuckDuckGoBackend(**kwargs)
    if kind == "tavily" and not arg:
        return TavilyBackend(**kwargs)
    raise ValueError(f"unknown search backend {spec!r}; valid forms: {_VALID_SPECS}")
