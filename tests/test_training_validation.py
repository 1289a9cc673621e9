"""Validation during training (``--val-dataset``): Avg@k at step 0, every ``eval_steps`` and after the last step, in
``trainer_state.json``, the run summary, the reward-curve picture and ``mas-orchestra plot-training``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mas_orchestra import OrchestraConfig
from mas_orchestra.bench.training_curve import (
    ValidationPoint,
    format_validation,
    plot_training,
    validation_from_history,
)
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel, cot_reply
from training.config import OrchestraGRPOConfig
from training.rewards import make_outcome_reward

_HAVE_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "trl", "peft", "datasets"))
needs_train = pytest.mark.skipif(not _HAVE_TRAIN, reason="pip install 'mas-orchestra[train]'")

COT = spec_from_data({"nodes": [{"id": "A", "agent": "cot", "input": ""}]}).to_xml()


def test_config_validates_the_validation_fields():
    cfg = OrchestraGRPOConfig()
    assert (cfg.val_dataset, cfg.val_before_train, cfg.eval_steps, cfg.val_samples, cfg.val_temperature) == (
        None, True, 5, 8, 0.5)
    with pytest.raises(ValueError) as info:
        OrchestraGRPOConfig(eval_steps=0, val_samples=0, val_temperature=-0.1, val_limit=0)
    for text in ("eval_steps=0: must be >= 1", "val_samples=0: must be >= 1", "val_temperature must be >= 0",
                 "val_limit must be >= 1"):
        assert text in str(info.value)


@needs_train
def test_runner_scores_k_samples_per_question_and_records_failures():
    """Avg@k over every sample, pass@k over questions; a failing sample is a status and a question whose
    generation raises counts its k samples as crashes: nothing raises."""
    from training.validation import ValidationRunner

    class Scripted(ValidationRunner):
        def _generate(self, model, prompt):
            question = prompt[-1]["content"]
            if "boom" in question:
                raise RuntimeError("CUDA out of memory (scripted)")
            if "half" in question:
                return [COT, "no orchestration here"]
            return [COT, COT]

    class Model:
        training = True

        def eval(self):
            self.training = False

        def train(self):
            self.training = True

    rows = [{"prompt": [{"role": "user", "content": q}], "question": q, "answer": [a]}
            for q, a in (("all right", "4"), ("half", "4"), ("boom", "4"), ("wrong", "5"))]
    reward = make_outcome_reward(subagent=ScriptedChatModel(replies=[cot_reply("4")]),
                                 config=OrchestraConfig(dom="high"))
    runner = Scripted(rows, reward, tokenizer=None, samples=2, temperature=0.5, max_new_tokens=16)
    model = Model()
    metrics = runner.run(model)
    assert model.training  # left in the mode it was in
    assert metrics["val/questions"] == 4 and metrics["val/samples"] == 8 and metrics["val/k"] == 2
    assert metrics["val/avg_at_k"] == pytest.approx(3 / 8)  # 2 + 1 + 0 + 0 correct of 8
    assert metrics["val/pass_at_k"] == pytest.approx(2 / 4)
    assert metrics["val/valid_rate"] == pytest.approx(5 / 8)
    assert metrics["val/status/invalid_spec"] == pytest.approx(1 / 8)
    assert metrics["val/status/crash"] == pytest.approx(2 / 8) and metrics["val/generation_failures"] == 1
    assert metrics["val/subagent_calls"] == pytest.approx(1.0)  # one CoT call per valid spec
    assert reward.pop_records() == []  # the runner took its records: nothing leaks into training metrics


def test_validation_points_table_and_picture(tmp_path):
    history = [
        {"val/avg_at_k": 0.25, "val/pass_at_k": 0.5, "val/valid_rate": 1.0, "val/k": 8.0, "val/questions": 4.0,
         "val/samples": 32.0, "val/subagent_calls": 1.0, "step": 0},
        {"loss": 0.1, "reward": 0.5, "valid_spec_rate": 1.0, "step": 1},
        {"loss": 0.1, "reward": 0.75, "valid_spec_rate": 1.0, "step": 2},
        {"val/avg_at_k": 0.5, "val/pass_at_k": 0.75, "val/valid_rate": 1.0, "val/k": 8.0, "val/questions": 4.0,
         "val/samples": 32.0, "val/subagent_calls": 1.5, "step": 2},
    ]
    points = validation_from_history(history)
    assert points == [ValidationPoint(0, 0.25, 0.5, 1.0, 8, 4, 32, 1.0), ValidationPoint(2, 0.5, 0.75, 1.0, 8, 4, 32, 1.5)]
    table = format_validation(points).splitlines()
    assert "Avg@8" in table[0] and "pass@8" in table[0]
    assert table[1].split()[:3] == ["0", "0.250", "0.500"] and table[2].split()[:2] == ["2", "0.500"]
    pytest.importorskip("matplotlib")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    out = plot_training(tmp_path)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- a real run with validation -------------------------------------------------------------------------------

def _tiny_model(folder: Path) -> Path:
    from tests.test_training import _tiny_model as tiny

    return tiny(folder)


@needs_train
def test_grpo_validates_at_step_0_every_eval_steps_and_the_last(tmp_path, capsys):
    from mas_orchestra.cli import main as cli_main
    from training.grpo import main

    model = _tiny_model(tmp_path / "tiny")
    out = tmp_path / "run"
    common = [
        "--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2",
        "--num-generations", "2", "--per-device-train-batch-size", "2", "--gradient-accumulation-steps", "1",
        "--max-completion-length", "16", "--output-dir", str(out), "--save-steps", "3",
        "--val-dataset", "masbench:depth:2,3:n=1:seed=1:split=test", "--val-samples", "3", "--eval-steps", "2",
    ]
    summary = main([*common, "--max-steps", "3"])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    validated = [e for e in history if "val/avg_at_k" in e]
    assert [e["step"] for e in validated] == [0, 2, 3]  # before training, every 2 steps, after the last
    for entry in validated:
        assert entry["val/questions"] == 2 and entry["val/k"] == 3 and entry["val/samples"] == 6
        assert 0.0 <= entry["val/avg_at_k"] <= entry["val/pass_at_k"] <= 1.0
        assert entry["val/valid_rate"] == 1.0  # constrained decoding: every sample a valid spec
        assert sum(entry[f"val/status/{s}"] for s in ("ok", "invalid_spec", "compile_error", "exec_error",
                                                       "timeout", "crash")) == pytest.approx(1.0)
    # training metrics count training rollouts only (2 per step), whatever validation sampled
    trained = [e for e in history if "valid_spec_rate" in e]
    assert [e["constrained/rollouts"] for e in trained] == [2, 4, 6]
    assert [v["step"] for v in summary["validation"]] == [0, 2, 3]
    printed = capsys.readouterr().out
    assert "validation at step 0: Avg@k" in printed
    assert cli_main(["plot-training", str(out), "--no-plot"]) == 0
    table = capsys.readouterr().out
    assert "validation (3 passes):" in table and "Avg@3" in table

    # resumed: step 0 is not validated again; the new last step is
    summary = main([*common, "--max-steps", "4", "--resume"])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "val/avg_at_k" in e] == [0, 2, 3, 4]


@needs_train
def test_unconstrained_validation_failures_are_recorded_outcomes(tmp_path):
    model = _tiny_model(tmp_path / "tiny")
    from training.grpo import main

    summary = main([
        "--model", str(model), "--subagent", "scripted:4", "--dataset", "masbench:depth:2:n=2", "--no-constrained",
        "--num-generations", "2", "--per-device-train-batch-size", "2", "--gradient-accumulation-steps", "1",
        "--max-completion-length", "8", "--output-dir", str(tmp_path / "run"), "--max-steps", "1",
        "--val-dataset", "masbench:depth:2:n=2:split=test", "--val-samples", "2", "--no-val-before-train",
        "--val-temperature", "0",
    ])
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    (entry,) = [e for e in history if "val/avg_at_k" in e]
    assert entry["step"] == 1 and entry["val/samples"] == 4
    assert entry["val/status/invalid_spec"] == 1.0 and entry["val/avg_at_k"] == 0.0  # noise from a random model
    assert summary["validation"][0]["val/valid_rate"] == 0.0
