"""The accelerate config files of the GPU recipes, checked offline with accelerate's own parser, and the
launch / resume checks of :mod:`training.distributed` (no process is launched here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.config import parse_config
from training.distributed import (
    LaunchError,
    WorldSizeMismatchError,
    check_launch,
    check_resume_world_size,
    checkpoint_world_size,
)

pytest.importorskip("accelerate")

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "recipes" / "accelerate"


def cluster(name: str):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    path = CONFIGS / name
    config = load_config_from_file(str(path))  # what `accelerate launch --config_file` reads
    assert isinstance(config, ClusterConfig)
    assert config == ClusterConfig.from_yaml_file(str(path))
    return config


def test_every_config_file_is_tested():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == ["fsdp2.yaml", "zero2.yaml", "zero3.yaml"]


@pytest.mark.parametrize(("name", "stage"), [("zero2.yaml", 2), ("zero3.yaml", 3)])
def test_deepspeed_configs(name, stage):
    from accelerate.utils import DistributedType

    config = cluster(name)
    assert config.distributed_type == DistributedType.DEEPSPEED
    assert config.deepspeed_config["zero_stage"] == stage
    assert config.deepspeed_config["zero3_init_flag"] is (stage == 3)
    assert config.deepspeed_config["offload_optimizer_device"] == "none"
    assert (config.num_processes, config.num_machines, config.mixed_precision) == (8, 1, "bf16")
    assert config.use_cpu is False
    # batch sizes are the recipe's: TRL passes them to DeepSpeed, the file must not pin others
    assert "gradient_accumulation_steps" not in config.deepspeed_config


def test_fsdp2_config():
    from accelerate.utils import DistributedType

    config = cluster("fsdp2.yaml")
    assert config.distributed_type == DistributedType.FSDP
    fsdp = config.fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_reshard_after_forward"] is True and fsdp["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    assert (config.num_processes, config.mixed_precision) == (8, "bf16")


def test_cpu_ddp_recipe_batch_is_two_prompts_of_four():
    recipe = parse_config(["--config", str(REPO / "recipes" / "cpu_ddp.yaml")])
    completions = 2 * recipe.per_device_train_batch_size * recipe.gradient_accumulation_steps
    assert recipe.num_generations and completions % recipe.num_generations == 0 and completions == 8


def test_gpu_recipes_batch_arithmetic_holds_for_every_8_process_config():
    recipe = parse_config(["--config", str(REPO / "recipes" / "paper_qwen7b.yaml")])
    for name in ("zero2.yaml", "zero3.yaml", "fsdp2.yaml"):
        processes = cluster(name).num_processes
        completions = processes * recipe.per_device_train_batch_size * recipe.gradient_accumulation_steps
        assert completions == 64 * (recipe.num_generations or 0)  # 64 prompts x 32 rollouts, the paper's batch


def test_a_config_with_an_unknown_key_is_refused_by_the_parser(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "zero2.yaml").read_text() + "zero_stgae: 3\n")
    with pytest.raises(ValueError, match="zero_stgae"):
        load_config_from_file(str(bad))


def test_checkpoint_world_size_from_its_rng_states(tmp_path):
    two = tmp_path / "checkpoint-2"
    two.mkdir()
    for rank in (0, 1):
        (two / f"rng_state_{rank}.pth").write_bytes(b"")
    one = tmp_path / "checkpoint-1"
    one.mkdir()
    (one / "rng_state.pth").write_bytes(b"")
    assert checkpoint_world_size(two) == 2 and checkpoint_world_size(one) == 1
    assert checkpoint_world_size(tmp_path) is None
    check_resume_world_size(two, 2)
    with pytest.raises(WorldSizeMismatchError, match=r"written by 2 process\(es\) but this run has 1") as caught:
        check_resume_world_size(two, 1)
    assert (caught.value.written_by, caught.value.resuming_with) == (2, 1)
    with pytest.raises(WorldSizeMismatchError, match="--num_processes 1"):
        check_resume_world_size(one, 4)


def test_accelerate_cpu_launcher_starting_one_process_is_refused():
    check_launch({})  # plain python -m training.grpo
    check_launch({"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "2", "ACCELERATE_USE_CPU": "True"})  # torchrun
    with pytest.raises(LaunchError, match="--multi_gpu --num_processes N"):
        check_launch({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "ACCELERATE_USE_CPU": "True"})
