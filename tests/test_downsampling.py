"""Max-variance down-sampling of each group's rollouts (``downsample_generations``, training/downsampling.py)."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from training.config import OrchestraGRPOConfig, TrainingConfigError, parse_config  # noqa: E402
from training.downsampling import downsample_batch, max_variance_subset, subset_advantages  # noqa: E402


def _population_variance(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


@pytest.mark.parametrize("seed", range(40))
def test_the_subset_has_the_largest_variance_of_all_subsets_of_its_size(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 8)
    # partial-credit-like rewards: few distinct values, many ties
    rewards = [rng.choice([0.0, 1 / 6, 1 / 3, 2 / 3, 1.0]) for _ in range(n)]
    for keep in range(1, n + 1):
        chosen = max_variance_subset(rewards, keep)
        assert len(set(chosen)) == keep and chosen == sorted(chosen)
        best = max(_population_variance([rewards[i] for i in c]) for c in itertools.combinations(range(n), keep))
        assert math.isclose(_population_variance([rewards[i] for i in chosen]), best, abs_tol=1e-12)


def test_the_subset_keeps_the_extremes_and_is_deterministic() -> None:
    # one right plan among wrong ones: it is always kept, with the lowest rewards beside it
    assert max_variance_subset([0.33, 0.17, 1.0, 0.33, 0.17, 0.67, 0.33, 0.17], 4) == [1, 2, 4, 7]
    assert max_variance_subset([0.5] * 8, 4) == [0, 1, 2, 3]  # nothing to choose: the first ones
    assert max_variance_subset([0.0, 1.0, 0.0, 1.0], 2) in ([0, 1], [0, 3], [1, 2], [2, 3])
    assert max_variance_subset([0.0, 1.0, 0.0, 1.0], 2) == max_variance_subset([0.0, 1.0, 0.0, 1.0], 2)


def test_unscorable_rollouts_are_kept_only_to_fill_the_subset() -> None:
    nan = float("nan")
    assert max_variance_subset([nan, 0.0, 1.0, nan, 0.5], 2) == [1, 2]
    assert max_variance_subset([nan, 0.0, nan, nan], 2) == [0, 1]
    with pytest.raises(ValueError, match=r"keep=5 must be in \[1, 4\]"):
        max_variance_subset([0.0, 1.0, 0.0, 1.0], 5)


def test_the_kept_advantages_are_trls_group_advantages_of_the_kept_rewards() -> None:
    from trl.trainer.utils import nanstd

    kept = torch.tensor([[0.0, 1.0, 0.25], [0.5, 0.5, 0.5]])
    advantages = subset_advantages(kept, "group")
    expected = (kept - kept.mean(dim=1, keepdim=True)) / (nanstd(kept, dim=1, keepdim=True) + 1e-4)
    assert torch.allclose(advantages, expected.reshape(-1))
    assert not bool(advantages[3:].any())  # equal rewards: exactly zero, so the zero-advantage skip applies
    assert torch.allclose(subset_advantages(kept, "none"), (kept - kept.mean(dim=1, keepdim=True)).reshape(-1))
    assert torch.allclose(subset_advantages(kept, "batch"),
                          ((kept - kept.mean(dim=1, keepdim=True)) / (nanstd(kept) + 1e-4)).reshape(-1))
    with pytest.raises(ValueError, match="scale_rewards='mean': valid values are group, batch, none"):
        subset_advantages(kept, "mean")


def test_a_generation_batch_is_cut_to_the_kept_rows_and_its_loss_normaliser_recounted() -> None:
    # two groups of 4; completion lengths 5, 2, 3, 1 | 6, 2, 2, 2 (right padded to 6)
    lengths = [5, 2, 3, 1, 6, 2, 2, 2]
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    batch = {
        "prompt_ids": torch.arange(8).view(8, 1).repeat(1, 3), "prompt_mask": torch.ones(8, 3, dtype=torch.long),
        "completion_ids": torch.arange(48).view(8, 6), "completion_mask": mask,
        "tool_mask": torch.ones(8, 6, dtype=torch.long), "advantages": torch.zeros(8),
        "num_items_in_batch": mask.sum(), "num_images": None,
    }
    rewards = torch.tensor([0.0, 1.0, 0.5, 0.0, 0.2, 0.2, 0.2, 0.2])
    cut, kept = downsample_batch(batch, rewards, num_generations=4, keep=2, scale_rewards="group")
    assert kept == [0, 1, 4, 5]  # the 1 and a 0 of group 1; group 2 has nothing to choose
    assert cut["prompt_ids"][:, 0].tolist() == kept
    # the columns past the longest kept completion (6) stay; cut another way they go
    assert cut["completion_ids"].shape == (4, 6) and cut["completion_ids"][:, 0].tolist() == [0, 6, 24, 30]
    assert int(cut["num_items_in_batch"]) == 5 + 2 + 6 + 2 and cut["num_images"] is None
    assert torch.allclose(cut["advantages"], torch.tensor([-0.7070, 0.7070, 0.0, 0.0]), atol=1e-3)
    rewards = torch.tensor([0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0])
    cut, kept = downsample_batch(batch, rewards, num_generations=4, keep=2, scale_rewards="group")
    assert kept == [0, 1, 4, 5] and cut["completion_mask"].shape == (4, 6)
    cut, kept = downsample_batch({**batch, "completion_mask": mask * (torch.arange(6) < 3)}, rewards, 4, 2, "none")
    assert cut["completion_ids"].shape == (4, 3) and cut["tool_mask"].shape == (4, 3)
    with pytest.raises(ValueError, match="not whole groups of num_generations=3"):
        downsample_batch(batch, rewards, num_generations=3, keep=2, scale_rewards="group")


def test_bad_down_sampling_settings_name_the_field_and_what_is_valid() -> None:
    with pytest.raises(TrainingConfigError, match=r"downsample_generations=4: must be in \[2, num_generations=4\)"):
        OrchestraGRPOConfig(num_generations=4, per_device_train_batch_size=4, downsample_generations=4)
    with pytest.raises(TrainingConfigError, match=r"must split evenly into steps_per_generation=2"):
        OrchestraGRPOConfig(num_generations=4, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                            downsample_generations=3)
    with pytest.raises(TrainingConfigError, match="use multi_objective_aggregation: sum_then_normalize"):
        OrchestraGRPOConfig(num_generations=4, per_device_train_batch_size=4, downsample_generations=2,
                            multi_objective_aggregation="normalize_then_sum")
    assert parse_config(["--num-generations", "8", "--per-device-train-batch-size", "8",
                         "--downsample-generations", "4"]).downsample_generations == 4
    assert OrchestraGRPOConfig().downsample_generations is None


def _tiny_model(folder):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from mas_orchestra.local.embedded import embedded_model_dir

    src = embedded_model_dir()
    config = AutoConfig.from_pretrained(src)
    config.update({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32})
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    return folder


def test_a_training_step_runs_its_loss_on_the_kept_rollouts_only(tmp_path) -> None:
    """A real trainer step: 4 rollouts of one prompt are sampled and scored, the loss sees the 2 most varied with
    advantages computed over them, and what is logged (reward, rollouts) still covers all 4."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.trainer import OrchestraGRPOTrainer

    model_dir = _tiny_model(tmp_path / "tiny")
    scores = iter([[0.25, 1.0, 0.5, 0.0]])

    def reward(completions, **kwargs):
        return next(scores)

    cfg = OrchestraGRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, num_generations=4,
                              per_device_train_batch_size=4, gradient_accumulation_steps=1, max_completion_length=8,
                              downsample_generations=2, report_to="none", logging_steps=1, save_strategy="no",
                              beta=0.0, constrained=False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = OrchestraGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=[reward], args=cfg,
        train_dataset=Dataset.from_list([{"prompt": "Compute 2 + 3."}] * 4), processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    seen = []
    compute_loss = trainer.compute_loss

    def recording(model, inputs, *args, **kwargs):
        seen.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording
    trainer.train()
    assert len(seen) == 1 and seen[0]["completion_ids"].size(0) == 2
    # rewards 0.0 and 1.0 kept: advantages +-0.5 / (1/sqrt(2) + 1e-4), in the shuffled order
    assert torch.allclose(seen[0]["advantages"].sort().values, torch.tensor([-0.70701, 0.70701]), atol=1e-4)
    assert int(seen[0]["num_items_in_batch"]) == int(seen[0]["completion_mask"].sum())
    entry = next(e for e in trainer.state.log_history if "reward" in e)
    assert entry["reward"] == pytest.approx(0.4375)  # the whole group's mean
    assert entry["downsampling/kept_reward_std"] == pytest.approx(math.sqrt(0.5), abs=1e-5)
    assert entry["downsampling/group_reward_std"] > 0 and json.dumps(entry)


def test_the_rollout_records_say_which_rollouts_entered_the_loss() -> None:
    """install_downsampling on a trainer-shaped object: the batch is cut, the scored records are marked."""
    import types
    from collections import defaultdict

    from training.downsampling import install_downsampling
    from training.records import RolloutRecord

    records = [RolloutRecord(index=i) for i in range(4)]
    scorer = types.SimpleNamespace(last_batch=None)
    rewards = torch.tensor([[0.5], [1.0], [0.5], [0.0]])
    mask = torch.ones(4, 3, dtype=torch.long)

    def calculate_rewards(*args, **kwargs):
        scorer.last_batch = {"records": records, "n": 4}
        return rewards

    def generate_and_score_completions(inputs):
        trainer._calculate_rewards(inputs)
        return {"prompt_ids": torch.zeros(4, 2, dtype=torch.long), "completion_ids": torch.arange(12).view(4, 3),
                "completion_mask": mask, "advantages": torch.zeros(4), "num_items_in_batch": mask.sum()}

    trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(num_processes=1), num_generations=4, scale_rewards="group",
        reward_weights=torch.ones(1), reward_funcs=[scorer], model=types.SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list)}, _calculate_rewards=calculate_rewards,
        _generate_and_score_completions=generate_and_score_completions)
    install_downsampling(trainer, 2)
    cut = trainer._generate_and_score_completions({})
    assert cut["completion_ids"][:, 0].tolist() == [3, 9]  # rows 1 (reward 1.0) and 3 (0.0)
    assert [r.trained for r in records] == [False, True, False, True]
    assert trainer._metrics["train"]["downsampling/kept_reward_std"] == [pytest.approx(math.sqrt(0.5))]
    with pytest.raises(ValueError, match=r"downsample_generations=4 must be in \[2, num_generations=4\)"):
        install_downsampling(trainer, 4)
    trainer.accelerator.num_processes = 2
    with pytest.raises(ValueError, match="needs one process"):
        install_downsampling(trainer, 2)
