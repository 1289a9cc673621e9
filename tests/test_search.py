"""Search backends and the WebSearchAgent, all offline (fake models, fake clients, 127.0.0.1 servers)."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import Field

from agents.base import AgentResult, SubAgentFormatError
from agents.search import (
    BM25Backend,
    DuckDuckGoBackend,
    Hit,
    SearchBackend,
    SearchConfigError,
    SearchError,
    TavilyBackend,
    WebSearchAgent,
    asearch,
    make_backend,
)
from agents.search.agent import parse_search_request
from agents.search.backends import PIP_HINT, MissingSearchExtraError
from agents.search.web import PageFetcher, RateLimiter, SearchCache, html_to_text

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# --------------------------------------------------------------------------------------------------
# Generated corpora
# --------------------------------------------------------------------------------------------------

_SYLLABLES = [c + v for c in "bdfgklmnprstv" for v in "aeiou"]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def generate_corpus(n_docs: int, *, seed: int = 0, words_per_doc: int = 40) -> list[dict[str, str]]:
    """Deterministic Zipf-ish pseudo-word documents."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng, 6000)
    cum, total = [], 0.0
    for rank in range(1, len(vocab) + 1):
        total += 1.0 / rank**1.05
        cum.append(total)
    flat = rng.choices(vocab, cum_weights=cum, k=n_docs * (words_per_doc + 3))
    docs = []
    for i in range(n_docs):
        chunk = flat[i * (words_per_doc + 3) : (i + 1) * (words_per_doc + 3)]
        docs.append({"id": f"d{i}", "title": " ".join(chunk[:3]), "text": " ".join(chunk[3:])})
    return docs


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def corpus_20k() -> tuple[list[dict[str, str]], dict[str, str]]:
    """20k documents, 30 of which hold one rare (made-up, unique) word each."""
    docs = generate_corpus(20_000, seed=7)
    rng = random.Random(11)
    planted: dict[str, str] = {}
    for n, i in enumerate(rng.sample(range(len(docs)), 30)):
        word = "zq" + "".join(rng.choice("xwjq") for _ in range(6)) + "abc"[n % 3] * 2 + str(n)
        words = docs[i]["text"].split()
        words.insert(rng.randrange(len(words)), word)
        docs[i]["text"] = " ".join(words)
        planted[word] = docs[i]["id"]
    return docs, planted


# --------------------------------------------------------------------------------------------------
# BM25
# --------------------------------------------------------------------------------------------------


def test_rare_word_found_in_20k_documents(corpus_20k: tuple[list[dict[str, str]], dict[str, str]]) -> None:
    docs, planted = corpus_20k
    backend = BM25Backend.from_documents(docs)
    assert len(backend) == 20_000
    # The query mixes the corpus's most frequent words with the rare one, which must decide the ranking.
    counts = Counter(w for d in docs[:2000] for w in d["text"].split())
    common = [w for w, _ in counts.most_common(3)]
    timings = []
    for word, doc_id in planted.items():
        started = time.perf_counter()
        hits = backend.search(f"{' '.join(common)} {word}", k=5)
        timings.append(time.perf_counter() - started)
        assert hits[0].id == doc_id, word
        assert backend.search(word, k=5)[0].id == doc_id
    # Milliseconds per query, not seconds (generous bound for a loaded CI machine).
    assert statistics.median(timings) < 0.05


def test_index_saved_reused_and_rebuilt_when_corpus_changes(tmp_path: Path) -> None:
    docs = generate_corpus(800, seed=3)
    corpus = _write_jsonl(tmp_path / "corpus.jsonl", docs)
    first = BM25Backend.from_jsonl(corpus)
    assert not first.loaded_from_disk and first.saved
    index_dir = tmp_path / "corpus.jsonl.bm25"
    assert (index_dir / "meta.json").is_file()
    meta_mtime = (index_dir / "meta.json").stat().st_mtime_ns

    second = BM25Backend.from_jsonl(corpus)
    assert second.loaded_from_disk and not second.saved
    assert (index_dir / "meta.json").stat().st_mtime_ns == meta_mtime  # not rebuilt
    query = docs[5]["title"]
    assert [h.id for h in first.search(query)] == [h.id for h in second.search(query)]
    assert docs[5]["id"] in [h.id for h in second.search(query)]

    # A changed corpus rebuilds, and the new document is searchable.
    _write_jsonl(corpus, [*docs, {"id": "new", "title": "Quokka", "text": "A zzyzzyxnewword marsupial."}])
    third = BM25Backend.from_jsonl(corpus)
    assert not third.loaded_from_disk and third.saved
    assert third.search("zzyzzyxnewword")[0].id == "new"
    assert BM25Backend.from_jsonl(corpus).loaded_from_disk

    # Other text fields are another index.
    title_only = BM25Backend.from_jsonl(corpus, text_fields=("title",))
    assert not title_only.loaded_from_disk
    assert title_only.search("zzyzzyxnewword") == []
    assert not list(tmp_path.glob("*.tmp-*"))  # no temporary directories left behind


def test_unwritable_index_dir_falls_back_to_memory(tmp_path: Path) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", generate_corpus(50, seed=1))
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    backend = BM25Backend.from_jsonl(corpus, index_dir=blocker / "index")
    assert not backend.saved and not backend.loaded_from_disk
    assert backend.search(generate_corpus(50, seed=1)[3]["title"])


def test_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    docs = generate_corpus(100, seed=2)
    corpus = _write_jsonl(tmp_path / "c.jsonl", docs)
    BM25Backend.from_jsonl(corpus)
    (tmp_path / "c.jsonl.bm25" / "data.csc.index.npy").unlink()
    again = BM25Backend.from_jsonl(corpus)
    assert not again.loaded_from_disk and again.saved
    assert again.search(docs[1]["title"])


def test_edge_queries_and_fields(tmp_path: Path) -> None:
    docs = [
        {"id": "a", "title": "Beyoncé", "text": "An American singer.", "url": "https://example.org/b"},
        {"id": "b", "title": "Cities of Europe", "text": "Paris is the largest city of France."},
        {"id": "c", "title": "Running", "text": "Runners ran in a race."},
    ]
    backend = BM25Backend.from_documents(docs)
    assert backend.search("") == []
    assert backend.search("   ") == []
    assert backend.search("the of and which what is") == []
    assert backend.search("paris", k=0) == []
    assert backend.search("unknownword") == []
    hits = backend.search("beyonce singer", k=50)  # k larger than the corpus
    assert hits and hits[0] == Hit(id="a", title="Beyoncé", text="An American singer.",
                                   url="https://example.org/b", score=hits[0].score)
    assert all(h.score > 0 for h in hits)
    assert backend.search("city")[0].id == "b"  # "cities" and "city" share a stem
    assert backend.search("run")[0].id == "c"
    assert isinstance(backend, SearchBackend)
    empty = BM25Backend.from_documents([])
    assert empty.search("anything") == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        BM25Backend.from_jsonl(bad)
    with pytest.raises(FileNotFoundError):
        BM25Backend.from_jsonl(tmp_path / "missing.jsonl")


def test_corpus_changed_after_loading_is_a_search_error(tmp_path: Path) -> None:
    docs = generate_corpus(20, seed=5)
    corpus = _write_jsonl(tmp_path / "c.jsonl", docs)
    backend = BM25Backend.from_jsonl(corpus)
    corpus.unlink()
    with pytest.raises(SearchError, match="rebuild"):
        backend.search(docs[0]["title"])


# Each group: the first form is in a document, every other form must find that document (stemming).
_INFLECTIONS = [
    ("caresses", "caress"), ("ponies", "pony"), ("cities", "city"), ("running", "runs", "run"),
    ("hopping", "hopped", "hop"), ("relational", "relate", "relations"),
    ("connection", "connected", "connecting", "connects"), ("generalization", "generalize"),
    ("happiness", "happy"),
]


def test_stemming_makes_inflections_meet() -> None:
    docs = [{"id": f"g{i}", "title": f"Entry {i}", "text": f"About {forms[0]} and nothing else."}
            for i, forms in enumerate(_INFLECTIONS)]
    docs.append({"id": "years", "title": "Decades", "text": "Music of the 1990s."})
    backend = BM25Backend.from_documents(docs)
    for i, forms in enumerate(_INFLECTIONS):
        for form in forms:
            hits = backend.search(form, k=3)
            assert [h.id for h in hits] == [f"g{i}"], (form, hits)
    assert backend.search("1990s")[0].id == "years"  # tokens with digits are searchable as written


def test_stop_words_are_ignored() -> None:
    docs = [
        {"id": "q", "title": "Quokka", "text": "The quokka is a small marsupial of Western Australia."},
        {"id": "w", "title": "Words", "text": "Which of them would it be, and whose was it?"},
        {"id": "o", "title": "Other", "text": "A wombat is a marsupial too."},
    ]
    backend = BM25Backend.from_documents(docs)
    # Only stop words (bm25s's English list plus the question words added to it): no match at all,
    # even though document "w" consists of exactly these words.
    assert backend.search("the of and which what is it would whose them be") == []
    # Stop words in a query change nothing: same documents, same scores.
    assert backend.search("what is the quokka") == backend.search("quokka")
    # Document "w" shares every word of this query except "marsupial", and is still not a hit.
    assert {h.id for h in backend.search("which marsupial would it be")} == {"q", "o"}


def test_hotpotqa_recall_at_5(tmp_path: Path) -> None:
    corpus_src, dev_src = DATA / "hotpotqa_corpus.jsonl", DATA / "hotpotqa_dev.jsonl"
    if not (corpus_src.is_file() and dev_src.is_file()):
        pytest.skip(f"HotpotQA data not found in {DATA}")
    corpus = tmp_path / corpus_src.name
    shutil.copy(corpus_src, corpus)  # the index is written beside the copy, never into shared/
    backend = BM25Backend.from_jsonl(corpus)
    lines = dev_src.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line) for line in lines if line.strip()]
    any_gold = both_gold = 0
    for q in questions:
        gold = {title for title, _ in q["supporting_facts"]}
        top = {h.title for h in backend.search(q["question"], k=5)}
        any_gold += bool(gold & top)
        both_gold += gold <= top
    n = len(questions)
    print(f"\nHotpotQA BM25 recall@5: any gold {any_gold}/{n} = {any_gold / n:.3f}; "
          f"both gold {both_gold}/{n} = {both_gold / n:.3f}")
    assert n == 200
    assert any_gold >= 0.9 * n
    assert both_gold >= 0.4 * n


async def test_asearch_helper_prefers_native_coroutine() -> None:
    class SyncOnly:
        def __init__(self) -> None:
            self.thread: int | None = None

        def search(self, query: str, k: int = 5) -> list[Hit]:
            self.thread = threading.get_ident()
            return [Hit(id="s", title=query, text="", url="", score=1.0)]

    class WithAsync(SyncOnly):
        async def asearch(self, query: str, k: int = 5) -> list[Hit]:
            return [Hit(id="a", title=query, text="", url="", score=1.0)]

    sync = SyncOnly()
    assert (await asearch(sync, "q"))[0].id == "s"
    assert sync.thread != threading.get_ident()  # ran in a worker thread
    assert (await asearch(WithAsync(), "q"))[0].id == "a"


# --------------------------------------------------------------------------------------------------
# Web backends (fakes and 127.0.0.1 servers only)
# --------------------------------------------------------------------------------------------------


class FakeDDGS:
    """Recorded ddgs replies; raises what ddgs raises when told to."""

    def __init__(self, rows: list[dict[str, str]] | None = None, error: Exception | None = None) -> None:
        self.rows = rows or []
        self.error = error
        self.calls: list[tuple[str, int]] = []

    def text(self, query: str, max_results: int = 10, **kwargs: Any) -> list[dict[str, str]]:
        self.calls.append((query, max_results))
        if self.error is not None:
            raise self.error
        return self.rows[:max_results]


DDG_ROWS = [
    {"title": "Paris - Wikipedia", "href": "https://en.wikipedia.org/wiki/Paris",
     "body": "Paris is the capital."},
    {"title": "Visit Paris", "href": "https://visit.example/paris", "body": "Tourism in Paris."},
]


def test_ddg_backend_maps_caches_and_wraps_errors(tmp_path: Path) -> None:
    fake = FakeDDGS(DDG_ROWS)
    backend = DuckDuckGoBackend(client=fake, cache_path=tmp_path / "s.sqlite", min_interval=0)
    hits = backend.search("capital of France", k=2)
    assert [h.url for h in hits] == [r["href"] for r in DDG_ROWS]
    assert hits[0].title == "Paris - Wikipedia" and hits[0].text == "Paris is the capital."
    assert backend.search("capital of France", k=2) == hits
    assert len(fake.calls) == 1  # the second search came from the SQLite cache
    # A new backend on the same cache file reuses the stored results too.
    again = DuckDuckGoBackend(client=FakeDDGS(error=RuntimeError("must not be called")),
                              cache_path=tmp_path / "s.sqlite", min_interval=0)
    assert again.search("capital of France", k=2) == hits
    assert backend.search("") == []

    none = DuckDuckGoBackend(client=FakeDDGS(error=RuntimeError("No results found.")), cache=False,
                             min_interval=0)
    assert none.search("zzz") == []
    broken = DuckDuckGoBackend(client=FakeDDGS(error=ConnectionError("connection reset")), cache=False,
                               min_interval=0)
    with pytest.raises(SearchError, match="unreachable query"):
        broken.search("unreachable query")


def test_missing_packages_name_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PIP_HINT == "pip install 'mas-orchestra[search]'"
    monkeypatch.setitem(sys.modules, "ddgs", None)
    with pytest.raises(ImportError) as err:
        DuckDuckGoBackend(cache=False)
    assert PIP_HINT in str(err.value)
    assert isinstance(err.value, MissingSearchExtraError) and err.value.package == "ddgs"
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    monkeypatch.setitem(sys.modules, "tavily", None)
    with pytest.raises(ImportError) as err:
        TavilyBackend(cache=False)
    assert PIP_HINT in str(err.value)
    assert isinstance(err.value, MissingSearchExtraError) and err.value.package == "tavily-python"


def test_real_ddgs_client_is_built_lazily_without_network() -> None:
    pytest.importorskip("ddgs")
    backend = DuckDuckGoBackend(cache=False, timeout=3)
    assert type(backend._factory()).__name__ == "DDGS"  # constructed only; no request is made


def test_tavily_requires_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(SearchConfigError, match="TAVILY_API_KEY"):
        TavilyBackend(cache=False)
    with pytest.raises(ValueError, match="TAVILY_API_KEY"):
        make_backend("tavily", cache=False)


def test_tavily_with_fake_client(tmp_path: Path) -> None:
    class FakeTavily:
        def __init__(self) -> None:
            self.calls = 0

        def search(self, query: str, max_results: int = 5, **kwargs: Any) -> dict[str, Any]:
            self.calls += 1
            if query == "boom":
                raise TimeoutError(60)
            return {"results": [{"title": "T", "url": "https://t.example", "content": "C", "score": 0.9}]}

    fake = FakeTavily()
    backend = TavilyBackend(client=fake, cache_path=tmp_path / "c.sqlite", min_interval=0)
    assert backend.search("q") == [Hit(id="https://t.example", title="T", text="C", url="https://t.example",
                                       score=0.9)]
    backend.search("q")
    assert fake.calls == 1
    with pytest.raises(SearchError, match="boom"):
        backend.search("boom")


class _FakeWeb(BaseHTTPRequestHandler):
    """Tavily's POST /search and a few HTML pages, recorded."""

    requests: list[str] = []  # noqa: RUF012 (shared on purpose: the test reads it)

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(f"POST {self.path} {payload.get('query')}")
        if payload.get("query") == "server error":
            self._send(500, b'{"detail": {"error": "internal"}}', "application/json")
            return
        port = self.server.server_address[1]
        results = [
            {"title": "Eiffel Tower", "url": f"http://127.0.0.1:{port}/eiffel", "content": "Snippet.",
             "score": 0.8}
        ]
        body = json.dumps({"query": payload["query"], "results": results}).encode()
        self._send(200, body, "application/json")

    def do_GET(self) -> None:
        type(self).requests.append(f"GET {self.path}")
        if self.path == "/eiffel":
            html = (
                "<html><head><title>Eiffel</title><style>body{color:red}</style>"
                "<script>var tracking = 1;</script></head><body><nav>Home | Menu</nav>"
                "<p>The Eiffel Tower is in Paris.</p><p>" + "It is tall. " * 200 + "</p></body></html>"
            )
            self._send(200, html.encode(), "text/html; charset=utf-8")
        else:
            self._send(404, b"missing", "text/plain")


@pytest.fixture
def fake_web(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    _FakeWeb.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeWeb)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.server
def test_tavily_client_against_local_server(fake_web: str, tmp_path: Path) -> None:
    pytest.importorskip("tavily")
    backend = TavilyBackend(api_key="tvly-test", base_url=fake_web, cache_path=tmp_path / "c.sqlite",
                            min_interval=0, fetch_pages=True, max_page_chars=300)
    hits = backend.search("eiffel tower", k=3)
    assert len(hits) == 1 and hits[0].title == "Eiffel Tower"
    assert hits[0].text.startswith("Eiffel\nThe Eiffel Tower is in Paris.")  # the page, not the snippet
    assert "tracking" not in hits[0].text and "Menu" not in hits[0].text and "color" not in hits[0].text
    assert len(hits[0].text) <= 302
    assert backend.search("eiffel tower", k=3) == hits
    assert _FakeWeb.requests == ["POST /search eiffel tower", "GET /eiffel"]  # the repeat was cached
    with pytest.raises(SearchError, match="server error"):
        backend.search("server error")
    backend.close()


@pytest.mark.server
def test_page_fetcher_failures_keep_the_snippet(fake_web: str, tmp_path: Path) -> None:
    rows = [{"title": "Gone", "href": f"{fake_web}/missing", "body": "The snippet."}]
    backend = DuckDuckGoBackend(client=FakeDDGS(rows), cache=False, min_interval=0, fetch_pages=True)
    assert backend.search("gone")[0].text == "The snippet."
    fetcher = PageFetcher(max_chars=50)
    assert fetcher.fetch("http://127.0.0.1:9/nothing-listens-here") == ""
    fetcher.close()


def test_html_to_text_strips_boilerplate() -> None:
    html = (
        "<html><head><script>alert(1)</script><style>p{}</style></head><body><header>Logo</header>"
        "<nav><a>Link</a></nav><main><h1>Title</h1><p>First   para.</p><p>Second&nbsp;para.</p></main>"
        "<footer>Copyright</footer></body></html>"
    )
    assert html_to_text(html) == "Title\nFirst para.\nSecond para."
    assert html_to_text(html, max_chars=8) == "Title\nFi …"


def test_rate_limiter_spaces_requests_across_threads() -> None:
    limiter = RateLimiter(0.05)
    stamps: list[float] = []
    lock = threading.Lock()

    def hit() -> None:
        limiter.wait()
        with lock:
            stamps.append(time.monotonic())

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stamps.sort()
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) >= 0.045
    assert RateLimiter(0).wait() == 0.0
    with pytest.raises(ValueError):
        RateLimiter(-1)


def test_web_backends_share_a_rate_limiter_per_service() -> None:
    a = DuckDuckGoBackend(client=FakeDDGS(DDG_ROWS), cache=False, min_interval=0.5)
    b = DuckDuckGoBackend(client=FakeDDGS(DDG_ROWS), cache=False, min_interval=0.5)
    own = RateLimiter(0)
    c = DuckDuckGoBackend(client=FakeDDGS(DDG_ROWS), cache=False, limiter=own)
    assert a.limiter is b.limiter and c.limiter is own


def test_search_cache_ttl_and_unusable_path(tmp_path: Path) -> None:
    cache = SearchCache(tmp_path / "deep" / "c.sqlite", ttl=0.05)
    cache.put("query", "k", "v")
    assert cache.get("query", "k") == "v"
    assert cache.get("page", "k") is None
    time.sleep(0.08)
    assert cache.get("query", "k") is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    broken = SearchCache(blocker / "c.sqlite")
    assert not broken.enabled
    broken.put("query", "k", "v")
    assert broken.get("query", "k") is None


def test_default_cache_path_respects_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from agents.search.web import default_cache_path
    from mas_orchestra import environment

    for name in ("MAS_SEARCH_CACHE", "MAS_ORCHESTRA_SEARCH_CACHE", "MAS_CACHE_DIR", "MAS_ORCHESTRA_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "mas-orchestra" / "search.sqlite"
    # the lowest layer's default and the environment module's rule agree when no MAS_ variable is set
    assert environment.search_cache_path() == default_cache_path()
    backend = DuckDuckGoBackend(client=FakeDDGS(DDG_ROWS), min_interval=0)
    assert backend.cache is not None and backend.cache.path == default_cache_path()
    monkeypatch.setenv("MAS_SEARCH_CACHE", str(tmp_path / "x.sqlite"))
    backend = make_backend("ddg", cache_path=environment.search_cache_path(), client=FakeDDGS(DDG_ROWS),
                           min_interval=0)
    assert isinstance(backend, DuckDuckGoBackend)
    assert backend.cache is not None and backend.cache.path == tmp_path / "x.sqlite"
    monkeypatch.delenv("MAS_SEARCH_CACHE")
    monkeypatch.setenv("MAS_ORCHESTRA_SEARCH_CACHE", str(tmp_path / "old.sqlite"))
    with pytest.warns(DeprecationWarning, match="rename it to MAS_SEARCH_CACHE"):
        assert environment.search_cache_path() == tmp_path / "old.sqlite"


def test_make_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", generate_corpus(30, seed=4))
    backend = make_backend(f"bm25:{corpus}")
    assert isinstance(backend, BM25Backend) and len(backend) == 30
    assert isinstance(make_backend("ddg", client=FakeDDGS(DDG_ROWS), cache=False), DuckDuckGoBackend)
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    pytest.importorskip("tavily")
    assert isinstance(make_backend("tavily", cache=False), TavilyBackend)
    for bad in ("google", "bm25:", "bm25", "ddg:extra", ""):
        with pytest.raises(ValueError, match="bm25:<path"):
            make_backend(bad)
    with pytest.raises(FileNotFoundError):
        make_backend(f"bm25:{tmp_path / 'nope.jsonl'}")


# --------------------------------------------------------------------------------------------------
# WebSearchAgent with scripted models
# --------------------------------------------------------------------------------------------------


class ScriptedChat(BaseChatModel):
    """Replies from a script and records every prompt; ``tools=True`` makes ``bind_tools`` work."""

    script: list[Any] = Field(default_factory=list)
    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    call_kwargs: list[dict[str, Any]] = Field(default_factory=list)
    bound_tools: list[Any] = Field(default_factory=list)
    tools: bool = False
    model_name: str = "scripted-model"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        if not self.tools:
            raise NotImplementedError
        self.bound_tools = list(tools)
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.prompts.append(list(messages))
        self.call_kwargs.append(kwargs)
        item = self.script.pop(0) if self.script else "<answer>out of script</answer>"
        message = item if isinstance(item, AIMessage) else AIMessage(content=item)
        message = message.model_copy(update={"usage_metadata": {"input_tokens": 10, "output_tokens": 3,
                                                                "total_tokens": 13}})
        return ChatResult(generations=[ChatGeneration(message=message)])


class RecordingBackend:
    def __init__(self, docs: list[dict[str, str]], fail: set[str] | None = None) -> None:
        self.inner = BM25Backend.from_documents(docs)
        self.queries: list[str] = []
        self.fail = fail or set()

    def search(self, query: str, k: int = 5) -> list[Hit]:
        self.queries.append(query)
        if query in self.fail or "*" in self.fail:
            raise SearchError(f"ddg search for {query!r} failed: ConnectError: network down")
        return self.inner.search(query, k)


DOCS = [
    {"id": "p1", "title": "Paris", "text": "Paris is the capital and largest city of France.",
     "url": "https://en.wikipedia.org/wiki/Paris"},
    {"id": "p2", "title": "France", "text": "France is a country in Western Europe. Its capital is Paris."},
    {"id": "p3", "title": "Eiffel Tower",
     "text": "The Eiffel Tower is a lattice tower in Paris, built in 1889."},
    {"id": "p4", "title": "Berlin", "text": "Berlin is the capital of Germany."},
]
TASK = "What is the capital of France?"


def _human_texts(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, HumanMessage)]


async def test_text_protocol_searches_then_answers() -> None:
    model = ScriptedChat(script=[
        "I should check the tower.\n<search>Eiffel Tower in Paris</search>\n<answer>invented</answer>",
        "<thinking>[3] says 1889 and [1] says Paris is the capital.</thinking><answer>Paris</answer>",
    ])
    backend = RecordingBackend(DOCS)
    agent = WebSearchAgent(model, backend)
    result = await agent.arun(TASK)
    assert isinstance(result, AgentResult) and result.agent == "search"
    assert result.answer == "Paris"
    assert backend.queries == [TASK, "Eiffel Tower in Paris"]  # the first search is the task itself
    first_prompt = _human_texts(model.prompts[0])[0]
    assert "Paris" in first_prompt and "France" in first_prompt and "capital and largest city" in first_prompt
    assert "<search>" in first_prompt and TASK in first_prompt
    second = model.prompts[1]
    # The reply is kept only up to the request.
    assert isinstance(second[1], AIMessage) and "invented" not in str(second[1].content)
    assert "Eiffel Tower" in str(second[2].content) and "(shown above)" in str(second[2].content)
    assert result.details["mode"] == "text" and result.details["turns"] == 2
    ids = [s["id"] for s in result.details["sources"]]
    assert set(ids[:2]) == {"p1", "p2"} and "p3" in ids and len(ids) == len(set(ids))
    paris = {"id": "p1", "title": "Paris", "url": "https://en.wikipedia.org/wiki/Paris"}
    assert paris in result.details["sources"]
    assert result.usage.calls == 2 and result.usage.input_tokens == 20 and result.usage.output_tokens == 6
    assert result.usage.by_model["scripted-model"].calls == 2
    assert all(kw.get("temperature") == 0.5 for kw in model.call_kwargs)
    # The reply cites [1] and [3]: those are named in the reasoning and listed as cited.
    by_number = {i: s["title"] for i, s in enumerate(result.details["sources"], 1)}
    assert [s["title"] for s in result.details["cited"]] == [by_number[1], by_number[3]]
    assert result.thinking.endswith(f"Sources: {by_number[1]}; {by_number[3]}")


async def test_text_protocol_stops_at_max_turns() -> None:
    model = ScriptedChat(script=["<search>one</search>", "<search>two</search>", "<answer>Paris</answer>"])
    backend = RecordingBackend(DOCS)
    result = await WebSearchAgent(model, backend, max_turns=3).arun(TASK)
    assert result.answer == "Paris" and result.usage.calls == 3
    assert backend.queries == [TASK, "one", "two"]
    last_prompt = _human_texts(model.prompts[-1])[-1]
    assert "No more searches" in last_prompt and "<search>" not in last_prompt

    # A model that never stops searching is still bounded: the last turn only accepts an answer.
    stubborn = ScriptedChat(script=["<search>again</search>"] * 20)
    backend = RecordingBackend(DOCS)
    agent = WebSearchAgent(stubborn, backend, max_turns=2)
    agent.settings.format_retries = 1
    with pytest.raises(SubAgentFormatError):
        await agent.arun(TASK)
    assert backend.queries == [TASK, "again"]
    assert len(stubborn.prompts) == 1 + 2  # one searching turn, then the final turn and one repair


async def test_single_turn_answers_from_the_first_search() -> None:
    model = ScriptedChat(script=["<thinking>[1]</thinking><answer>Paris</answer>"])
    result = await WebSearchAgent(model, RecordingBackend(DOCS), max_turns=1).arun(TASK)
    assert result.answer == "Paris" and result.usage.calls == 1
    prompt = _human_texts(model.prompts[0])[0]
    assert "No more searches" in prompt and "Paris is the capital" in prompt


async def test_reminder_when_reply_has_neither_search_nor_answer() -> None:
    model = ScriptedChat(script=["hmm, let me think", "Answer: Paris"])
    result = await WebSearchAgent(model, RecordingBackend(DOCS)).arun(TASK)
    assert result.answer == "Paris" and result.details["turns"] == 2
    assert "neither a search nor a final answer" in str(model.prompts[1][-1].content)


async def test_backend_failure_becomes_an_observation() -> None:
    model = ScriptedChat(script=["<search>retry</search>", "<answer>unknown</answer>"])
    backend = RecordingBackend(DOCS, fail={"*"})
    result = await WebSearchAgent(model, backend).arun(TASK)
    assert result.answer == "unknown"
    assert "search failed:" in _human_texts(model.prompts[0])[0]
    assert "network down" in str(model.prompts[1][-1].content)
    assert [s["error"] is not None for s in result.details["searches"]] == [True, True]
    assert result.details["sources"] == []


async def test_tool_calling_loop() -> None:
    model = ScriptedChat(tools=True, script=[
        AIMessage(content="", tool_calls=[
            {"name": "think", "args": {"thought": "Check the tower too."}, "id": "c1"},
            {"name": "web_search", "args": {"query": "Eiffel Tower"}, "id": "c2"},
        ]),
        AIMessage(content="", tool_calls=[{"name": "web_search", "args": {}, "id": "c3"},
                                          {"name": "browse", "args": {"url": "x"}, "id": "c4"}]),
        AIMessage(content="<thinking>From [1].</thinking><answer>Paris</answer>"),
    ])
    backend = RecordingBackend(DOCS)
    result = await WebSearchAgent(model, backend).arun(TASK)
    assert result.answer == "Paris" and result.details["mode"] == "tools"
    assert [t["function"]["name"] for t in model.bound_tools] == ["web_search", "think"]
    assert backend.queries == [TASK, "Eiffel Tower"]
    assert result.details["thoughts"] == ["Check the tower too."]
    assert "Paris" in _human_texts(model.prompts[0])[0]
    tool_msgs = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tool_msgs] == ["c1", "c2"]
    assert "Eiffel Tower" in str(tool_msgs[1].content) and "replies left" in str(tool_msgs[1].content)
    errors = [m for m in model.prompts[2] if isinstance(m, ToolMessage)][2:]
    assert "non-empty 'query'" in str(errors[0].content) and "unknown tool" in str(errors[1].content)
    assert result.usage.calls == 3 and result.details["turns"] == 3


async def test_tool_loop_stops_at_max_turns() -> None:
    search = AIMessage(content="", tool_calls=[{"name": "web_search", "args": {"query": "more"}, "id": "x"}])
    model = ScriptedChat(tools=True, script=[search, search, "<answer>Paris</answer>"])
    backend = RecordingBackend(DOCS)
    result = await WebSearchAgent(model, backend, max_turns=3).arun(TASK)
    assert result.answer == "Paris" and result.usage.calls == 3
    assert backend.queries == [TASK, "more", "more"]
    assert "No more searches" in str(model.prompts[-1][-1].content)


async def test_tool_model_plain_reply_is_repaired() -> None:
    model = ScriptedChat(tools=True, script=["It is Paris I think", "<answer>Paris</answer>"])
    result = await WebSearchAgent(model, RecordingBackend(DOCS)).arun(TASK)
    assert result.answer == "Paris" and result.usage.calls == 2


async def test_forced_modes_and_runnable_without_bind_tools() -> None:
    text_only = ScriptedChat(script=["<answer>Paris</answer>"])
    with pytest.raises(ValueError, match="bind_tools"):
        await WebSearchAgent(text_only, RecordingBackend(DOCS), mode="tools").arun(TASK)
    tools_model = ScriptedChat(tools=True, script=["<answer>Paris</answer>"])
    result = await WebSearchAgent(tools_model, RecordingBackend(DOCS), mode="text").arun(TASK)
    assert result.details["mode"] == "text" and not tools_model.bound_tools

    seen: list[list[BaseMessage]] = []

    def reply(messages: list[BaseMessage]) -> AIMessage:
        seen.append(messages)
        return AIMessage(content="<answer>Paris</answer>")

    result = await WebSearchAgent(RunnableLambda(reply), RecordingBackend(DOCS), temperature=None).arun(TASK)
    assert result.answer == "Paris" and result.details["mode"] == "text" and len(seen) == 1
    with pytest.raises(ValueError):
        WebSearchAgent(text_only, RecordingBackend(DOCS), max_turns=0)


async def test_summarize_uses_an_extra_call_and_truncates_passages() -> None:
    long_docs = [{"id": "l", "title": "Paris", "text": "Paris capital France. " + "filler words here " * 300}]
    model = ScriptedChat(script=["<answer>condensed: [1] Paris is the capital</answer>",
                                 "<answer>Paris</answer>"])
    result = await WebSearchAgent(model, RecordingBackend(long_docs), summarize=True).arun(TASK)
    assert result.answer == "Paris" and result.usage.calls == 2
    assert "condensed: [1] Paris is the capital" in _human_texts(model.prompts[1])[0]
    assert "filler" not in _human_texts(model.prompts[1])[0]

    model = ScriptedChat(script=["<answer>Paris</answer>"])
    await WebSearchAgent(model, RecordingBackend(long_docs), max_result_chars=200).arun(TASK)
    prompt = _human_texts(model.prompts[0])[0]
    assert "…" in prompt and prompt.count("filler") < 20


async def test_backend_given_as_spec(tmp_path: Path) -> None:
    corpus = _write_jsonl(tmp_path / "docs.jsonl", DOCS)
    model = ScriptedChat(script=["<answer>Paris</answer>"])
    agent = WebSearchAgent(model, f"bm25:{corpus}")
    assert isinstance(agent.backend, BM25Backend)
    result = await agent.arun(TASK)
    assert {s["id"] for s in result.details["sources"]} >= {"p1", "p2"}


def test_parse_search_request() -> None:
    assert parse_search_request("<search> capital  of France </search>") == ("capital of France", 37)
    assert parse_search_request("<SEARCH>unclosed query")[0] == "unclosed query"
    assert parse_search_request('ok: web_search("eiffel tower")')[0] == "eiffel tower"
    assert parse_search_request("<query>q1</query>")[0] == "q1"
    assert parse_search_request("<answer>Paris</answer> <search>late</search>") is None
    assert parse_search_request("<search></search><answer>x</answer>") is None
    assert parse_search_request("no request here") is None


async def test_agent_is_a_langgraph_node() -> None:
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        task: str
        result: AgentResult
        answer: str

    model = ScriptedChat(script=["<answer>Paris</answer>"])
    builder = StateGraph(State)
    builder.add_node("search", WebSearchAgent(model, RecordingBackend(DOCS)))
    builder.add_edge(START, "search")
    builder.add_edge("search", END)
    out = await builder.compile().ainvoke({"task": TASK})
    assert out["answer"] == "Paris" and out["result"].details["sources"]


def test_tool_binding_keeps_the_retry_wrapper():
    """A with_retry-wrapped tool-calling model still retries transient errors on tool turns."""
    from langchain_core.runnables.retry import RunnableRetry

    from agents.base import bind_tools
    from mas_orchestra.testing import ScriptedChatModel

    class ToolModel(ScriptedChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    wrapped = ToolModel().with_retry(retry_if_exception_type=(ConnectionError,), stop_after_attempt=3)
    bound = bind_tools(wrapped, [{"name": "web_search"}])
    assert isinstance(bound, RunnableRetry)
    assert bound.max_attempt_number == 3
