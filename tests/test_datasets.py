"""The one JSONL reader (mas_orchestra.bench.datasets.read_rows) behind eval's load_rows and training's load_jsonl,
and the evaluation package (mas_orchestra.bench.evaluation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mas_orchestra.bench import evaluation as ev
from mas_orchestra.bench.datasets import read_rows
from mas_orchestra.errors import DataError, MasOrchestraError
from tests.conftest import REPO
from training.data import load_jsonl


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# -- the reader ---------------------------------------------------------------------------------------------


def test_ids_are_required_or_defaulted(tmp_path):
    path = _write(tmp_path / "d.jsonl", '{"id": 7, "question": "q1", "answer": 2.5, "extra": [1]}', "",
                  '{"question": "q2", "answer": ["a", 3]}', '{"id": null, "question": "q3", "answer": "x"}')
    with pytest.raises(DataError, match=r"d\.jsonl:3: row without 'id'"):
        read_rows(path)  # ids="require" is the default
    rows = read_rows(path, ids="default")
    assert [r["id"] for r in rows] == ["7", "d-1", "d-2"]  # n counts rows from 0; blank lines do not count
    assert rows[0] == {"id": "7", "question": "q1", "answer": "2.5", "extra": [1]}  # other keys kept
    assert rows[1]["answer"] == ["a", "3"]
    assert [r["id"] for r in read_rows([{"question": "q", "answer": "1"}], ids="default")] == ["row-0"]
    with pytest.raises(ValueError, match="ids must be"):
        read_rows(path, ids="maybe")  # type: ignore[arg-type]


def test_errors_name_file_and_line_and_are_data_errors(tmp_path):
    path = tmp_path / "d.jsonl"
    bad = {
        '{"id": "a", "question": "", "answer": "1"}': r"d\.jsonl:2: 'question' must be a non-empty string",
        '{"id": "a", "question": "q", "answer": NaN}': r":2: 'answer' must be",
        '{"id": true, "question": "q", "answer": "1"}': r":2: 'id' must be a non-empty string or integer",
        '"text"': r":2: a row must be a JSON object, got str",
        "{nope": r":2: not valid JSON",
    }
    for text, message in bad.items():
        _write(path, '{"id": "ok", "question": "q", "answer": "1"}', text)
        for ids in ("require", "default"):
            with pytest.raises(DataError, match=message) as err:
                read_rows(path, ids=ids)  # type: ignore[arg-type]
            assert isinstance(err.value, ValueError) and isinstance(err.value, MasOrchestraError)
    with pytest.raises(DataError, match="no such data file"):
        read_rows(tmp_path / "missing.jsonl")
    path.write_bytes(b'{"id": "a", "question": "\xff", "answer": "1"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        read_rows(path)
    with pytest.raises(DataError, match=r"^row 2: row without 'answer'"):
        read_rows([{"id": 1, "question": "q", "answer": "1"}, {"id": 2, "question": "q"}])


def test_duplicate_ids_are_refused_unless_allowed(tmp_path):
    path = _write(tmp_path / "d.jsonl", '{"id": "a", "question": "q", "answer": "1"}',
                  '{"id": "a", "question": "r", "answer": "2"}')
    with pytest.raises(DataError, match=r"d\.jsonl:2: duplicate id 'a' \(first at .*d\.jsonl:1\)"):
        read_rows(path)
    assert [r["question"] for r in read_rows(path, unique_ids=False)] == ["q", "r"]
    assert read_rows(_write(tmp_path / "empty.jsonl", "", "  ")) == []  # the caller decides about empty


def test_eval_and_training_read_one_file_alike(tmp_path):
    path = _write(tmp_path / "set.jsonl", '{"id": "a", "question": "1+1?", "answer": 2}',
                  '{"id": "b", "question": "two?", "answer": ["x", "y"], "source": "mine"}')
    evaluated, trained = ev.load_rows(path), load_jsonl(path)
    assert [(r["id"], r["question"]) for r in evaluated] == [(r["id"], r["question"]) for r in trained]
    assert [r["answer"] for r in evaluated] == ["2", ["x", "y"]]
    assert [r["answer"] for r in trained] == [["2"], ["x", "y"]]  # training always holds lists
    assert [r["source"] for r in trained] == ["set", "mine"]

    # The same bad row: eval says EvalInputError, training a DataError; both ValueErrors naming the line.
    _write(path, '{"id": "a", "question": "q", "answer": "1"}', '{"id": "b", "question": "q", "answer": []}')
    with pytest.raises(ev.EvalInputError, match=r"set\.jsonl:2: 'answer' list"):
        ev.load_rows(path)
    with pytest.raises(DataError, match=r"set\.jsonl:2: 'answer' list"):
        load_jsonl(path)
    # Ids: eval requires them and refuses repeats; training defaults them and allows repeats.
    _write(path, '{"question": "q", "answer": "1"}', '{"id": "set-0", "question": "r", "answer": "2"}')
    with pytest.raises(ev.EvalInputError, match=r"set\.jsonl:1: row without 'id'"):
        ev.load_rows(path)
    assert [r["id"] for r in load_jsonl(path)] == ["set-0", "set-0"]
    _write(path, "")
    with pytest.raises(ev.EvalInputError, match=r"set\.jsonl: no rows"):
        ev.load_rows(path)
    assert load_jsonl(path) == []
    with pytest.raises(ev.EvalInputError, match="no rows to evaluate"):
        ev.load_rows([])


def test_shared_data_files_read_through_both(data_dir):
    path = data_dir / "gsm8k_test.jsonl"
    evaluated, trained = ev.load_rows(path), load_jsonl(path)
    assert len(evaluated) == len(trained) > 0
    assert all([e["answer"]] == t["answer"] for e, t in zip(evaluated, trained))


# -- the evaluation package ---------------------------------------------------------------------------------

def test_no_evaluation_module_is_over_500_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in (REPO / "mas_orchestra" / "bench" / "evaluation").glob("*.py")}
    assert sizes and max(sizes.values()) <= 500, sizes


def test_summary_is_unchanged_by_the_split():
    records = [
        {"id": "a", "sample": 0, "status": "ok", "valid": True, "correct": True,
         "usage": {"llm_calls": 2, "cost_usd": 0.5}, "spec": {"nodes": [{"agent": "cot"}]}},
        {"id": "a", "sample": 1, "status": "timeout", "correct": False, "spec": None, "grade_error": None},
    ]
    out = ev.summarize(records, config={"samples": 2, "label": "x"})
    assert (out["n"], out["runs"], out["avg_at_k"], out["pass_at_k"], out["valid_rate"]) == (1, 2, 0.5, 1.0, 0.5)
    assert out["mean_llm_calls"] == 1.0 and out["total_cost_usd"] == 0.5 and out["agent_histogram"] == {"cot": 1}
    assert "avg@k 50.0%" in ev.format_summary({**out, "out_dir": "d"})
    assert json.loads(json.dumps(out)) == out
