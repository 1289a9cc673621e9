"""The offline BM25 backend and :func:`make_backend`; also the import path of the whole search API.

:class:`BM25Backend` indexes a local JSONL corpus with ``bm25s`` and keeps the index on disk beside the
corpus. Text analysis is ``bm25s``'s :class:`~bm25s.tokenization.Tokenizer` with its English stop words
and PyStemmer's Snowball English stemmer. The web backends live in :mod:`agents.search.web_backends`
and the shared contract (:class:`Hit`, :class:`SearchBackend`, the errors) in
:mod:`agents.search.contract`; both are re-exported here, so ``from agents.search.backends import
DuckDuckGoBackend`` keeps working.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.search.contract import (
    PIP_HINT,
    Hit,
    MissingSearchExtraError,
    SearchBackend,
    SearchConfigError,
    SearchError,
    asearch,
)
from agents.search.web_backends import DuckDuckGoBackend, TavilyBackend

__all__ = [
    "PIP_HINT",
    "BM25Backend",
    "DuckDuckGoBackend",
    "Hit",
    "MissingSearchExtraError",
    "SearchBackend",
    "SearchConfigError",
    "SearchError",
    "TavilyBackend",
    "asearch",
    "make_backend",
]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Text analysis: bm25s's Tokenizer, its English stop words, PyStemmer's Snowball English stemmer
# --------------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\w\w+")

# Added to bm25s's English list (NLTK's), which lacks them; the hand-written list of index format 1 had
# them. Questions are full of these words ("whose", "would", "could"), and leaving them in cost 2 of 200
# HotpotQA dev questions both gold passages in the top 5 (benchmarks/search_bench.py --hotpotqa-only).
_EXTRA_STOPWORDS = ("also", "cannot", "could", "however", "ought", "via", "whose", "would", "yet")


def _fold_and_split(text: str) -> list[str]:
    """The Tokenizer's splitter: strip accents, then split into runs of two or more word characters.

    bm25s lower-cases but does not fold accents; folding here lets "Beyoncé" and "beyonce" meet.
    """
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _TOKEN_RE.findall(text)


def _import_analysis() -> tuple[Any, Any]:
    """``(bm25s, Stemmer)``, or :class:`MissingSearchExtraError` naming the package and the pip command."""
    try:
        import bm25s
        import bm25s.stopwords
        import bm25s.tokenization
    except ImportError as exc:
        raise MissingSearchExtraError("the BM25 backend", "bm25s") from exc
    try:
        import Stemmer  # type: ignore[import-not-found]  # PyStemmer ships no type information
    except ImportError as exc:
        raise MissingSearchExtraError("the BM25 backend (stemming)", "PyStemmer") from exc
    return bm25s, Stemmer


class _Analysis:
    """Text → stemmed terms, the same way for documents and queries.

    PyStemmer's ``Stemmer`` may be used by one thread at a time and bm25s's ``Tokenizer`` mutates its
    vocabulary while tokenizing, so each thread tokenizes queries with its own pair; the tokenizer's word
    caches are cleared before every query, so they do not grow with the stream of queries.
    """

    def __init__(self) -> None:
        self.bm25s, self._stemmer_module = _import_analysis()
        self._local = threading.local()
        self.stopwords: tuple[str, ...] = (*self.bm25s.stopwords.STOPWORDS_EN_PLUS, *_EXTRA_STOPWORDS)
        stem_version = self._stemmer_module.version()
        self.stemmer_name = f"snowball-english (PyStemmer {stem_version})"
        stop_digest = hashlib.sha1("\n".join(sorted(self.stopwords)).encode("utf-8")).hexdigest()[:16]
        # Everything that changes which terms a text becomes; part of the index fingerprint, so an index
        # written under other analysis settings (or by an older analyser) is rebuilt, never misread.
        self.fingerprint: dict[str, str] = {
            "tokenizer": "bm25s.tokenization.Tokenizer",
            "split": f"lower, nfkd-strip-accents, {_TOKEN_RE.pattern}",
            "stopwords": f"bm25s english_plus + {len(_EXTRA_STOPWORDS)} sha1:{stop_digest}",
            "stemmer": f"pystemmer english {stem_version}",
        }

    def _tokenizer(self) -> Any:
        return self.bm25s.tokenization.Tokenizer(
            lower=True,
            splitter=_fold_and_split,
            stopwords=list(self.stopwords),
            stemmer=self._stemmer_module.Stemmer("english"),
        )

    def encode_corpus(self, texts: list[str]) -> Any:
        """A ``bm25s.tokenization.Tokenized`` (token ids per document, stem vocabulary) for ``texts``."""
        return self._tokenizer().tokenize(texts, update_vocab=True, return_as="tuple", show_progress=False)

    def terms(self, text: str) -> list[str]:
        """The stemmed terms of ``text``, stop words removed, in order (duplicates kept)."""
        tokenizer = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._local.tokenizer = self._tokenizer()
        tokenizer.reset_vocab()
        # streaming_tokenize skips tokenize()'s progress-bar wrapper, which costs more than the analysis.
        ids = next(tokenizer.streaming_tokenize([text], update_vocab=True, allow_empty=False))
        terms: list[str] = tokenizer.decode([ids])[0]
        return terms


# --------------------------------------------------------------------------------------------------
# BM25 over a local corpus
# --------------------------------------------------------------------------------------------------

# Bumped whenever the analysis or the on-disk layout changes. 1: the hand-written Porter stemmer and stop
# list; 2: bm25s Tokenizer + bm25s English stop words + PyStemmer. An index of another format is rebuilt.
_INDEX_FORMAT = 2
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
    path: Path, text_fields: Sequence[str], analysis: Mapping[str, str], params: Mapping[str, Any]
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
        "analysis": dict(analysis),
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
        """Index ``documents`` in memory (same as :meth:`from_documents`).

        Args:
            documents: Dicts with ``id``, ``title``, ``text``, optional ``url``.
            text_fields: The fields that are searched.
            k1: BM25's term-frequency saturation.
            b: BM25's length normalisation.

        Raises:
            MissingSearchExtraError: bm25s or PyStemmer is missing (``pip install 'mas-orchestra[search]'``).
            ValueError: No text field named.
        """
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
        self._analysis = _Analysis()  # raises MissingSearchExtraError without bm25s / PyStemmer
        self.stemmer_name = self._analysis.stemmer_name
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

        Args:
            path: The corpus: one ``{id, title, text[, url]}`` object per line.
            text_fields: The fields that are searched.
            index_dir: Where the index is saved (default ``<corpus>.bm25/``).
            k1: BM25's term-frequency saturation.
            b: BM25's length normalisation.
            mmap: Memory-map a saved index instead of reading it into memory.

        Raises:
            FileNotFoundError: The corpus does not exist.
        """
        corpus = Path(path)
        if not corpus.is_file():
            raise FileNotFoundError(f"BM25 corpus not found: {corpus}")
        self = cls.__new__(cls)
        self._setup(text_fields, k1, b)
        default_dir = corpus.with_name(corpus.name + ".bm25")
        self.index_path = Path(index_dir) if index_dir is not None else default_dir
        fingerprint = _corpus_fingerprint(corpus, self.text_fields, self._analysis.fingerprint, self.params)
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
        bm25s = self._analysis.bm25s
        started = time.perf_counter()
        retriever = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method=self.params["method"])
        if rows:
            tokenized = self._analysis.encode_corpus([_row_text(r, self.text_fields) for r in rows])
            retriever.index(tokenized, show_progress=False)
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
        found = meta.get("fingerprint") if isinstance(meta, dict) else None
        if not isinstance(found, dict) or found.get("format") != fingerprint["format"]:
            logger.info("BM25 index at %s has index format %r, this version writes %r; rebuilding",
                        self.index_path, found.get("format") if isinstance(found, dict) else None,
                        fingerprint["format"])
            return False
        if found != fingerprint:
            logger.info("BM25 index at %s is stale (corpus or settings changed); rebuilding", self.index_path)
            return False
        started = time.perf_counter()
        try:
            import numpy as np

            bm25s = self._analysis.bm25s
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
        """The top ``k`` documents for ``query``; ``[]`` for an empty query or one of only stop words.

        Args:
            query: The search text.
            k: Most hits returned (only documents scoring above 0 count).
        """
        if not isinstance(query, str) or k <= 0 or self._num_docs == 0:
            return []
        vocab = self._retriever.vocab_dict
        terms = list(dict.fromkeys(t for t in self._analysis.terms(query) if t in vocab))
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


# --------------------------------------------------------------------------------------------------
# Construction from a short spec string
# --------------------------------------------------------------------------------------------------

_VALID_SPECS = '"bm25:<path to corpus.jsonl>", "ddg" (or "duckduckgo"), "tavily"'


def make_backend(spec: str, *, cache_path: str | os.PathLike[str] | None = None, **kwargs: Any) -> SearchBackend:
    """Build a backend from ``"bm25:<path>"``, ``"ddg"`` or ``"tavily"``.

    Args:
        spec: ``bm25:<corpus.jsonl>``, ``ddg`` or ``tavily``.
        cache_path: The web backends' cache file (ignored by BM25, which reads a local corpus); mas-orchestra's
            callers pass :func:`mas_orchestra.environment.search_cache_path` (``$MAS_SEARCH_CACHE``). ``None``:
            :func:`~agents.search.web.default_cache_path`.
        **kwargs: Passed to the backend's constructor.

    Returns:
        The backend.

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
        return DuckDuckGoBackend(cache_path=cache_path, **kwargs)
    if kind == "tavily" and not arg:
        return TavilyBackend(cache_path=cache_path, **kwargs)
    raise ValueError(f"unknown search backend {spec!r}; valid forms: {_VALID_SPECS}")
