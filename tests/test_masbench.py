"""Tests for mas_orchestra.bench.masbench: axis semantics (recomputed here, independently), determinism,
train/test template disjointness, verify(), JSONL files and the CLI hook."""

from __future__ import annotations

import argparse
import json
import math
import re

import pytest

from mas_orchestra.bench import masbench as mb

AXIS_VALUES = {
    "depth": [1, 2, 5, 12, 20],
    "breadth": [2, 3, 8, 20],
    "parallel": [1, 2, 8, 20],
    "horizon": [1, 2, 8, 20],
    "robustness": [1, 2, 8, 20],
}


# Independent re-implementations, so the tests do not just trust the module's own helpers.
def _value(graph: dict, name: str, memo: dict) -> int:
    if name not in memo:
        node = graph[name]
        if node["op"] == "const":
            memo[name] = node["value"]
        else:
            xs = [_value(graph, x, memo) for x in node["inputs"]]
            if node["op"] == "add":
                memo[name] = sum(xs) % 23
            elif node["op"] == "sub":
                memo[name] = (xs[0] - sum(xs[1:])) % 23
            else:
                memo[name] = math.prod(xs) % 23
    return memo[name]


def _depth(graph: dict, name: str) -> int:
    node = graph[name]
    return 0 if node["op"] == "const" else 1 + max(_depth(graph, x) for x in node["inputs"])


def _deps(graph: dict, name: str) -> set[str]:
    node = graph[name]
    out = {name}
    for x in node.get("inputs", []):
        out |= _deps(graph, x)
    return out


@pytest.fixture(scope="module")
def rows_by_axis() -> dict[tuple[str, str], list[dict]]:
    return {
        (axis, split): mb.generate(axis, values, 6, seed=7, split=split)
        for axis, values in AXIS_VALUES.items()
        for split in mb.SPLITS
    }


def _all(rows_by_axis, axis=None):
    return [r for (a, _), rows in rows_by_axis.items() if axis in (None, a) for r in rows]


# ------------------------------------------------------------------------------------- structure


def test_row_schema_and_ids(rows_by_axis):
    for (axis, split), rows in rows_by_axis.items():
        assert len(rows) == 6 * len(AXIS_VALUES[axis])
        for r in rows:
            assert list(r) == [
                "id", "axis", "value", "split", "template_id", "question", "answer", "targets", "graph",
                "distractors",
            ]
            assert re.fullmatch(rf"masbench-{axis}-{split}-v{r['value']}-\d{{4}}", r["id"])
            assert r["axis"] == axis and r["split"] == split
            assert r["template_id"].startswith(f"{split}-t")
        assert len({r["id"] for r in rows}) == len(rows)
    first = rows_by_axis[("depth", "test")][3]
    assert first["id"] == "masbench-depth-test-v1-0003"


def test_answers_recompute_from_graph(rows_by_axis):
    for r in _all(rows_by_axis):
        memo: dict = {}
        expected = [str(_value(r["graph"], t, memo)) for t in r["targets"]]
        if r["axis"] in ("horizon", "parallel"):
            assert r["answer"] == expected
        else:
            assert r["answer"] == expected[0] and len(r["targets"]) == 1
        for a in expected:
            assert 0 <= int(a) <= 22


def test_question_names_every_quantity_and_asks(rows_by_axis):
    for r in _all(rows_by_axis):
        q = r["question"]
        for name in r["graph"]:
            assert name in q
        assert "23" in q and "\\boxed{}" in q
        for t in r["targets"]:
            assert f"the {t}" in q


def test_depth_axis_exact(rows_by_axis):
    for r in _all(rows_by_axis, "depth"):
        assert _depth(r["graph"], r["targets"][0]) == r["value"]


def test_breadth_axis_exact(rows_by_axis):
    for r in _all(rows_by_axis, "breadth"):
        fan_in = max(len(n["inputs"]) for n in r["graph"].values() if n["op"] != "const")
        assert fan_in == r["value"]


def test_parallel_axis_independent(rows_by_axis):
    for r in _all(rows_by_axis, "parallel"):
        assert len(r["targets"]) == r["value"] == len(r["answer"])
        deps = [_deps(r["graph"], t) for t in r["targets"]]
        for i in range(len(deps)):
            for j in range(i + 1, len(deps)):
                assert not deps[i] & deps[j]
        for i in range(1, r["value"] + 1):
            assert re.search(rf"\b(Problem|Task) {i}:", r["question"])


def test_horizon_axis_chained(rows_by_axis):
    for r in _all(rows_by_axis, "horizon"):
        ts = r["targets"]
        assert len(ts) == r["value"] == len(r["answer"])
        for i in range(1, len(ts)):
            assert ts[i - 1] in _deps(r["graph"], ts[i])
            # The earlier result is referred to by name followed by its answer tag.
            assert f"the {ts[i - 1]} ([answer{i}])" in r["question"]


def test_robustness_axis_notes_are_wrong_and_fillers_present(rows_by_axis):
    for r in _all(rows_by_axis, "robustness"):
        ds = r["distractors"]
        assert len(ds) == r["value"]
        assert len({d["quantity"] for d in ds}) == len(ds)
        needed = _deps(r["graph"], r["targets"][0])
        memo: dict = {}
        for d in ds:
            assert d["quantity"] in needed  # notes attack quantities the answer really uses
            assert d["claimed"] != _value(r["graph"], d["quantity"], memo)
            assert f"the {d['quantity']} is {d['claimed']}" in r["question"]
        text = mb.SPLIT_TEXT[r["split"]]
        assert sum(f in r["question"] for f in text.fillers) >= r["value"]
        if r["split"] == "test":
            assert "verify the information before you take it" in r["question"]
    for r in _all(rows_by_axis):
        if r["axis"] != "robustness":
            assert r["distractors"] == []


def test_sentences_are_shuffled(rows_by_axis):
    # If sentences came in definition order, the first-mention order of names would match the graph's.
    reordered = 0
    rows = _all(rows_by_axis, "depth")
    for r in rows:
        names = list(r["graph"])
        first = sorted(names, key=lambda n: r["question"].index(n))
        reordered += first != names
    assert reordered > len(rows) // 2


# ------------------------------------------------------------------------------------ determinism


def test_same_seed_same_bytes_other_seed_differs():
    a = [json.dumps(r, sort_keys=False) for r in mb.generate("robustness", [2, 5], 5, seed=3)]
    b = [json.dumps(r, sort_keys=False) for r in mb.generate("robustness", [2, 5], 5, seed=3)]
    c = [json.dumps(r, sort_keys=False) for r in mb.generate("robustness", [2, 5], 5, seed=4)]
    assert a == b and a != c


def test_rows_do_not_depend_on_other_values_or_n():
    small = mb.generate("depth", [4], 3, seed=11)
    big = mb.generate("depth", [2, 4, 6], 10, seed=11)
    assert small == [r for r in big if r["value"] == 4][:3]


# ------------------------------------------------------------------------------- split hygiene


def _words(items):
    return {w.lower() for item in items for w in item.split()}


def test_train_and_test_share_no_template_id_entity_or_phrasing():
    train, test = mb.templates("train"), mb.templates("test")
    assert train and test
    assert not {t.id for t in train} & {t.id for t in test}
    assert all(t.id.startswith("train-") for t in train) and all(t.id.startswith("test-") for t in test)
    train_ent = {e for t in train for e in t.entities()}
    test_ent = {e for t in test for e in t.entities()}
    assert not train_ent & test_ent
    # Stricter: not even a shared word inside a name ("Coral Zoo" vs "Coral Bay" would leak).
    assert not _words(train_ent) & _words(test_ent)
    assert not {p for t in train for p in t.phrasings()} & {p for t in test for p in t.phrasings()}
    tr, te = mb.SPLIT_TEXT["train"], mb.SPLIT_TEXT["test"]
    for field in ("single_instruction", "multi_instruction", "problem_header", "horizon_hint"):
        assert getattr(tr, field) != getattr(te, field)
    assert not set(tr.notes) & set(te.notes)
    assert not set(tr.fillers) & set(te.fillers)


def test_template_ids_unique_and_every_template_used():
    ids = [t.id for t in mb.TEMPLATES]
    assert len(ids) == len(set(ids))
    used = {r["template_id"] for r in mb.generate("depth", [3], 200, seed=0, split="test")}
    used |= {r["template_id"] for r in mb.generate("depth", [3], 200, seed=0, split="train")}
    assert used == set(ids)


def test_generated_names_disjoint_between_splits(rows_by_axis):
    train_names = {n for (a, s), rows in rows_by_axis.items() if s == "train" for r in rows for n in r["graph"]}
    test_names = {n for (a, s), rows in rows_by_axis.items() if s == "test" for r in rows for n in r["graph"]}
    assert train_names and test_names and not train_names & test_names
    test_words = _words(e for t in mb.templates("test") for e in t.entities())
    for name in train_names:
        assert not _words([name]) & test_words


# ------------------------------------------------------------------------------------- verify()


def test_verify_accepts_generated_rows(rows_by_axis):
    assert mb.verify(_all(rows_by_axis)) == []


def test_verify_catches_tampering():
    row = mb.generate("depth", [3], 1, seed=1)[0]
    bad = json.loads(json.dumps(row))
    bad["answer"] = str((int(bad["answer"]) + 1) % 23)
    assert any("answer" in p for p in mb.verify([bad]))

    bad = json.loads(json.dumps(row))
    bad["value"] = 4
    assert any("depth" in p for p in mb.verify([bad]))

    bad = json.loads(json.dumps(row))
    const = next(n for n, v in bad["graph"].items() if v["op"] == "const")
    bad["graph"][const]["value"] = 99
    assert mb.verify([bad])

    rob = mb.generate("robustness", [2], 1, seed=1)[0]
    bad = json.loads(json.dumps(rob))
    q = bad["distractors"][0]["quantity"]
    bad["distractors"][0]["claimed"] = mb.evaluate(bad["graph"])[q]
    assert any("true value" in p for p in mb.verify([bad]))

    assert any("duplicate id" in p for p in mb.verify([row, row]))

    cyc = json.loads(json.dumps(row))
    a, b = list(cyc["graph"])[:2]
    cyc["graph"][a] = {"op": "add", "inputs": [b]}
    cyc["graph"][b] = {"op": "add", "inputs": [a]}
    assert any("cycle" in p for p in mb.verify([cyc]))


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("width", [2], 1, 0), "depth, horizon, breadth, parallel, robustness"),
        (("depth", [0], 1, 0), r"1\.\.20"),
        (("depth", [21], 1, 0), r"1\.\.20"),
        (("breadth", [1], 1, 0), r"2\.\.20"),
        (("depth", [2], 0, 0), "n must be"),
        (("depth", [], 1, 0), "values"),
    ],
)
def test_bad_input_raises(args, match):
    with pytest.raises(ValueError, match=match):
        mb.generate(*args)


def test_bad_split_raises():
    with pytest.raises(ValueError, match="train, test"):
        mb.generate("depth", [2], 1, 0, split="dev")


# ----------------------------------------------------------------------------- files, size, CLI


def test_jsonl_roundtrip(tmp_path):
    rows = mb.generate("horizon", [2, 3], 4, seed=5)
    path = tmp_path / "h.jsonl"
    assert mb.write_jsonl(rows, path) == 8
    assert mb.read_jsonl(path) == rows


def test_paper_sized_depth_split():
    # DESIGN §8: depth test has 1,195 rows over values 2-12; generation must stay cheap (timing lives
    # in benchmarks/masbench_speed.py, not here).
    rows = mb.generate("depth", list(range(2, 13)), 109, seed=0, split="test")[:1195]
    assert len(rows) == 1195
    assert mb.verify(rows) == []


def test_answers_grade_with_boxed_predictions():
    pytest.importorskip("math_verify")
    from mas_orchestra.bench.grading import grade

    row = mb.generate("parallel", [3], 1, seed=2)[0]
    assert grade(" ".join(f"\\boxed{{{a}}}" for a in row["answer"]), row["answer"])
    rev = row["answer"][::-1]
    if rev != row["answer"]:
        assert not grade(" ".join(f"\\boxed{{{a}}}" for a in rev), row["answer"])


def _cli() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mas-orchestra")
    sub = parser.add_subparsers(dest="command", required=True)
    mb.add_cli(sub)
    return parser


def _run(argv: list[str]) -> int:
    args = _cli().parse_args(argv)
    return args.func(args)


def test_cli_generate_verify_byte_identical(tmp_path, capsys):
    out1, out2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    base = ["masbench", "generate", "--axis", "parallel", "--values", "2,4", "--n", "3", "--seed", "9"]
    assert _run([*base, "--split", "train", "--out", str(out1)]) == 0
    assert _run([*base, "--split", "train", "--out", str(out2)]) == 0
    assert out1.read_bytes() == out2.read_bytes()
    assert len(out1.read_text(encoding="utf-8").splitlines()) == 6
    assert _run(["masbench", "verify", str(out1)]) == 0
    assert "ok" in capsys.readouterr().out

    rows = mb.read_jsonl(out1)
    rows[0]["answer"] = ["99", "99"]
    mb.write_jsonl(rows, out1)
    assert _run(["masbench", "verify", str(out1)]) == 1
    assert rows[0]["id"] in capsys.readouterr().out


def test_cli_value_ranges_and_errors(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert _run(["masbench", "generate", "--axis", "depth", "--values", "2-4", "--n", "2", "--out", str(out)]) == 0
    assert sorted({r["value"] for r in mb.read_jsonl(out)}) == [2, 3, 4]
    assert _run(["masbench", "generate", "--axis", "depth", "--values", "0", "--out", str(out)]) == 2
    assert "1..20" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        _cli().parse_args(["masbench", "generate", "--axis", "width", "--values", "2", "--out", "x"])
    with pytest.raises(SystemExit):
        _cli().parse_args(["masbench", "generate", "--axis", "depth", "--values", "a,b", "--out", "x"])
    assert _run(["masbench", "verify", str(tmp_path / "missing.jsonl")]) == 1
