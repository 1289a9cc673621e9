"""mas_orchestra.bench.evaluation: exact summaries, resume, crash safety, baselines, grading errors, plots and CLI errors.

All models are scripted (tests/eval_models.py): questions carry tags that decide whether the sub-agent is
right, so every accuracy below is a known fraction.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mas_orchestra import OrchestraConfig, RunSettings
from mas_orchestra.bench import evaluation as ev
from mas_orchestra.bench.evaluation import plots, runner, storage
from mas_orchestra.cli import main as cli_main
from mas_orchestra.errors import MissingExtraError
from mas_orchestra.testing import ScriptedChatModel
from tests import eval_models as em
from tests.conftest import REPO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()]


async def _orchestra_eval(rows, out_dir, **kwargs):
    orch, sub = kwargs.pop("orch", None) or em.orchestrator(), kwargs.pop("sub", None) or em.subagent()
    kwargs.setdefault("grader", "exact")
    summary = await ev.aevaluate(rows, orchestrator=orch, subagent=sub, out_dir=out_dir, progress=False, **kwargs)
    return summary, orch, sub


# -- constants taken from their one source -----------------------------------------------------------


def test_constants_come_from_runtime_grading_and_registry():
    from graphs.baselines import BASELINES, baseline_spec
    from mas_orchestra.bench.grading import VALID_KINDS
    from mas_orchestra.builtin_kinds import BASELINE_KINDS
    from mas_orchestra.registry import BUILTIN_KINDS
    from mas_orchestra.runtime import Status

    # eval runs have no checkpointer, so no run of theirs can pause for approval ("interrupted")
    assert tuple(s.value for s in Status if s is not Status.INTERRUPTED) == ev.STATUSES
    assert "interrupted" not in ev.STATUSES
    assert ev.GRADERS is VALID_KINDS
    assert ev.BASELINE_KINDS is BASELINE_KINDS and BASELINES is BASELINE_KINDS
    assert tuple(kind.name for kind in BUILTIN_KINDS) == BASELINE_KINDS  # the light copy names the kinds
    for kind in BASELINES:
        assert runner._baseline_spec(kind, None) == baseline_spec(kind)
    assert runner._baseline_spec("cot", 0.0).nodes[0].params == {"temperature": 0.0}


def test_eval_constants_import_no_langgraph():
    # the CLI imports them for every command: they must not pull in the runtime, LangGraph or ``graphs``
    code = ("import sys, mas_orchestra.bench.evaluation.common; "
            "print(','.join(m for m in ('langgraph', 'graphs', 'mas_orchestra.runtime') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


# -- summary numbers ---------------------------------------------------------------------------------


async def test_summary_is_exact_on_a_known_mixture(tmp_path):
    # plain: 2/2 correct, wrong: 0/2, flaky: 1/2, invalid orchestration: 0/2 (never runs a sub-agent)
    rows = em.make_rows(["", "wrong", "flaky", "invalid"])
    summary, orch, sub = await _orchestra_eval(rows, tmp_path / "run", samples=2, grader="math")
    assert summary["n"] == 4 and summary["samples"] == 2 and summary["runs"] == 8
    assert summary["avg_at_k"] == pytest.approx(3 / 8)
    assert summary["pass_at_k"] == pytest.approx(2 / 4)
    assert summary["valid_rate"] == pytest.approx(6 / 8)
    assert summary["status_counts"] == {"ok": 6, "invalid_spec": 2, "compile_error": 0, "exec_error": 0, "timeout": 0}
    # each valid run: 1 orchestrator + 2 sub-agent calls; each invalid one: the orchestrator call only
    assert summary["total_llm_calls"] == 6 * 3 + 2 == orch.calls + sub.calls
    assert summary["total_orchestrator_calls"] == 8 and summary["total_subagent_calls"] == 12
    assert summary["mean_llm_calls"] == pytest.approx(20 / 8)
    assert summary["agent_histogram"] == {"cot": 12}
    assert summary["mean_agents_per_spec"] == pytest.approx(2.0)
    lines = _lines(tmp_path / "run")
    assert len(lines) == 8
    assert summary["total_tokens"] == sum(line["usage"]["total_tokens"] for line in lines) > 0
    assert summary["mean_total_tokens"] == pytest.approx(summary["total_tokens"] / 8)
    assert summary["total_wall_s"] == pytest.approx(sum(line["usage"]["wall_s"] for line in lines))
    assert summary["total_cost_usd"] == 0.0 and summary["grade_errors"] == 0
    assert summary["elapsed_s"] > 0 and summary["grader"] == "math" and summary["dom"] == "high"
    fields = {"id", "sample", "status", "answer", "truth", "correct", "usage", "spec", "error", "orchestration"}
    assert all(fields <= set(line) for line in lines)
    by_key = {(line["id"], line["sample"]): line for line in lines}
    assert sorted(by_key) == [(f"q{i}", s) for i in range(4) for s in range(2)]
    assert {by_key["q1", s]["answer"] for s in (0, 1)} == {str(int(rows[1]["answer"]) + 1)}
    assert by_key["q3", 0]["spec"] is None and "OracleAgent" in by_key["q3", 0]["error"]
    assert by_key["q0", 0]["spec"]["nodes"][1]["id"] == "FINAL" and "<agent>" in by_key["q0", 0]["orchestration"]
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["samples"] == 2 and config["grader"] == "math" and config["orchestrator"].startswith("ScriptedChatModel")


async def test_exec_errors_and_timeouts_are_outcomes_with_a_valid_spec(tmp_path):
    summary, _, _ = await _orchestra_eval(em.make_rows(["boom", "", "invalid"]), tmp_path / "a")
    assert summary["status_counts"]["exec_error"] == 1 and summary["status_counts"]["invalid_spec"] == 1
    assert summary["valid_rate"] == pytest.approx(2 / 3) and summary["avg_at_k"] == pytest.approx(1 / 3)
    boom = next(line for line in _lines(tmp_path / "a") if line["id"] == "q0")
    assert boom["status"] == "exec_error" and boom["valid"] and boom["error"] and not boom["correct"]

    slow = em.subagent(delay=1.0)
    summary, _, _ = await _orchestra_eval(em.make_rows(["", ""]), tmp_path / "b", sub=slow,
                                          settings=RunSettings(timeout=0.2))
    assert summary["status_counts"]["timeout"] == 2 and summary["valid_rate"] == 1.0 and summary["avg_at_k"] == 0.0


async def test_orchestration_text_is_truncated_to_20k(tmp_path):
    orch = ScriptedChatModel(replies=["x" * 30_000])
    await _orchestra_eval(em.make_rows([""]), tmp_path / "run", orch=orch)
    (line,) = _lines(tmp_path / "run")
    assert line["status"] == "invalid_spec"
    assert len(line["orchestration"]) == 20_000 and line["orchestration_chars"] == 30_000


async def test_concurrency_bounds_runs_in_flight(tmp_path):
    orch = ScriptedChatModel(replies=[em.ORCHESTRATION], delay=0.05)
    summary, _, _ = await _orchestra_eval(em.make_rows([""] * 12), tmp_path / "run", orch=orch, concurrency=3)
    assert summary["avg_at_k"] == 1.0
    assert orch.peak_in_flight == 3  # one orchestrator call per run: runs in flight never exceed 3


# -- resume --------------------------------------------------------------------------------------------


async def test_resume_skips_done_pairs_and_grows_with_limit_and_samples(tmp_path):
    rows, out = em.make_rows(["", "wrong", "flaky", ""]), tmp_path / "run"
    first, orch, sub = await _orchestra_eval(rows, out, samples=2, limit=2)
    assert first["runs"] == 4 and orch.calls == 4 and sub.calls == 8

    again, orch, sub = await _orchestra_eval(rows, out, samples=2, limit=2)
    assert orch.calls == 0 and sub.calls == 0  # nothing new: no model call at all
    assert {k: again[k] for k in ("runs", "avg_at_k", "total_llm_calls")} == {
        k: first[k] for k in ("runs", "avg_at_k", "total_llm_calls")}

    grown, orch, sub = await _orchestra_eval(rows, out, samples=2, limit=4)
    assert orch.calls == 4 and sub.calls == 8  # only q2 and q3, two samples each
    assert grown["n"] == 4 and grown["runs"] == 8
    assert grown["avg_at_k"] == pytest.approx((2 + 0 + 1 + 2) / 8)
    assert grown["total_llm_calls"] == 8 * 3

    more, orch, _ = await _orchestra_eval(rows, out, samples=3, limit=4)
    assert orch.calls == 4 and more["runs"] == 12  # sample 2 of each question only
    keys = [(line["id"], line["sample"]) for line in _lines(out)]
    assert len(keys) == len(set(keys)) == 12


async def test_truncated_last_line_is_dropped_and_rerun(tmp_path):
    rows, out = em.make_rows(["", "", ""]), tmp_path / "run"
    await _orchestra_eval(rows, out)
    path = out / "results.jsonl"
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: last_start + 40])  # killed in the middle of writing the third line
    assert len(ev.read_results(path)) == 2  # the partial line is not a record
    summary, orch, _ = await _orchestra_eval(rows, out)
    assert orch.calls == 1 and summary["runs"] == 3
    lines = _lines(out)  # every line parses: the partial one was cut, not glued to
    assert sorted(line["id"] for line in lines) == ["q0", "q1", "q2"]

    with path.open("ab") as handle:  # garbage tail of a record that never finished
        handle.write(b'{"id": "q9", "sam')
    summary, orch, _ = await _orchestra_eval(rows, out)
    assert orch.calls == 0 and summary["runs"] == 3 and path.read_bytes().endswith(b"}\n")


async def test_config_mismatch_is_refused_unless_forced(tmp_path):
    rows, out = em.make_rows(["", ""]), tmp_path / "run"
    await _orchestra_eval(rows, out, grader="exact")
    with pytest.raises(ev.ConfigMismatchError, match="grader"):
        await _orchestra_eval(rows, out, grader="f1")
    with pytest.raises(ev.ConfigMismatchError, match="dom"):
        await _orchestra_eval(rows, out, grader="exact", config=OrchestraConfig(dom="low"))
    summary, orch, _ = await _orchestra_eval(rows, out, grader="f1", force=True)
    assert orch.calls == 0 and summary["grader"] == "f1" and summary["runs"] == 2


async def test_a_run_directory_in_use_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with storage._dir_lock(out), pytest.raises(ev.EvalInputError, match="another eval"):
        await _orchestra_eval(em.make_rows([""]), out)


def test_killed_cli_run_resumes_without_loss_or_repeats(tmp_path):
    """SIGKILL a CLI eval mid-run; the rerun completes it with every (id, sample) exactly once."""
    data = _write_rows(tmp_path / "data.jsonl", em.make_rows([""] * 20))
    out = tmp_path / "run"
    results = out / "results.jsonl"
    cmd = [sys.executable, "-m", "mas_orchestra", "eval", "--data", str(data), "--out", str(out),
           "--orchestrator", "python:tests.eval_models:orchestrator",
           "--subagent", "python:tests.eval_models:slow_subagent",
           "--grader", "exact", "--concurrency", "2", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVAL_MODELS_DELAY": "0.25", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if results.is_file() and results.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = results.read_bytes()
    kept = before[: before.rfind(b"\n") + 1]  # the complete lines at the moment of the kill
    assert 3 <= kept.count(b"\n") < 20 and not (out / "summary.json").exists()

    env["EVAL_MODELS_DELAY"] = "0"
    rerun = subprocess.run([*cmd, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    after = results.read_bytes()
    assert after.startswith(kept)  # nothing finished before the kill was lost or rewritten
    keys = [(line["id"], line["sample"]) for line in _lines(out)]
    assert sorted(keys) == sorted((f"q{i}", 0) for i in range(20))  # each pair exactly once
    summary = json.loads(rerun.stdout)
    assert summary["runs"] == 20 and summary["avg_at_k"] == 1.0


# -- baselines, grading, plots ---------------------------------------------------------------------------


async def test_baseline_mode_uses_no_orchestrator(tmp_path):
    rows = em.make_rows(["", "wrong", ""])
    sub = em.subagent()
    summary = await ev.aevaluate(rows, subagent=sub, baseline="cot", grader="exact", out_dir=tmp_path / "cot",
                                 progress=False)
    assert sub.calls == 3 and summary["total_orchestrator_calls"] == 0
    assert summary["avg_at_k"] == pytest.approx(2 / 3) and summary["valid_rate"] == 1.0
    assert summary["agent_histogram"] == {"cot": 3} and summary["label"] == "cot"
    assert summary["orchestrator"] is None and summary["baseline"] == "cot"
    assert _lines(tmp_path / "cot")[0]["spec"]["nodes"][0]["agent"] == "cot"

    sub = em.subagent()
    summary = await ev.aevaluate(rows, subagent=sub, baseline="sc", grader="exact", out_dir=tmp_path / "sc",
                                 progress=False)
    assert sub.calls == 3 * 5 and summary["mean_llm_calls"] == 5.0 and summary["agent_histogram"] == {"sc": 3}

    with pytest.raises(ev.EvalInputError, match="search backend"):
        await ev.aevaluate(rows, subagent=sub, baseline="search", out_dir=tmp_path / "s", progress=False)


async def test_grading_errors_are_recorded_never_raised(tmp_path, monkeypatch):
    rows = em.make_rows(["", ""])
    failing = ScriptedChatModel(replies=[RuntimeError("judge API down")])
    summary, _, _ = await _orchestra_eval(rows, tmp_path / "judge-down", grader="judge", judge=failing)
    assert summary["avg_at_k"] == 0.0 and summary["grade_errors"] == 2 and summary["status_counts"]["ok"] == 2
    line = _lines(tmp_path / "judge-down")[0]
    assert line["correct"] is False and "judge API down" in line["grade_error"] and line["answer"] == rows[0]["answer"]

    summary, _, _ = await _orchestra_eval(rows, tmp_path / "judge-yes", grader="judge",
                                          judge=ScriptedChatModel(replies=["yes"]))
    assert summary["avg_at_k"] == 1.0 and summary["grade_errors"] == 0 and summary["judge_model"]

    summary, _, _ = await _orchestra_eval(rows, tmp_path / "mcq", grader="mcq")  # "31" names no letter
    assert summary["grade_errors"] == 2 and "letter" in _lines(tmp_path / "mcq")[0]["grade_error"]

    monkeypatch.setattr(runner, "_GRADE_SLACK_S", 0.0)
    slow_judge = ScriptedChatModel(replies=["yes"], delay=2.0)
    summary, _, _ = await _orchestra_eval(rows, tmp_path / "slow", grader="judge", judge=slow_judge,
                                          settings=RunSettings(grade_timeout=0.1))
    assert summary["avg_at_k"] == 0.0 and "timed out" in _lines(tmp_path / "slow")[0]["grade_error"]


async def test_pareto_plot_covers_sibling_runs(tmp_path):
    runs = tmp_path / "runs"
    rows = em.make_rows(["", "wrong"])
    await ev.aevaluate(rows, subagent=em.subagent(), baseline="cot", grader="exact", out_dir=runs / "a-cot",
                       progress=False)
    (runs / "not-a-run").mkdir()
    await _orchestra_eval(rows, runs / "b-orch")
    png = runs / "b-orch" / "pareto.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert [d.name for d in ev.discover_run_dirs(runs / "b-orch")] == ["a-cot", "b-orch"]
    out = ev.pareto_plot([runs / "a-cot", runs / "b-orch", runs / "not-a-run"], tmp_path / "p" / "both.png")
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert plots._frontier([(0, 10), (1, 5), (2, 50), (3, 40)]) == [(0, 10), (2, 50)]


def test_pareto_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    with pytest.raises(MissingExtraError, match=r"mas-orchestra\[eval\]"):
        ev.pareto_plot([], tmp_path / "x.png")


# -- data checks --------------------------------------------------------------------------------------------


def test_load_rows_checks_every_row(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": 1, "question": "q?", "answer": 7}\n\n{"id": "m", "question": "q2?", "answer": ["1", "2"]}\n')
    rows = ev.load_rows(path)
    assert rows[0]["id"] == "1" and rows[0]["answer"] == "7" and rows[1]["answer"] == ["1", "2"]
    bad = {
        '{"id": "a", "answer": "1"}': r"d\.jsonl:1: row without 'question'",
        '{"id": "a", "question": "q"}': "without 'answer'",
        '{"question": "q", "answer": "1"}': "without 'id'",
        '{"id": "a", "question": "q", "answer": true}': "'answer' must be",
        '{"id": "a", "question": "q", "answer": []}': "'answer' list",
        '[1, 2]': "JSON object",
        '{"id": "a", "question": ': "not valid JSON",
    }
    for text, message in bad.items():
        path.write_text(text + "\n")
        with pytest.raises(ev.EvalInputError, match=message):
            ev.load_rows(path)
    path.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "a", "question": "r", "answer": "2"}\n')
    with pytest.raises(ev.EvalInputError, match=r":2: duplicate id 'a' \(first at .*:1\)"):
        ev.load_rows(path)
    with pytest.raises(ev.EvalInputError, match="no such data file"):
        ev.load_rows(tmp_path / "missing.jsonl")


def test_evaluate_refuses_a_running_loop(tmp_path):
    async def inner():
        with pytest.raises(RuntimeError, match="aevaluate"):
            ev.evaluate(em.make_rows([""]), subagent=em.subagent(), out_dir=tmp_path)

    asyncio.run(inner())


# -- command line ---------------------------------------------------------------------------------------------

SCRIPTED = ["--orchestrator", "python:tests.eval_models:orchestrator", "--subagent", "python:tests.eval_models:subagent"]


def test_cli_json_and_table_output(tmp_path, capsys):
    data = _write_rows(tmp_path / "data.jsonl", em.make_rows(["", "wrong", "", "invalid"]))
    out = tmp_path / "run"
    args = ["eval", "--data", str(data), "--out", str(out), "--grader", "exact", "--no-progress", *SCRIPTED]
    assert cli_main([*args, "--json", "--limit", "3"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # stdout is only the JSON summary
    assert str(out) in captured.err
    assert summary["runs"] == 3 and summary["avg_at_k"] == pytest.approx(2 / 3)
    assert summary["data"] == str(data.resolve()) and summary["label"] == "orchestra:python:tests.eval_models:orchestrator"
    assert cli_main(args) == 0
    table = capsys.readouterr().out
    assert "avg@k 50.0%" in table and "invalid_spec 1" in table and str(out) in table
    assert (out / "pareto.png").read_bytes()[:8] == PNG_MAGIC

    assert cli_main(["pareto", str(out), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC
    assert cli_main(["pareto", str(tmp_path)]) == 2
    assert "no summary.json" in capsys.readouterr().err


def test_cli_baseline(tmp_path, capsys):
    data = _write_rows(tmp_path / "data.jsonl", em.make_rows(["", "wrong"]))
    args = ["eval", "--data", str(data), "--out", str(tmp_path / "run"), "--grader", "exact", "--no-progress",
            "--baseline", "cot", "--subagent", "python:tests.eval_models:subagent", "--json"]
    assert cli_main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["label"] == "cot" and summary["avg_at_k"] == 0.5 and summary["total_orchestrator_calls"] == 0


def test_cli_bad_input_exits_2_with_a_message(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good = _write_rows(tmp_path / "good.jsonl", em.make_rows(["", ""]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "answer": "2"}\n')

    def run(*extra, data=good, out="run"):
        code = cli_main(["eval", "--data", str(data), "--out", str(tmp_path / out), "--grader", "exact",
                         "--no-progress", *extra])
        return code, capsys.readouterr().err

    code, err = run(*SCRIPTED, data=tmp_path / "missing.jsonl")
    assert code == 2 and "no such data file" in err
    code, err = run(*SCRIPTED, data=bad)
    assert code == 2 and "bad.jsonl:2" in err and "'question'" in err
    code, err = run("--subagent", "openai:gpt-4o-mini", "--orchestrator", "openai:gpt-4o-mini", out="openai")
    assert code == 2 and ("OPENAI_API_KEY" in err or "pip install" in err)
    code, err = run("--subagent", "nosuch:model", "--baseline", "cot", out="nosuch")
    assert code == 2 and "unknown model" in err
    code, err = run(*SCRIPTED, "--grader", "judge", out="judge")
    assert code == 2 and "judge model" in err
    code, err = run("--baseline", "search", "--subagent", "scripted:1", out="search")
    assert code == 2 and "search backend" in err
    assert run(*SCRIPTED)[0] == 0
    code, err = run(*SCRIPTED, "--dom", "low")
    assert code == 2 and "different run" in err and "--force" in err
    assert run(*SCRIPTED, "--dom", "low", "--force")[0] == 0
    for argv in (["--grader", "nosuch"], ["--samples", "0"]):
        with pytest.raises(SystemExit) as exc:
            cli_main(["eval", "--data", str(good), *argv])
        assert exc.value.code == 2
        assert "error: argument" in capsys.readouterr().err


def test_cli_error_in_a_subprocess_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q"}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "mas_orchestra", "eval", "--data", str(bad), "--out", str(tmp_path / "r"),
         "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2 and "bad.jsonl:1" in proc.stderr and "Traceback" not in proc.stderr


async def test_progress_bar_shows_live_accuracy_on_stderr(tmp_path, capsys):
    await ev.aevaluate(em.make_rows(["", "wrong"]), orchestrator=em.orchestrator(), subagent=em.subagent(),
                       grader="exact", out_dir=tmp_path / "run", progress=True, plot=False)
    captured = capsys.readouterr()
    assert "acc=50.0%" in captured.err and captured.out == ""
    assert not (tmp_path / "run" / "pareto.png").exists()


async def test_spec_warnings_and_the_whole_response_fallback(tmp_path):
    rows = [{"id": "q0", "question": "6 x 7?", "answer": "42"}, {"id": "q1", "question": "2 + 2?", "answer": "4"}]
    texts = {
        "6 x 7?": "<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent><answer>41</answer>",
        "2 + 2?": "Two and two make \\boxed{4}.",
    }

    def orchestrate(messages, index):
        prompt = str(messages[-1].content)
        return next(text for question, text in texts.items() if prompt.rstrip().endswith(question))

    sub = ScriptedChatModel(replies=["<thinking>6 x 7</thinking><answer>42</answer>"])
    summary, _, _ = await _orchestra_eval(rows, tmp_path / "off", orch=ScriptedChatModel(replies=orchestrate), sub=sub)
    assert summary["spec_warnings"] == {"ignored_after_plan": 1} and summary["runs_with_spec_warnings"] == 1
    assert summary["avg_at_k"] == pytest.approx(0.5) and summary["whole_response_answers"] == 0
    assert "spec warnings  ignored_after_plan 1 (in 1 runs)" in ev.format_summary(summary)
    summary, _, _ = await _orchestra_eval(rows, tmp_path / "on", orch=ScriptedChatModel(replies=orchestrate), sub=sub,
                                          grader="math", config=OrchestraConfig(whole_response_fallback=True))
    assert summary["avg_at_k"] == pytest.approx(1.0) and summary["whole_response_answers"] == 1
    assert summary["status_counts"]["invalid_spec"] == 1  # still invalid: the fallback only grades the text
    lines = {line["id"]: line for line in _lines(tmp_path / "on")}
    assert lines["q1"]["answer_source"] == "whole_response" and lines["q1"]["correct"]
    summary, _, _ = await _orchestra_eval(rows, tmp_path / "strict", orch=ScriptedChatModel(replies=orchestrate),
                                          sub=sub, config=OrchestraConfig(strict=True))
    assert summary["status_counts"]["invalid_spec"] == 2 and summary["spec_warnings"] == {}
