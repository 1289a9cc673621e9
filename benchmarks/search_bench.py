"""Benchmark of the offline BM25 search backend.

For generated corpora of 20k and 200k documents (deterministic pseudo-word text, Zipf-like word
frequencies) it prints: index build time (read JSONL + analyse + index + save), load-from-disk time,
median and p95 milliseconds per query over 200 queries, and whether planted rare words are found at
rank 1. Then the HotpotQA recall@5 on the first ``--questions`` (default 200) questions of the shipped dev
set (any gold title / both gold titles in the top 5), when the data is present. The HotpotQA corpus is
copied into the work directory first, so its index cache is written there and never into the read-only
``shared/data``.

    python benchmarks/search_bench.py                    # 20k and 200k, then HotpotQA
    python benchmarks/search_bench.py --quick            # 20k only, then HotpotQA
    python benchmarks/search_bench.py --hotpotqa-only    # HotpotQA recall only
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from agents.search.backends import BM25Backend  # noqa: E402

DATA = REPO.parent / "shared" / "data"
_SYLLABLES = [c + v for c in "bdfgklmnprstv" for v in "aeiou"]


def generate_corpus(path: Path, n_docs: int, *, seed: int, words_per_doc: int = 60,
                    planted: int = 50) -> dict[str, str]:
    """Write ``n_docs`` pseudo-word documents to ``path``; returns planted rare word -> document id."""
    rng = random.Random(seed)
    vocab: set[str] = set()
    while len(vocab) < 20_000:
        vocab.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    words = sorted(vocab)
    cum, total = [], 0.0
    for rank in range(1, len(words) + 1):
        total += 1.0 / rank**1.05
        cum.append(total)
    rare_docs = {i: f"zq{n:04d}" + "".join(rng.choice("xwjq") for _ in range(5))
                 for n, i in enumerate(rng.sample(range(n_docs), planted))}
    per = words_per_doc + 4
    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, n_docs, 10_000):
            stop = min(n_docs, start + 10_000)
            flat = rng.choices(words, cum_weights=cum, k=(stop - start) * per)
            for j, i in enumerate(range(start, stop)):
                chunk = flat[j * per : (j + 1) * per]
                text = chunk[4:]
                if i in rare_docs:
                    text.insert(rng.randrange(len(text)), rare_docs[i])
                row = {"id": f"d{i}", "title": " ".join(chunk[:4]), "text": " ".join(text)}
                fh.write(json.dumps(row) + "\n")
    return {word: f"d{i}" for i, word in rare_docs.items()}


def sample_queries(path: Path, n: int, *, seed: int) -> list[str]:
    """``n`` queries of 3-6 words taken from random documents of the corpus."""
    rows = path.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    queries = []
    for line in rng.sample(rows, n):
        words = json.loads(line)["text"].split()
        queries.append(" ".join(rng.sample(words, rng.randint(3, 6))))
    return queries


def time_queries(backend: BM25Backend, queries: list[str]) -> tuple[float, float]:
    backend.search(queries[0])  # warm caches
    times = []
    for q in queries:
        started = time.perf_counter()
        backend.search(q, k=5)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def bench_generated(workdir: Path, n_docs: int, n_queries: int) -> None:
    corpus = workdir / f"gen_{n_docs}.jsonl"
    started = time.perf_counter()
    planted = generate_corpus(corpus, n_docs, seed=n_docs)
    gen_s = time.perf_counter() - started
    size_mb = corpus.stat().st_size / 1e6

    started = time.perf_counter()
    built = BM25Backend.from_jsonl(corpus)
    build_s = time.perf_counter() - started
    assert built.saved and not built.loaded_from_disk
    del built

    started = time.perf_counter()
    loaded = BM25Backend.from_jsonl(corpus)
    load_s = time.perf_counter() - started
    assert loaded.loaded_from_disk

    queries = sample_queries(corpus, n_queries, seed=1)
    median_ms, p95_ms = time_queries(loaded, queries)
    # Rare word + the two most frequent words: the rare word must decide the ranking.
    frequent = " ".join(Counter(w for q in queries for w in q.split()).most_common(2)[i][0] for i in range(2))
    found = sum(loaded.search(f"{frequent} {word}", k=1)[0].id == doc for word, doc in planted.items())
    index_mb = sum(p.stat().st_size for p in (workdir / f"{corpus.name}.bm25").iterdir()) / 1e6
    print(
        f"{n_docs:>7,} docs ({size_mb:.0f} MB, generated in {gen_s:.1f}s): build {build_s:.2f}s "
        f"(index {index_mb:.0f} MB), load {load_s * 1000:.0f} ms, query median {median_ms:.2f} ms "
        f"/ p95 {p95_ms:.2f} ms over {n_queries}, rare word at rank 1: {found}/{len(planted)}"
    )


def bench_hotpotqa(workdir: Path, n_questions: int = 200) -> None:
    src, dev = DATA / "hotpotqa_corpus.jsonl", DATA / "hotpotqa_dev.jsonl"
    if not (src.is_file() and dev.is_file()):
        print(f"HotpotQA: data not found in {DATA}, skipped")
        return
    corpus = workdir / src.name
    shutil.copy(src, corpus)
    started = time.perf_counter()
    backend = BM25Backend.from_jsonl(corpus)
    build_s = time.perf_counter() - started
    lines = [line for line in dev.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = [json.loads(line) for line in lines[:n_questions]]
    any_gold = both_gold = 0
    for q in questions:
        gold = {title for title, _ in q["supporting_facts"]}
        top = {h.title for h in backend.search(q["question"], k=5)}
        any_gold += bool(gold & top)
        both_gold += gold <= top
    median_ms, _ = time_queries(backend, [q["question"] for q in questions])
    n = len(questions)
    print(
        f"HotpotQA ({len(backend)} passages, build {build_s:.2f}s, query median {median_ms:.2f} ms): "
        f"recall@5 any gold {any_gold}/{n} = {any_gold / n:.3f}, "
        f"both gold {both_gold}/{n} = {both_gold / n:.3f} "
        f"(stemmer: {backend.stemmer_name})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20k documents only")
    parser.add_argument("--queries", type=int, default=200, help="queries timed per corpus")
    parser.add_argument("--workdir", type=Path, default=None, help="where corpora and indexes go (temp dir)")
    parser.add_argument("--hotpotqa-only", action="store_true", help="skip the generated corpora")
    parser.add_argument("--questions", type=int, default=200, help="first N HotpotQA dev questions scored")
    args = parser.parse_args(argv)
    sizes = [] if args.hotpotqa_only else [20_000] if args.quick else [20_000, 200_000]
    with tempfile.TemporaryDirectory(prefix="search_bench_") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            bench_generated(workdir, n, args.queries)
        bench_hotpotqa(workdir, args.questions)


if __name__ == "__main__":
    main()
