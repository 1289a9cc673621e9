"""Tests of training/: the outcome reward, its metrics, the data loaders, the config and a real GRPO run."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import math
import time
from pathlib import Path

import pytest

from mas_orchestra import OrchestraConfig, RunSettings
from mas_orchestra.runtime import Outcome, Status
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel, cot_reply
from training import rewards as rewards_mod
from training.config import Hardware, OrchestraGRPOConfig, TrainingConfigError, build_parser, parse_config
from training.data import (
    build_dataset,
    filter_long_prompts,
    load_jsonl,
    load_rows,
    load_verl_parquet,
    parse_values,
    to_trl_rows,
)
from training.records import STATUSES, RolloutRecord, summarize
from training.rewards import REWARD_QUANTUM, completion_text, make_outcome_reward, question_from_prompt

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
_HAVE_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "trl", "peft", "datasets"))
needs_train = pytest.mark.skipif(not _HAVE_TRAIN, reason="pip install 'mas-orchestra[train]'")

Q = "What is 2 + 2?"


def xml(data: dict) -> str:
    return spec_from_data(data).to_xml()


COT1 = xml({"nodes": [{"id": "A", "agent": "cot", "input": ""}]})
SC1 = xml({"nodes": [{"id": "S", "agent": "sc", "input": "", "params": {"samples": 3}}]})
PAR4 = xml({
    "nodes": [
        {"id": "A", "agent": "cot", "input": "part a"},
        {"id": "B", "agent": "cot", "input": "part b"},
        {"id": "C", "agent": "cot", "input": "part c"},
        {"id": "J", "agent": "cot", "input": "join ${A}, ${B} and ${C}"},
    ],
    "edges": [{"source": s, "target": "J"} for s in "ABC"],
})
DIRECT = "<thinking>easy</thinking><answer>4</answer>"
INVALID = "<agent><agent_name>NoSuchAgent</agent_name></agent>"


def run(reward, completions, answers, questions=None, **kw):
    n = len(completions)
    return asyncio.run(reward(
        prompts=[[{"role": "user", "content": f"# Task\n{Q}"}]] * n, completions=completions, answer=answers,
        question=questions or [Q] * n, **kw,
    ))


# -- reward mapping -------------------------------------------------------------------------------------------

def test_status_mapping_with_real_execution():
    good = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")]))
    assert run(good, [COT1, COT1, INVALID], [["4"], ["5"], ["4"]]) == [1.0, 0.0, 0.0]
    statuses = [r.status for r in good.last_batch["records"]]
    assert statuses == ["ok", "ok", "invalid_spec"]
    assert [r.correct for r in good.last_batch["records"]] == [True, False, False]

    failing = make_outcome_reward(subagent=ScriptedChatModel(replies=[RuntimeError("model down")]),
                                  settings=RunSettings(max_retries=0))
    assert run(failing, [COT1], [["4"]]) == [0.0]
    assert failing.last_batch["records"][0].status == "exec_error"

    slow = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")], delay=2.0),
                               settings=RunSettings(timeout=0.2))
    t0 = time.perf_counter()
    assert run(slow, [COT1], [["4"]]) == [0.0]
    assert time.perf_counter() - t0 < 1.5
    assert slow.last_batch["records"][0].status == "timeout"


def test_execution_bonus_and_cost_penalty():
    model = ScriptedChatModel(replies=[cot_reply("4")])
    reward = make_outcome_reward(subagent=model, execution_success_weight=0.1, cost_weight=0.05,
                                 settings=RunSettings(max_retries=0))
    # correct 1-call spec: 0.1 + (1 - 0.05); wrong: 0.1; correct 4-call spec: 0.1 + (1 - 0.2); invalid: 0
    out = run(reward, [COT1, COT1, PAR4, INVALID], [["4"], ["9"], ["4"], ["4"]])
    assert out == pytest.approx([1.05, 0.1, 0.9, 0.0], abs=REWARD_QUANTUM)  # rewards are multiples of 2^-16
    huge = make_outcome_reward(subagent=model, cost_weight=10.0)
    assert run(huge, [PAR4], [["4"]]) == [0.0]  # never below 0 for a correct answer
    errored = make_outcome_reward(subagent=ScriptedChatModel(replies=[RuntimeError("x")]),
                                  execution_success_weight=0.1, settings=RunSettings(max_retries=0))
    assert run(errored, [COT1], [["4"]]) == [0.0]  # no bonus when it did not execute successfully


@pytest.mark.parametrize("status", list(Status))
def test_every_runtime_status_maps_to_its_reward(monkeypatch, status):
    async def fake_execute(spec, question, **kw):
        return Outcome(status=status, question=question, answer="4" if status is Status.OK else None, spec=spec)

    monkeypatch.setattr(rewards_mod, "execute_spec", fake_execute)
    reward = make_outcome_reward(subagent=ScriptedChatModel(), execution_success_weight=0.25)
    expected = 1.25 if status is Status.OK else 0.0
    assert run(reward, [COT1], [["4"]]) == [expected]
    assert reward.last_batch["records"][0].status == status.value


def test_plain_and_conversational_completions_score_the_same():
    reward = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")]))
    conversational = [[{"role": "assistant", "content": COT1}], [{"role": "assistant", "content": [
        {"type": "text", "text": DIRECT}]}]]
    assert run(reward, [COT1, DIRECT], [["4"], ["4"]]) == [1.0, 1.0]
    assert run(reward, conversational, [["4"], ["4"]]) == [1.0, 1.0]
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "a\nb"
    assert question_from_prompt([{"role": "user", "content": "intro\n# Task\nWhat?\n"}]) == "What?"


def test_answer_column_forms_and_question_fallback():
    reward = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")]))
    # plain string, one-item list; no question column: recovered from the prompt's "# Task" section
    out = asyncio.run(reward(prompts=[[{"role": "user", "content": f"# Task\n{Q}"}]] * 2,
                             completions=[COT1, COT1], answer=["4", ["4"]]))
    assert out == [1.0, 1.0]
    model = ScriptedChatModel(replies=[cot_reply("4")])
    reward = make_outcome_reward(subagent=model)
    asyncio.run(reward(prompts=[[{"role": "user", "content": f"blah\n# Task\n{Q}"}]], completions=[COT1],
                       answer=[["4"]]))
    assert Q in model.prompts[0]


def test_multi_answer_truth():
    reward = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply(r"\boxed{3} and \boxed{5}")]))
    assert run(reward, [COT1, COT1], [["3", "5"], ["5", "3"]]) == [1.0, 0.0]


def test_a_crashing_rollout_scores_zero_is_logged_and_the_batch_goes_on(monkeypatch, caplog):
    real = rewards_mod.execute_spec

    async def flaky(spec, question, **kw):
        if question == "explode":
            raise KeyError("unexpected bug in a rollout")
        return await real(spec, question, **kw)

    monkeypatch.setattr(rewards_mod, "execute_spec", flaky)
    reward = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")]))
    with caplog.at_level(logging.INFO, logger="training.rewards"):
        out = run(reward, [COT1, COT1, COT1, COT1], [["4"], ["4"], [], ["4"]], questions=[Q, "explode", Q, Q])
    # row 1 raises inside execution; row 2 has an empty ground truth (the grader raises ValueError)
    assert out == [1.0, 0.0, 0.0, 1.0]
    records = reward.last_batch["records"]
    assert [r.status for r in records] == ["ok", "crash", "crash", "ok"]
    assert "KeyError" in records[1].error and "ValueError" in records[2].error
    crashes = [r for r in caplog.records if r.levelno == logging.ERROR and "crashed" in r.getMessage()]
    assert len(crashes) == 2 and all(r.exc_info for r in crashes)
    assert any("reward batch 1" in r.getMessage() for r in caplog.records)  # the batch summary line
    assert reward.last_batch["metrics"]["status/crash"] == pytest.approx(0.5)


def test_batch_metrics_are_exact():
    model = ScriptedChatModel(replies=[cot_reply("4")])
    reward = make_outcome_reward(subagent=model)
    batch = [COT1, PAR4, INVALID, "no tags at all", DIRECT, SC1]
    out = run(reward, batch, [["4"]] * 6)
    assert out == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    m = reward.last_batch["metrics"]
    assert m["valid_spec_rate"] == pytest.approx(4 / 6)
    assert m["status/ok"] == pytest.approx(4 / 6)
    assert m["status/invalid_spec"] == pytest.approx(2 / 6)
    for s in ("compile_error", "exec_error", "timeout", "crash"):
        assert m[f"status/{s}"] == 0.0
    assert m["correct_rate"] == pytest.approx(4 / 6)
    assert m["agents_per_spec"] == pytest.approx((1 + 4 + 0 + 1) / 4)
    assert m["delegation_share"] == pytest.approx(2 / 4)  # COT1 and SC1 are single-agent specs
    assert m["direct_answer_share"] == pytest.approx(1 / 4)
    assert m["agent_share/cot"] == pytest.approx(5 / 6)
    assert m["agent_share/sc"] == pytest.approx(1 / 6)
    assert m["agent_share/debate"] == m["agent_share/reflexion"] == 0.0
    assert m["subagent_calls"] == pytest.approx((1 + 4 + 0 + 3) / 4)
    assert model.calls == 8
    assert m["outcome_reward/mean"] == pytest.approx(4 / 6)
    assert m["outcome_reward/std"] == pytest.approx((4 / 6 * 2 / 6) ** 0.5)
    assert m["subagent_tokens"] > 0
    # the trainer's view: records queue until popped, then the same numbers come out once
    assert reward.pop_metrics() == pytest.approx(m)
    assert reward.pop_metrics() == {}


def test_summarize_keys_are_stable_even_when_empty():
    keys = set(summarize([RolloutRecord(index=0, status="invalid_spec")], ["cot", "sc"]))
    assert keys == set(summarize([], ["cot", "sc"]))
    assert {f"status/{s}" for s in STATUSES} <= keys and "valid_spec_rate" in keys


def test_spec_warning_rates_strict_and_the_whole_response_fallback():
    from mas_orchestra.spec import WARNING_KINDS

    messy = COT1 + "\nExplanation: one agent is enough.\n<answer>4</answer>"
    boxed = "Two plus two is \\boxed{4}."
    model = ScriptedChatModel(replies=[cot_reply("4")])
    reward = make_outcome_reward(subagent=model, config=OrchestraConfig(dom="high"))
    assert run(reward, [messy, boxed, COT1], [["4"]] * 3) == [1.0, 0.0, 1.0]
    m = reward.last_batch["metrics"]
    assert {f"spec_warnings/{k}" for k in WARNING_KINDS} <= set(m)
    assert m["spec_warnings/ignored_after_plan"] == pytest.approx(1 / 3) and m["spec_warnings/duplicate_edge"] == 0.0
    assert reward.last_batch["records"][0].spec_warnings == {"ignored_after_plan": 1}
    strict = make_outcome_reward(subagent=model, config=OrchestraConfig(strict=True))
    assert run(strict, [messy, COT1], [["4"]] * 2) == [0.0, 1.0]
    assert "ignored_after_plan" in strict.last_batch["records"][0].error
    fallback = make_outcome_reward(subagent=model, config=OrchestraConfig(whole_response_fallback=True))
    assert run(fallback, [boxed, "no answer here"], [["4"]] * 2) == [1.0, 0.0]
    records = fallback.last_batch["records"]
    assert records[0].whole_response and records[0].status == "invalid_spec" and records[0].correct
    assert fallback.last_batch["metrics"]["whole_response_rate"] == pytest.approx(1.0)


def test_config_strict_and_prompt_fields():
    cfg = parse_config(["--strict", "--prompt", "prompts-original"])
    assert cfg.strict is True and cfg.prompt == "prompts-original"
    assert parse_config([]).strict is False and parse_config([]).prompt is None


def test_reward_is_an_async_callable_trl_recognises():
    reward = make_outcome_reward(subagent="scripted:4")
    assert reward.__name__ == "outcome_reward"
    if _HAVE_TRAIN:
        from trl.trainer.utils import get_callable_name, is_async_callable

        assert is_async_callable(reward) and get_callable_name(reward) == "outcome_reward"
    with pytest.raises(ValueError):
        make_outcome_reward(subagent="scripted:4", grader="nope")
    with pytest.raises(ValueError):
        make_outcome_reward(subagent="scripted:4", config=OrchestraConfig(dom="medium"))


def test_32_rollouts_run_concurrently():
    """32 completions of a 3-parallel + join graph with 0.4 s per sub-agent call: about one critical path."""
    model = ScriptedChatModel(replies=[cot_reply("4")], delay=0.4)
    reward = make_outcome_reward(subagent=model, concurrency=128)
    run(reward, [PAR4], [["4"]])  # warm-up (imports, grading worker)
    # the CPU cost of 32 compiles + runs alone (no latency), so a loaded machine does not fail the test
    instant = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")]))
    t0 = time.perf_counter()
    run(instant, [PAR4] * 32, [["4"]] * 32)
    cpu_only = time.perf_counter() - t0
    model.reset()
    t0 = time.perf_counter()
    out = run(reward, [PAR4] * 32, [["4"]] * 32)
    wall = time.perf_counter() - t0
    critical_path, sequential = 0.8, 32 * 4 * 0.4
    print(f"\n32 rollouts: {wall:.2f}s; critical path {critical_path}s (ratio {wall / critical_path:.2f}); "
          f"same batch without latency {cpu_only:.2f}s; sequential would be {sequential:.1f}s "
          f"({sequential / wall:.0f}x slower); peak in flight {model.peak_in_flight}")
    assert out == [1.0] * 32 and model.calls == 128
    # concurrency is asserted by what was in flight at once, not by the wall time (a loaded machine stretches
    # walls; benchmarks/rollout_bench.py measures the speed-up as a ratio)
    assert model.peak_in_flight >= 32 * 3 * 0.9


def test_max_concurrency_bounds_rollouts_in_flight():
    model = ScriptedChatModel(replies=[cot_reply("4")], delay=0.05)
    reward = make_outcome_reward(subagent=model, concurrency=4)
    run(reward, [COT1] * 16, [["4"]] * 16)
    assert model.peak_in_flight == 4


# -- data -----------------------------------------------------------------------------------------------------

def test_jsonl_rows(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n\n{"question": "q2", "answer": [3, "4"]}\n')
    rows = load_jsonl(path)
    assert rows == [
        {"id": "a", "question": "1+1?", "answer": ["2"], "source": "d"},
        {"id": "d-1", "question": "q2", "answer": ["3", "4"], "source": "d"},
    ]
    assert load_rows(f"jsonl:{path}") == load_rows(str(path)) == rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": "2"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        load_jsonl(bad)


def test_shared_jsonl(data_dir):
    rows = load_rows(str(data_dir / "gsm8k_test.jsonl"), limit=5)
    assert len(rows) == 5 and all(isinstance(r["answer"], list) and r["answer"] for r in rows)


def test_masbench_rows_and_spec_strings():
    rows = load_rows("masbench:depth:2,3:n=2:seed=1")
    assert len(rows) == 4 and {r["source"] for r in rows} == {"masbench-depth"}
    assert rows == load_rows("masbench:depth:2-3:n=2:seed=1:split=train")
    multi = load_rows("masbench:parallel:2:n=1:split=test")
    assert len(multi[0]["answer"]) == 2  # multi-answer kept as a list
    assert len(load_rows("masbench:depth:2:n=3+masbench:parallel:2:n=1", limit=3)) == 3
    assert parse_values("2,5-6") == [2, 5, 6]
    for bad in ("masbench:depth", "masbench:depth:2:bogus=1", "nope:x", "masbench:depth:x"):
        with pytest.raises(ValueError):
            load_rows(bad)


def _write_verl(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([
        {"data_source": "aime24", "prompt": [{"role": "user", "content": "Find x."}],
         "reward_model": {"style": "rule", "ground_truth": "7"}, "extra_info": {"index": 3, "split": "train"}},
        {"data_source": "aime24", "prompt": [{"role": "user", "content": "Ignored prompt text"}],
         "reward_model": {"style": "rule", "ground_truth": "12"}, "extra_info": {"index": 4, "split": "train",
                                                                                 "question": "Find y."}},
    ])
    pq.write_table(table, path)


def _write_verl_multi(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([
        {"data_source": "masbench", "prompt": [{"role": "system", "content": "sys"},
                                               {"role": "user", "content": "Two problems."}],
         "reward_model": {"ground_truth": ["1", "2"]}, "extra_info": {"index": 0}},
    ]), path)


def test_verl_parquet_rows(tmp_path):
    path = tmp_path / "train.parquet"
    _write_verl(path)
    rows = load_verl_parquet(path)
    assert rows == [
        {"id": "aime24-3", "question": "Find x.", "answer": ["7"], "source": "aime24"},
        {"id": "aime24-4", "question": "Find y.", "answer": ["12"], "source": "aime24"},
    ]
    assert load_rows(f"parquet:{path}") == load_rows(str(path)) == rows
    kept = load_rows(f"parquet:{path}:prompt=keep")
    assert kept[0]["prompt"] == [{"role": "user", "content": "Find x."}]
    assert to_trl_rows(kept)[0]["prompt"] == [{"role": "user", "content": "Find x."}]
    multi = tmp_path / "multi.parquet"
    _write_verl_multi(multi)
    (row,) = load_verl_parquet(multi)
    assert row["answer"] == ["1", "2"] and row["question"] == "Two problems."


@needs_train
def test_trl_dataset_holds_single_and_multi_answers(tmp_path):
    ds = build_dataset("masbench:depth:2:n=2+masbench:parallel:2:n=1", dom="high")
    assert len(ds) == 3 and set(ds.column_names) == {"prompt", "question", "answer", "id", "source", "intermediates"}
    assert ds[0]["answer"] == [ds[0]["answer"][0]] and len(ds[2]["answer"]) == 2
    assert ds[0]["prompt"][0]["role"] == "user" and ds[0]["question"] in ds[0]["prompt"][0]["content"]
    assert "WebSearchAgent" not in ds[0]["prompt"][0]["content"]  # no search backend → not offered

    class Tok:
        def apply_chat_template(self, messages, **kw):
            return {"input_ids": list(range(len(messages[0]["content"])))}

    longest = max(len(r["prompt"][0]["content"]) for r in ds)
    assert len(filter_long_prompts(ds, Tok(), longest)) == 3
    assert len(filter_long_prompts(ds, Tok(), longest - 1)) < 3
    with pytest.raises(ValueError):
        filter_long_prompts(ds, Tok(), 10)


# -- config ---------------------------------------------------------------------------------------------------

def test_config_yaml_then_cli_override(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: Qwen/Qwen2.5-1.5B-Instruct\nnum-generations: 8\nper_device_train_batch_size: 8\n"
                    "learning_rate: 2.0e-5\nuse_vllm: true\nresume_from_checkpoint: true\nlimit: null\n")
    cfg = parse_config(["--config", str(path), "--num-generations", "4", "--no-use-vllm", "--beta=0.01"])
    assert cfg.model == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg.num_generations == 4 and cfg.per_device_train_batch_size == 8
    assert cfg.learning_rate == 2e-5 and cfg.beta == 0.01 and cfg.use_vllm is False
    assert cfg.resume_from is True and cfg.limit is None
    assert parse_config(["--resume"]).resume_from is True
    assert parse_config(["--resume", "runs/x/checkpoint-5"]).resume_from == "runs/x/checkpoint-5"
    assert parse_config([]).resume_from is False
    assert parse_config(["--max_steps", "7", "--lora-target", "q_proj, v_proj"]).lora_target_modules == [
        "q_proj", "v_proj"]


def test_config_defaults_are_the_cpu_smoke_and_match_the_recipe():
    cfg = parse_config([])
    assert cfg == OrchestraGRPOConfig()
    assert (cfg.model, cfg.subagent, cfg.max_steps, cfg.num_generations, cfg.max_completion_length) == (
        "embedded", "embedded", 2, 4, 128)
    assert (cfg.learning_rate, cfg.beta, cfg.epsilon, cfg.temperature, cfg.lora_target) == (
        1e-5, 0.001, 0.2, 1.0, "all-linear")
    assert parse_config(["--config", str(RECIPES / "cpu_smoke.yaml")]) == cfg


def test_config_errors(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("num_generation: 8\n")
    with pytest.raises(SystemExit):
        parse_config(["--config", str(path)])
    assert "unknown keys num_generation (did you mean num_generations?)" in capsys.readouterr().err
    renamed = tmp_path / "old.yaml"
    renamed.write_text("resume: true\nvllm_server_url: http://x\n")
    with pytest.raises(SystemExit):
        parse_config(["--config", str(renamed)])
    err = capsys.readouterr().err
    assert "resume (did you mean resume_from_checkpoint?)" in err and "did you mean vllm_server_base_url?" in err
    typed = tmp_path / "typed.yaml"
    typed.write_text("merged_sampling: maybe\n")
    with pytest.raises(SystemExit):
        parse_config(["--config", str(typed)])
    err = capsys.readouterr().err
    assert "merged_sampling" in err and "maybe" in err  # the field and the value are named
    with pytest.raises(SystemExit):
        parse_config(["--num-generations", "3"])  # 2 x 2 completions is not a multiple of 3
    with pytest.raises(SystemExit):
        parse_config(["--dom", "medium"])
    with pytest.raises(SystemExit):
        parse_config(["--grader", "nope"])
    assert "valid values are math, exact, f1, mcq, judge" in capsys.readouterr().err  # grading.VALID_KINDS
    with pytest.raises(SystemExit):
        parse_config(["--use-vllm", "--vllm-mode", "server"])
    assert "needs --vllm-server-base-url" in capsys.readouterr().err
    with pytest.raises(TrainingConfigError, match=r"logging_steps=0: must be > 0.*eval_steps=2\.5: must be a whole"):
        OrchestraGRPOConfig(logging_steps=0, eval_steps=2.5)
    with pytest.raises(TrainingConfigError, match=r"lora_layers=0: must be >= 1 \(or null"):
        OrchestraGRPOConfig(lora_layers=0)
    with pytest.raises(TrainingConfigError, match=r"head_chunk_logits=-1: must be >= 0"):
        OrchestraGRPOConfig(head_chunk_logits=-1)
    with pytest.raises(TrainingConfigError, match=r"prompt_grad=false: .* set shared_prefix: true"):
        OrchestraGRPOConfig(prompt_grad=False, shared_prefix=False)
    assert not parse_config(["--prompt-grad", "false"]).prompt_grad
    with pytest.raises(SystemExit):
        parse_config(["--bf16", "sometimes"])
    assert "expected true, false or auto, got 'sometimes'" in capsys.readouterr().err
    text = build_parser().format_help()
    assert "--num-generations" in text and "GRPO group size" in text and "--config" in text


def test_config_old_spellings_still_work():
    """Flags users already type: --resume (bare or a path), --vllm-server-url, --no-<flag> of every boolean of
    ours, auto for the hardware-decided options; recipe keys may use - for _."""
    assert parse_config(["--vllm-server-url", "http://h:8000"]).vllm_server_base_url == "http://h:8000"
    assert parse_config(["--no-merge"]).merge is False and parse_config(["--merge"]).merge is True
    assert parse_config(["--no-use-vllm"]).use_vllm is False and parse_config(["--no-strict"]).strict is False
    assert parse_config(["--no-merged-sampling"]).merged_sampling is False
    assert parse_config(["--shared-prefix", "false"]).shared_prefix is False
    assert parse_config(["--resume", "false"]).resume_from is False
    assert parse_config(["--resume-from-checkpoint", "last"]).resume_from is True


def test_auto_options_are_decided_by_the_hardware(monkeypatch):
    from training import config as config_mod

    monkeypatch.setattr(config_mod, "detect_hardware", lambda: Hardware(cuda=False, native_bf16=False))
    cfg = parse_config([])
    assert (cfg.bf16, cfg.gradient_checkpointing, cfg.batched_rollouts, cfg.shared_prefix, cfg.use_cpu) == (
        False, False, True, True, True)
    forced = parse_config(["--gradient-checkpointing", "--batched-rollouts", "false", "--shared-prefix", "no"])
    assert (forced.gradient_checkpointing, forced.batched_rollouts, forced.shared_prefix) == (True, False, False)
    assert forced.activation_checkpointing is True  # transformers' new name, which its Trainer reads
    monkeypatch.setattr(config_mod, "detect_hardware", lambda: Hardware(cuda=False, native_bf16=True))
    assert parse_config(["--bf16", "auto"]).bf16 is True and parse_config(["--bf16", "false"]).bf16 is False


def test_bf16_is_autocast_over_float32_weights_on_a_cpu_and_bf16_weights_on_a_gpu(monkeypatch, caplog):
    from training import config as config_mod

    monkeypatch.setattr(config_mod, "detect_hardware", lambda: Hardware(cuda=False, native_bf16=True))
    cpu = parse_config([])  # a CPU with AVX-512 BF16 / AMX
    assert cpu.bf16 and cpu.model_init_kwargs == {"dtype": "float32"}
    off = parse_config(["--bf16", "false"])
    assert not off.bf16
    monkeypatch.setattr(config_mod, "detect_hardware", lambda: Hardware(cuda=False, native_bf16=False))
    plain_cpu = parse_config([])
    assert not plain_cpu.bf16 and plain_cpu.model_init_kwargs == {"dtype": "float32"}
    with caplog.at_level(logging.WARNING, logger="training.config"):
        forced = parse_config(["--bf16", "true"])
    assert forced.bf16 and forced.model_init_kwargs == {"dtype": "float32"}
    assert "emulated and slower than float32" in caplog.text
    gpu = OrchestraGRPOConfig.__new__(OrchestraGRPOConfig)  # no GPU here: resolve only, TRL's checks need one
    gpu.bf16, gpu.fp16, gpu.use_cpu, gpu.gradient_checkpointing, gpu.activation_checkpointing = None, False, False, \
        None, None
    gpu.batched_rollouts = gpu.shared_prefix = None
    gpu._resolve_auto(Hardware(cuda=True, native_bf16=True))
    assert gpu.bf16 and gpu.activation_checkpointing and not gpu.batched_rollouts and not gpu.shared_prefix
    assert not gpu.use_cpu


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_recipes_parse(recipe):
    cfg = parse_config(["--config", str(RECIPES / recipe)])
    assert isinstance(cfg, OrchestraGRPOConfig) and cfg.max_steps >= 1
    if recipe == "paper_qwen7b.yaml":
        assert cfg.model == "Qwen/Qwen2.5-7B-Instruct" and cfg.subagent.startswith("vllm:openai/gpt-oss-120b@")
        assert cfg.num_generations == 32 and cfg.beta == 0.001 and cfg.epsilon == 0.2 and cfg.temperature == 1.0
        assert cfg.max_prompt_length == 15360 and cfg.max_completion_length == 8192 and cfg.learning_rate == 1e-5
        assert cfg.resume_from is True and cfg.vllm_max_model_length == 15360 + 8192
        processes = 8
        completions = processes * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
        assert completions == 64 * 32  # 64 prompts x 32 rollouts per optimizer step
    if recipe == "cpu_learning.yaml":  # the learning demo: real model, grammar, a calculator sub-agent, LoRA
        assert cfg.model == "embedded" and cfg.constrained and cfg.dom == "low" and cfg.merge
        assert cfg.subagent == "python:mas_orchestra.bench.masbench:MasbenchCalculator"
        assert cfg.agent_kinds == ["cot", "sc", "debate"] and cfg.dataset.endswith("split=train")
        assert cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps % cfg.num_generations == 0
        assert cfg.gradient_checkpointing is True and cfg.resume_from is False
    if recipe == "single_gpu_qwen1_5b.yaml":
        assert cfg.use_vllm and cfg.vllm_mode == "colocate" and cfg.model == "Qwen/Qwen2.5-1.5B-Instruct"


def test_grpo_config_mapping(monkeypatch):
    from training import config as config_mod

    monkeypatch.setattr(config_mod, "detect_hardware", lambda: Hardware(cuda=False, native_bf16=False))
    args = parse_config(["--max-completion-length", "64", "--beta", "0.002", "--use-vllm",
                         "--max-prompt-length", "1000", "--report-to", "tensorboard"])
    assert (args.max_completion_length, args.beta, args.epsilon, args.num_generations) == (64, 0.002, 0.2, 4)
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_max_model_length == 1064
    assert args.use_cpu and not args.bf16 and not args.gradient_checkpointing
    assert args.remove_unused_columns is False and args.report_to == ["tensorboard"]
    assert args.model_init_kwargs == {"dtype": "float32"}
    assert args.generation_kwargs is None  # no constraint given
    assert parse_config(["--vllm-max-model-length", "4096", "--use-vllm"]).vllm_max_model_length == 4096


def test_training_arguments_from_a_recipe_reach_the_trainer(tmp_path, tiny):
    """Any TrainingArguments option is a recipe key: the schedule, warmup, weight decay and clipping the
    trainer builds its optimizer from."""
    from training.trainer import OrchestraGRPOTrainer

    path, tokenizer, _ = tiny
    recipe = tmp_path / "schedule.yaml"
    recipe.write_text("warmup_steps: 0.5\nweight_decay: 0.05\nlr_scheduler_type: constant_with_warmup\n"
                      "max_grad_norm: 0.3\nmax_steps: 4\nlearning_rate: 1.0e-4\nnum_generations: 2\n"
                      f"per_device_train_batch_size: 2\ngradient_accumulation_steps: 1\noutput_dir: {tmp_path}\n")
    cfg = parse_config(["--config", str(recipe), "--weight-decay", "0.07"])
    assert (cfg.warmup_steps, cfg.weight_decay, cfg.lr_scheduler_type.value, cfg.max_grad_norm) == (
        0.5, 0.07, "constant_with_warmup", 0.3)
    from datasets import Dataset

    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "2+2?"}], "answer": ["4"]}] * 2)
    trainer = OrchestraGRPOTrainer(model=str(path), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                                   args=cfg, train_dataset=data, processing_class=tokenizer)
    assert trainer.args is cfg and trainer.args.max_grad_norm == 0.3
    trainer.create_optimizer_and_scheduler(num_training_steps=cfg.max_steps)
    assert {g["weight_decay"] for g in trainer.optimizer.param_groups} >= {0.07}
    lrs = []
    for _ in range(4):
        lrs.append(trainer.lr_scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert lrs == pytest.approx([0.0, 5e-5, 1e-4, 1e-4])  # warmup over half of 4 steps, then constant


def test_vllm_rollouts_get_the_one_piece_grammar():
    from mas_orchestra.spec.grammar import GrammarLimits, orchestration_grammar
    from training.grpo import _orchestration_constraint
    from training.rewards import orchestra_registry
    from training.trainer import structured_generation_kwargs

    cfg = parse_config(["--use-vllm", "--dom", "high", "--max-agents", "3"])
    registry = orchestra_registry()
    kwargs = structured_generation_kwargs({"top_k": 5}, _orchestration_constraint(cfg, registry))
    assert kwargs["structured_outputs"]["grammar"] == orchestration_grammar("high", registry,
                                                                            GrammarLimits(max_agents=3))
    assert kwargs["top_k"] == 5  # the recipe's own generation_kwargs are kept


@needs_train
def test_use_vllm_without_vllm_says_how_to_install(monkeypatch):
    from training import grpo

    real = importlib.util.find_spec
    monkeypatch.setattr(grpo.importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(SystemExit, match=r"pip install 'mas-orchestra\[vllm\]'"):
        grpo.main(["--use-vllm"])


# -- a real GRPO run ------------------------------------------------------------------------------------------

def _tiny_model(folder: Path) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer: the whole pipeline in seconds."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from mas_orchestra.local.embedded import embedded_model_dir

    src = embedded_model_dir()
    config = AutoConfig.from_pretrained(src)
    config.update({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32})
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    return folder


def _check_run(out: Path, summary: dict, steps: int) -> None:
    for name in ("adapter_config.json", "adapter_model.safetensors", "trainer_state.json", "orchestra_config.yaml",
                 "run_summary.json"):
        assert (out / name).is_file(), name
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logged = [e for e in history if "valid_spec_rate" in e]
    assert len(logged) == steps
    for entry in logged:
        assert "reward" in entry and "kl" in entry and "status/invalid_spec" in entry and "agents_per_spec" in entry
        assert 0.0 <= entry["valid_spec_rate"] <= 1.0
    assert json.loads((out / "adapter_config.json").read_text())["target_modules"]
    assert len(summary["steps"]) == steps and summary["step_times"] and summary["peak_rss_mb"] > 0


@needs_train
def test_grpo_main_end_to_end_tiny_model(tmp_path, capsys):
    model = _tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    from training.grpo import main

    summary = main([
        "--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2",
        "--max-steps", "2", "--num-generations", "2", "--per-device-train-batch-size", "2",
        "--gradient-accumulation-steps", "1", "--max-completion-length", "16", "--output-dir", str(out),
        "--save-steps", "1", "--merge",
    ])
    _check_run(out, summary, 2)
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()
    assert (out / "merged" / "config.json").is_file() and (out / "merged" / "model.safetensors").is_file()
    printed = capsys.readouterr().out
    assert "trainer state:" in printed and "merged model:" in printed
    assert "reward curve:" in printed and "first 1 step(s) vs last 1" in printed
    assert summary["first_vs_last_20pct"]["window"] == 1 and summary["reward_curve"].endswith("reward_curve.png")
    first_steps = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"]
                   if "valid_spec_rate" in e]
    # resume from the last checkpoint: nothing left to do at max_steps=2, one more step at 3
    summary = main([
        "--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2",
        "--max-steps", "3", "--num-generations", "2", "--per-device-train-batch-size", "2",
        "--gradient-accumulation-steps", "1", "--max-completion-length", "16", "--output-dir", str(out),
        "--resume",
    ])
    assert summary["resumed_from"].endswith("checkpoint-2")
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    # the resumed run continues the same curve: steps 1-2 as the first run logged them, then step 3
    resumed = [e for e in state["log_history"] if "valid_spec_rate" in e]
    assert [e["step"] for e in resumed] == [1, 2, 3]
    assert resumed[:2] == first_steps
    assert [s["step"] for s in summary["steps"]] == [1, 2, 3]
    assert (out / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in rollouts}) == [1, 2, 3]
    assert all(r["status"] and "completion" in r and r["question"] for r in rollouts)
    assert len([r for r in rollouts if r["step"] == 3]) == 2  # one prompt x 2 generations


@needs_train
def test_cpu_bf16_trains_under_autocast_and_keeps_float32_lora_weights(tmp_path, monkeypatch):
    """``--bf16 true`` on a CPU: the policy forward runs under bf16 autocast, the adapter stays float32."""
    import torch
    from safetensors.torch import load_file

    from training import shared_prefix
    from training.grpo import main

    seen: list[tuple[bool, object]] = []
    packed_forward = shared_prefix.shared_prefix_logps

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return packed_forward(*args, **kwargs)

    monkeypatch.setattr(shared_prefix, "shared_prefix_logps", recording)
    model = _tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    summary = main(["--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2",
                    "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "2",
                    "--gradient-accumulation-steps", "1", "--max-completion-length", "16", "--bf16", "true",
                    "--shared-prefix", "true", "--output-dir", str(out)])
    _check_run(out, summary, 1)
    assert summary["precision"] == {"weights": "float32", "autocast": "bfloat16"}
    assert seen and all(enabled and dtype == torch.bfloat16 for enabled, dtype in seen)
    assert {tensor.dtype for tensor in load_file(str(out / "adapter_model.safetensors")).values()} == {torch.float32}
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert math.isfinite(next(e for e in history if "loss" in e)["loss"])


@needs_train
@pytest.mark.slow
def test_grpo_main_embedded_model(tmp_path):
    """The brief's run: the embedded SmolLM2 itself, one step of two 16-token completions (minutes on 2 CPUs)."""
    from training.grpo import main

    out = tmp_path / "run"
    summary = main(["--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "2",
                    "--gradient-accumulation-steps", "1", "--max-completion-length", "16", "--subagent", "scripted:4",
                    "--dataset", "masbench:depth:2:n=2", "--output-dir", str(out)])
    _check_run(out, summary, 1)


@needs_train
def test_constrained_rollouts_are_all_valid_specs(tmp_path):
    """A random 2-layer orchestrator writes only noise; under the grammar every rollout is a valid spec
    (high DoM, staged decoding fitted to the 96-token completion budget), and the logs say so."""
    model = _tiny_model(tmp_path / "tiny")
    from training.grpo import main

    common = ["--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2", "--dom", "high",
              "--max-steps", "1", "--num-generations", "4", "--per-device-train-batch-size", "4",
              "--gradient-accumulation-steps", "1", "--max-completion-length", "96"]
    summary = main([*common, "--output-dir", str(tmp_path / "on")])
    assert summary["steps"][0]["valid_spec_rate"] == 1.0
    history = json.loads((tmp_path / "on" / "trainer_state.json").read_text())["log_history"]
    entry = next(e for e in history if "valid_spec_rate" in e)
    assert entry["constrained/rollouts"] == 4 and entry["constrained/stage_switches"] >= 4
    assert entry["completions/clipped_ratio"] == 0.0  # each rollout ended with the end-of-text token in budget
    config = (tmp_path / "on" / "orchestra_config.yaml").read_text()
    assert "constrained: true" in config
    summary = main([*common, "--no-constrained", "--output-dir", str(tmp_path / "off")])
    assert summary["steps"][0]["valid_spec_rate"] == 0.0


@needs_train
def test_forced_tokens_can_be_left_out_of_the_loss(tmp_path):
    """forced_token_loss: false — the step's loss covers only the tokens the policy chose: the log says what
    share of the completion tokens the grammar forced (most of an orchestration's markup)."""
    model = _tiny_model(tmp_path / "tiny")
    from training.grpo import main

    main(["--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2", "--dom", "high",
          "--max-steps", "1", "--num-generations", "4", "--per-device-train-batch-size", "4",
          "--gradient-accumulation-steps", "1", "--max-completion-length", "96", "--forced-token-loss", "false",
          "--output-dir", str(tmp_path / "run")])
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    entry = next(e for e in history if "completions/forced_share" in e)
    assert 0.2 < entry["completions/forced_share"] < 1.0


@needs_train
def test_a_micro_batch_of_zero_advantages_skips_the_model_and_steps_on_zero_gradients():
    import types
    from collections import defaultdict

    import torch

    from training.hooks import _install_zero_advantage_skip, zero_advantage_skippable

    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    ran = []
    trainer = types.SimpleNamespace(
        model=model, beta=0.0, _entropy_bonus_enabled=False, aux_loss_enabled=False,
        accelerator=types.SimpleNamespace(num_processes=1), _metrics={"train": defaultdict(list)},
        compute_loss=lambda m, inputs, **kw: ran.append(inputs) or m.weight.sum())
    _install_zero_advantage_skip(trainer)
    loss = trainer.compute_loss(model, {"advantages": torch.zeros(4)}, num_items_in_batch=3)
    loss.backward()
    assert not ran and float(loss) == 0.0
    # a zero gradient, not none: Adam then decays its moments and steps as after the real backward
    assert model.weight.grad is not None and not bool(model.weight.grad.any()) and model.bias.grad is None
    trainer.compute_loss(model, {"advantages": torch.tensor([0.0, 1.0])})
    assert len(ran) == 1 and trainer._metrics["train"]["zero_advantage_skipped"] == [1.0, 0.0]
    zero = {"advantages": torch.zeros(2)}
    for change in ({"beta": 0.1}, {"_entropy_bonus_enabled": True}, {"aux_loss_enabled": True},
                   {"accelerator": types.SimpleNamespace(num_processes=2)}):
        assert not zero_advantage_skippable(types.SimpleNamespace(**{**vars(trainer), **change}), zero), change
    assert zero_advantage_skippable(trainer, zero)


@needs_train
def test_skipping_zero_advantage_steps_trains_the_same_adapter(tmp_path):
    """Every rollout of this run scores 0 (the scripted sub-agent's 4 is wrong; beta 0): with the skip the model never
    runs a training forward, and the adapter ends exactly where the full forward and backward leave it."""
    import torch
    from safetensors.torch import load_file

    model = _tiny_model(tmp_path / "tiny")
    from training.grpo import main

    common = ["--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2", "--dom", "high",
              "--max-steps", "2", "--num-generations", "2", "--per-device-train-batch-size", "2",
              "--gradient-accumulation-steps", "1", "--max-completion-length", "64", "--learning-rate", "1e-2",
              "--execution-success-weight", "0", "--partial-credit-weight", "0", "--beta", "0"]
    for arm in ("true", "false"):
        main([*common, "--skip-zero-advantage", arm, "--output-dir", str(tmp_path / arm)])
    skipped = [e.get("zero_advantage_skipped") for e in json.loads(
        (tmp_path / "true" / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    ran = [e.get("zero_advantage_skipped") for e in json.loads(
        (tmp_path / "false" / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    assert skipped == [1.0, 1.0] and ran == [None, None]
    on, off = (load_file(str(tmp_path / arm / "adapter_model.safetensors")) for arm in ("true", "false"))
    assert on.keys() == off.keys() and all(torch.equal(on[k], off[k]) for k in on)


def test_forced_token_loss_needs_the_batched_decoder_under_the_grammar():
    for bad in ({"constrained": False}, {"batched_rollouts": False}):
        with pytest.raises(TrainingConfigError, match=r"forced_token_loss=false: .*constrained: true with batched"):
            OrchestraGRPOConfig(forced_token_loss=False, **bad)
    assert not parse_config(["--forced-token-loss", "false"]).forced_token_loss
    assert OrchestraGRPOConfig().forced_token_loss


def test_config_agents_lists_offered_kinds_and_rejects_unknown():
    from training.config import OrchestraGRPOConfig

    assert OrchestraGRPOConfig(agents="cot, reflexion").agent_kinds == ["cot", "reflexion"]
    assert OrchestraGRPOConfig().agent_kinds is None
    with pytest.raises(ValueError, match=r"agents: unknown kind.*nope"):
        OrchestraGRPOConfig(agents="cot,nope")
