"""Every private API of TRL, transformers, torch and glibc we override or call still exists, with the parameters we
use: an upgrade past the tested versions (the upper bounds in pyproject.toml) fails here, not silently in a run.

Where each is used: ``training/hooks.py`` (the trainer overrides), ``training/profiling.py`` (phase timers),
``training/rollouts.py`` and ``mas_orchestra/local/batching.py`` (the cache internals), ``mas_orchestra/local/
packed_weights.py`` (the int4 kernels), ``training/allocator.py`` (glibc). To lift a bound: install the newer
version, run this file (and the fast suite), fix what fails, then raise the bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import inspect

import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers", "trl")), reason="training extras not installed"
)


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_trl_grpo_trainer_private_methods() -> None:
    from trl import GRPOTrainer

    # overridden per instance by training.hooks (the shared-prefix forward), called back with these arguments
    params = _parameters(GRPOTrainer._get_per_token_logps_and_entropies)
    assert params[:8] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                          "compute_entropy", "compute_aux_loss"]
    returned = inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).return_annotation
    assert "tuple" in str(returned)  # (logps, entropies, aux loss): the override returns three values too
    # wrapped by training.profiling (any signature: the wrapper passes everything through)
    assert callable(GRPOTrainer._generate_single_turn) and callable(GRPOTrainer._calculate_rewards)
    assert _parameters(GRPOTrainer.compute_loss)[:3] == ["self", "model", "inputs"]
    source = inspect.getsource(GRPOTrainer)
    # read by the shared-prefix forward: whether the entropy is a loss term (else a metric, outside autograd)
    assert "self._entropy_bonus_enabled" in source
    # forced_token_loss: false wraps _generate_and_score_completions and hands TRL's loss a tool_mask, recounting
    # the normaliser, and logs through _metrics
    assert _parameters(GRPOTrainer._generate_and_score_completions)[:2] == ["self", "inputs"]
    scoring = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert '"num_items_in_batch": num_items_in_batch' in scoring and 'output["tool_mask"]' in scoring
    # downsample_generations reads the summed rewards from _calculate_rewards' per-function rewards, weighted as
    # TRL weighs them, and recomputes the advantages of consecutive groups of num_generations rows
    assert "rewards_per_func = self._calculate_rewards(" in scoring and "self.reward_weights" in scoring
    assert "rewards.view(-1, num_generations)" in scoring and "split_tensor_dict(" in inspect.getsource(
        GRPOTrainer._prepare_inputs)
    loss = inspect.getsource(GRPOTrainer._compute_loss)
    assert 'completion_mask * inputs["tool_mask"]' in loss and 'inputs["num_items_in_batch"]' in loss
    assert 'self._metrics = {"train": defaultdict(list)' in source
    # the rollouts replace the transformers model's generate, which TRL calls with keyword inputs
    generation = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "unwrapped_model.generate(" in generation and "**generate_inputs" in generation


def test_transformers_cache_internals() -> None:
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    init = _parameters(DynamicCache.__init__)
    assert "ddp_cache_data" in init and "config" in init  # a prefix-cache hit, and the layout check
    keys, values = torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4)
    cache = DynamicCache(ddp_cache_data=[(keys, values)])
    assert type(cache.layers[0]) is DynamicLayer and DynamicSlidingWindowLayer is not DynamicLayer
    assert torch.equal(cache.layers[0].keys, keys) and torch.equal(cache.layers[0].values, values)
    cache.batch_select_indices(torch.tensor([0]))  # rows leaving the batch
    assert cache.get_seq_length() == 3


def test_transformers_model_private_methods() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

    # training.hooks.checkpoint_every_n_layers and keep_attention_outputs wrap it and pass every_n_layers and the
    # checkpoint function (third, positionally)
    params = _parameters(PreTrainedModel._set_gradient_checkpointing)
    assert params[:3] == ["self", "enable", "gradient_checkpointing_func"] and "every_n_layers" in params
    # the batcher passes the cache under whichever name forward takes
    forward = _parameters(LlamaForCausalLM.forward)
    assert ("cache" in forward or "past_key_values" in forward) and "logits_to_keep" in forward
    assert "position_ids" in forward and "attention_mask" in forward
    config = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)
    assert callable(getattr(LlamaForCausalLM(config), "_set_gradient_checkpointing", None))


def test_torch_selective_checkpointing() -> None:
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts  # noqa: F401

    from training.hooks import ATTENTION_OPS

    # training.hooks.keep_attention_outputs: without the CPU kernel the attention would be recomputed again
    assert ATTENTION_OPS[0] == "_scaled_dot_product_flash_attention_for_cpu"
    assert hasattr(torch.ops.aten, ATTENTION_OPS[0])
    assert {"MUST_SAVE", "PREFER_RECOMPUTE"} <= set(CheckpointPolicy.__members__)


def test_torch_int4_kernels() -> None:
    import torch

    # mas_orchestra.local.packed_weights: the packed decode weights (falls back to float32 when they are missing,
    # but then the embedded model's decode runs at float32 speed)
    assert hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")
    assert hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


@pytest.mark.skipif(not ctypes.util.find_library("c"), reason="no C library found")
def test_glibc_allocator_functions() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "gnu_get_libc_version"):
        pytest.skip("not glibc (training.allocator is a no-op there)")
    assert hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")
