"""BM25 index compatibility, the analysis's missing-extra errors and the search package's import paths."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import agents.search
import agents.search.backends as backends
from agents.search import BM25Backend, MissingSearchExtraError, make_backend
from agents.search.contract import PIP_HINT

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

DOCS = [
    {"id": "runner", "title": "Athletics", "text": "She runs marathons across Europe every year."},
    {"id": "cities", "title": "Urban areas", "text": "The largest cities of Asia are growing."},
    {"id": "quokka", "title": "Quokka", "text": "A small marsupial of Western Australia."},
]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


def _write_legacy_index(corpus: Path, index_dir: Path, stemmer: str) -> None:
    """An index as the hand-written analyser (index format 1) wrote it, valid for ``corpus`` as it is now.

    Its vocabulary holds unstemmed surface words, unlike what the current analysis produces, so reading it
    with today's query analysis would silently miss documents (the query term "run" is not in it).
    """
    import bm25s
    import numpy as np

    rows, offsets, pos = [], [], 0
    for line in corpus.read_bytes().splitlines(keepends=True):
        rows.append(json.loads(line))
        offsets.append(pos)
        pos += len(line)
    texts = [f"{r['title']}\n{r['text']}" for r in rows]
    tokenized = bm25s.tokenize(texts, stopwords=None, stemmer=None, show_progress=False)
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(tokenized, show_progress=False)
    index_dir.mkdir()
    retriever.save(str(index_dir), show_progress=False)
    np.save(index_dir / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    st = corpus.stat()
    fingerprint = {  # field for field what format 1 stored
        "format": 1, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
        "sha1_first_mb": hashlib.sha1(corpus.read_bytes()[: 1 << 20]).hexdigest(),
        "text_fields": ["title", "text"], "stemmer": stemmer,
        "bm25": {"k1": 1.5, "b": 0.75, "method": "lucene"},
    }
    meta = {"fingerprint": fingerprint, "num_docs": len(rows), "created": 0.0}
    (index_dir / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


@pytest.mark.parametrize("old_stemmer", ["light-porter", "pystemmer-english"])
def test_index_written_by_the_old_analyser_is_rebuilt(
    tmp_path: Path, old_stemmer: str, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", DOCS)
    index_dir = tmp_path / "c.jsonl.bm25"
    _write_legacy_index(corpus, index_dir, old_stemmer)
    with caplog.at_level(logging.INFO, logger="agents.search.backends"):
        backend = BM25Backend.from_jsonl(corpus)
    assert not backend.loaded_from_disk and backend.saved
    assert "index format 1" in caplog.text
    meta = json.loads((index_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["fingerprint"]["format"] == 2
    assert meta["fingerprint"]["analysis"]["stemmer"].startswith("pystemmer english")
    # The rebuilt index answers with today's analysis: "run" finds "runs", "city" finds "cities".
    assert [h.id for h in backend.search("run")] == ["runner"]
    assert [h.id for h in backend.search("city")] == ["cities"]
    assert BM25Backend.from_jsonl(corpus).loaded_from_disk  # and the new index is reused from now on


def test_index_of_a_future_or_foreign_format_is_rebuilt(tmp_path: Path) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", DOCS)
    BM25Backend.from_jsonl(corpus)
    meta_path = tmp_path / "c.jsonl.bm25" / "meta.json"
    for fingerprint in ({"format": 99}, None, "not a dict"):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["fingerprint"] = fingerprint
        meta_path.write_text(json.dumps(meta), encoding="utf-8")
        again = BM25Backend.from_jsonl(corpus)
        assert not again.loaded_from_disk and again.saved, fingerprint
        assert [h.id for h in again.search("marsupial")] == ["quokka"]


def test_changed_stop_words_rebuild_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", DOCS)
    assert BM25Backend.from_jsonl(corpus).saved
    assert BM25Backend.from_jsonl(corpus).loaded_from_disk
    monkeypatch.setattr(backends, "_EXTRA_STOPWORDS", (*backends._EXTRA_STOPWORDS, "marsupial"))
    changed = BM25Backend.from_jsonl(corpus)
    assert not changed.loaded_from_disk and changed.saved
    assert changed.search("marsupial") == []  # now a stop word, in the index and in queries


def test_shipped_index_of_the_old_analyser_is_rebuilt(tmp_path: Path) -> None:
    """The HotpotQA index in shared/data was written by the hand-written analyser (format 1)."""
    src = DATA / "hotpotqa_corpus.jsonl"
    src_index = DATA / "hotpotqa_corpus.jsonl.bm25"
    if not (src.is_file() and (src_index / "meta.json").is_file()):
        pytest.skip(f"HotpotQA corpus and its saved index not found in {DATA}")
    corpus = tmp_path / src.name
    shutil.copy(src, corpus)
    index_dir = tmp_path / src_index.name
    shutil.copytree(src_index, index_dir)
    for path in [index_dir, *index_dir.iterdir()]:  # shared/ is read-only and copies keep its modes
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    old = json.loads((index_dir / "meta.json").read_text(encoding="utf-8"))["fingerprint"]
    sha1 = hashlib.sha1(corpus.read_bytes()[: 1 << 20]).hexdigest()
    if old.get("format") != 1 or (old.get("size"), old.get("sha1_first_mb")) != (corpus.stat().st_size, sha1):
        pytest.skip("the shipped index is not a format-1 index of this corpus")
    # The copy gets the modification time the index recorded: the corpus looks untouched since indexing,
    # so only the analysis (the index format) tells the old index apart.
    os.utime(corpus, ns=(old["mtime_ns"], old["mtime_ns"]))
    backend = BM25Backend.from_jsonl(corpus)
    assert not backend.loaded_from_disk and backend.saved
    assert json.loads((index_dir / "meta.json").read_text(encoding="utf-8"))["fingerprint"]["format"] == 2
    hits = backend.search("VIVA Media AG changed its name in 2004", k=5)
    assert "VIVA Media" in {h.title for h in hits}


@pytest.mark.parametrize("module, package", [("Stemmer", "PyStemmer"), ("bm25s", "bm25s")])
def test_missing_analysis_package_is_a_typed_error_with_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, package: str
) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", DOCS)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` raise ImportError
    for build in (lambda: BM25Backend.from_documents(DOCS), lambda: make_backend(f"bm25:{corpus}")):
        with pytest.raises(MissingSearchExtraError) as err:
            build()
        assert isinstance(err.value, ImportError)  # callers that catch ImportError keep working
        assert err.value.package == package
        assert err.value.extra == "search"
        assert err.value.command == PIP_HINT == "pip install 'mas-orchestra[search]'"
        assert f"'{package}'" in str(err.value) and PIP_HINT in str(err.value)
    assert not (tmp_path / "c.jsonl.bm25").exists()  # failed before touching the disk


def test_concurrent_searches_match_sequential_ones() -> None:
    words = ["marsupial", "cities", "running", "europe", "asia", "australia", "quokka", "year"]
    docs = [{"id": f"d{i}", "title": words[i % 8], "text": " ".join(words[(i * j) % 8] for j in range(1, 6))}
            for i in range(200)]
    backend = BM25Backend.from_documents(docs)
    queries = [f"{a} {b}" for a in words for b in words]
    expected = {q: backend.search(q, k=5) for q in queries}
    results: dict[int, dict[str, Any]] = {}

    def worker(n: int) -> None:
        results[n] = {q: backend.search(q, k=5) for q in queries[n % 7 :] + queries[: n % 7]}

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert all(r == expected for r in results.values())


def test_public_import_paths_still_work() -> None:
    """What README, examples, tests and mas_orchestra import keeps resolving, to the same objects."""
    import agents.search.contract as contract
    import agents.search.web as web
    import agents.search.web_backends as web_backends

    for name in ("DuckDuckGoBackend", "TavilyBackend"):
        assert getattr(agents.search, name) is getattr(backends, name) is getattr(web_backends, name)
    for name in ("Hit", "SearchBackend", "SearchError", "SearchConfigError", "asearch", "PIP_HINT",
                 "MissingSearchExtraError"):
        assert getattr(backends, name) is getattr(contract, name), name
    for name in ("BM25Backend", "make_backend", "WebSearchAgent"):
        assert getattr(agents.search, name) is not None
    assert set(agents.search.__all__) <= set(dir(agents.search))
    assert set(backends.__all__) <= set(dir(backends))
    for name in ("PageFetcher", "RateLimiter", "SearchCache", "default_cache_path",
                 "html_to_text"):
        assert hasattr(web, name), name
