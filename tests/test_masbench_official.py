"""The official MASBench loader (``masbench-official:<path>[:<subset>][:split=…]``) on fixtures we write with the
published columns: files (JSONL, parquet), the dataset's folder layout, bad input, grading and the consumers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mas_orchestra.bench import evaluation as ev
from mas_orchestra.bench.grading import grade
from mas_orchestra.bench.masbench.official import (
    OFFICIAL_COLUMNS,
    OfficialMasbenchError,
    load_official,
    load_official_source,
    parse_official_source,
)
from mas_orchestra.errors import DataError
from mas_orchestra.testing import ScriptedChatModel, cot_reply


def official_row(axis: str, value: str | None, question: str, truth: str, index: int) -> dict:
    """One row in the published layout: every column a string, the JSON ones JSON-encoded."""
    row = {
        "reward_model_json": json.dumps({"style": "rule", "ground_truth": truth}),
        "extra_info_json": json.dumps({"index": index, "split": "test"}),
        "prompt_json": json.dumps([{"role": "user", "content": question}]),
        "axis": axis,
        "data": f"masbench_{axis}",
    }
    if value is not None:
        row["value"] = value
    return row


ROWS = [
    official_row("depth", "2", "In Pine Harbor, each crate holds 4 jars. What is the number of jars?", "7", 0),
    official_row("horizon", "2", "Problem 1: ... Problem 2 uses [answer1]. Give both answers.", "3<<horizon>>11", 1),
    official_row("parallel", "3", "Three independent problems follow.", "5<<horizon>>0<<horizon>>22", 2),
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def check_mapped(rows: list[dict]) -> None:
    assert [r["axis"] for r in rows] == ["depth", "horizon", "parallel"]
    assert rows[0]["question"].startswith("In Pine Harbor") and rows[0]["answer"] == "7"
    assert rows[1]["answer"] == ["3", "11"] and rows[2]["answer"] == ["5", "0", "22"]
    assert [r["value"] for r in rows] == ["2", "2", "3"]
    assert len({r["id"] for r in rows}) == 3 and all(r["source"].startswith("masbench-official-") for r in rows)


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_a_file_maps_to_rows_with_multi_answer_lists(tmp_path, writer):
    path = writer(tmp_path / f"test-00000.{'jsonl' if writer is write_jsonl else 'parquet'}", ROWS)
    rows = load_official(path)
    check_mapped(rows)
    assert rows[0]["id"] == "masbench-depth-test-0" and rows[0]["split"] == "test"
    # the subset of a file keeps the rows of that axis
    assert [r["answer"] for r in load_official_source(f"masbench-official:{path}:horizon")] == [["3", "11"]]


def test_jsonl_and_parquet_copies_read_the_same(tmp_path):
    a = load_official(write_jsonl(tmp_path / "a.jsonl", ROWS))
    b = load_official(write_parquet(tmp_path / "a.parquet", ROWS))
    assert a == b


def test_the_dataset_folder_layout_with_subsets_and_splits(tmp_path):
    root = tmp_path / "MASBench"
    write_parquet(root / "depth" / "test-00000-of-00001.parquet", ROWS[:1])
    write_parquet(root / "depth" / "train-00000-of-00001.parquet", ROWS[:1] * 2)
    combine = [{k: v for k, v in r.items() if k != "value"} for r in ROWS]  # 'combine' has no value column
    write_parquet(root / "combine" / "train-00000-of-00001.parquet", combine)
    assert len(load_official_source(f"masbench-official:{root}:depth:split=test")) == 1
    assert len(load_official_source(f"masbench-official:{root}:depth:split=train")) == 2
    assert len(load_official_source(f"masbench-official:{root / 'depth'}:split=train")) == 2
    rows = load_official_source(f"masbench-official:{root}:combine:split=train")
    assert [r["value"] for r in rows] == [None, None, None] and rows[1]["answer"] == ["3", "11"]
    with pytest.raises(OfficialMasbenchError, match=r"holds splits test, train; add :split=train or :split=test"):
        load_official_source(f"masbench-official:{root}:depth")
    with pytest.raises(OfficialMasbenchError, match=r"unknown subset 'width'; subsets found: combine, depth"):
        load_official_source(f"masbench-official:{root}:width:split=test")
    with pytest.raises(OfficialMasbenchError, match=r"name a subset .*subsets found: combine, depth"):
        load_official_source(f"masbench-official:{root}")
    with pytest.raises(OfficialMasbenchError, match=r"no test split; splits found: train"):
        load_official_source(f"masbench-official:{root}:combine:split=test")


def test_unknown_subset_of_a_file_lists_the_axes_found(tmp_path):
    path = write_jsonl(tmp_path / "all.jsonl", ROWS)
    with pytest.raises(OfficialMasbenchError, match=r"unknown subset 'breadth'.*depth, horizon, parallel"):
        load_official_source(f"masbench-official:{path}:breadth")


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_a_file_with_other_columns_names_file_missing_and_expected(tmp_path, writer):
    path = writer(tmp_path / f"ours.{'jsonl' if writer is write_jsonl else 'parquet'}",
                  [{"id": "a", "question": "q", "answer": "1"}])
    with pytest.raises(OfficialMasbenchError) as info:
        load_official(path)
    message = str(info.value)
    assert str(path) in message and "missing column(s) prompt_json, reward_model_json" in message
    assert f"expected {', '.join(OFFICIAL_COLUMNS)}" in message and "found id, question, answer" in message
    assert isinstance(info.value, DataError) and isinstance(info.value, ValueError)


def test_bad_cells_and_sources_are_typed_errors_naming_where(tmp_path):
    broken = dict(ROWS[0], reward_model_json="{not json")
    path = write_jsonl(tmp_path / "b.jsonl", [ROWS[0], broken])
    with pytest.raises(OfficialMasbenchError, match=r"b\.jsonl:2: column reward_model_json is not JSON"):
        load_official(path)
    empty = dict(ROWS[1], reward_model_json=json.dumps({"ground_truth": "3<<horizon>>"}))
    with pytest.raises(OfficialMasbenchError, match=r"c\.jsonl:1: ground_truth '3<<horizon>>' has an empty answer"):
        load_official(write_jsonl(tmp_path / "c.jsonl", [empty]))
    no_user = dict(ROWS[0], prompt_json=json.dumps([{"role": "system", "content": "x"}]))
    with pytest.raises(OfficialMasbenchError, match=r"no user message"):
        load_official(write_jsonl(tmp_path / "d.jsonl", [no_user]))
    with pytest.raises(OfficialMasbenchError, match=r"no such file or folder"):
        load_official_source(f"masbench-official:{tmp_path / 'missing.parquet'}")
    with pytest.raises(OfficialMasbenchError, match=r"split must be one of train, test"):
        parse_official_source(f"masbench-official:{path}:split=dev")


def test_multi_answer_rows_grade_one_box_per_answer_in_order(tmp_path):
    horizon = load_official_source(f"masbench-official:{write_jsonl(tmp_path / 'h.jsonl', ROWS)}:horizon")[0]
    truth = horizon["answer"]
    assert grade(r"first \boxed{3}, then \boxed{11}", truth, kind="math")
    assert not grade(r"\boxed{11} and \boxed{3}", truth, kind="math")  # order matters
    assert not grade(r"\boxed{3}", truth, kind="math")  # one box for two answers
    assert not grade(r"\boxed{3} \boxed{12}", truth, kind="math")  # all must be right
    assert not grade(r"\boxed{7}, so \boxed{3} and \boxed{11}", truth, kind="math")  # a third box: wrong count


def test_training_and_eval_read_the_source(tmp_path):
    from training.data import load_rows as training_rows

    path = write_parquet(tmp_path / "test.parquet", ROWS)
    rows = training_rows(f"masbench-official:{path}")
    assert [r["answer"] for r in rows] == [["7"], ["3", "11"], ["5", "0", "22"]]
    assert rows[1]["source"] == "masbench-official-horizon"
    assert [r["id"] for r in ev.load_rows(f"masbench-official:{path}:parallel")] == ["masbench-parallel-test-0"]
    bad = write_jsonl(tmp_path / "ours.jsonl", [{"id": "a", "question": "q", "answer": "1"}])
    with pytest.raises(ev.EvalInputError, match=r"ours\.jsonl: not an official MASBench file"):
        ev.load_rows(f"masbench-official:{bad}")
    with pytest.raises(ValueError, match=r"not an official MASBench file"):
        training_rows(f"masbench-official:{bad}")


async def test_an_eval_on_official_rows_grades_every_answer(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", ROWS[1:2])
    good = ScriptedChatModel(replies=[cot_reply(r"\boxed{3} \boxed{11}")])
    summary = await ev.aevaluate(f"masbench-official:{path}", subagent=good, baseline="cot", grader="math",
                                 out_dir=tmp_path / "good", progress=False)
    assert summary["avg_at_k"] == 1.0 and summary["data"] == f"masbench-official:{path}"
    swapped = ScriptedChatModel(replies=[cot_reply(r"\boxed{11} \boxed{3}")])
    summary = await ev.aevaluate(f"masbench-official:{path}", subagent=swapped, baseline="cot", grader="math",
                                 out_dir=tmp_path / "swapped", progress=False)
    assert summary["avg_at_k"] == 0.0


def test_cli_eval_on_a_bad_official_file_exits_2(tmp_path, capsys):
    from mas_orchestra.cli import main as cli_main

    bad = write_jsonl(tmp_path / "ours.jsonl", [{"id": "a", "question": "q", "answer": "1"}])
    code = cli_main(["eval", "--data", f"masbench-official:{bad}", "--out", str(tmp_path / "run"), "--baseline",
                     "cot", "--subagent", "scripted:1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "not an official MASBench file" in err and "Traceback" not in err
