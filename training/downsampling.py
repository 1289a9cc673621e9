"""Training on a max-variance subset of each group's rollouts (``downsample_generations``).

Sampling a group is cheap next to training on it: a wiring step decodes 8 plans in one batch, then runs the
forward, its recomputation and the backward over all 8 (prompt and completions). Most of a group's signal sits
in its extremes — the right plan against the wrong ones — so after the rewards are known only ``m`` of the
``num_generations`` rollouts of each group are kept for the update: the subset whose rewards have the largest
variance (max-variance down-sampling, from "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM
Reinforcement Learning", Xu et al. 2025). Such a subset is always the ``k`` highest and ``m - k`` lowest rewards
for some ``k`` (sorting once and trying the ``m + 1`` splits finds it), and the advantages are computed over the
kept rollouts, as TRL computes them over a whole group (``scale_rewards`` group, batch or none).

What is logged and kept stays the whole group's: ``reward``, the structure metrics and ``rollouts.jsonl`` see all
``num_generations`` rollouts (each line of the latter saying ``trained``: whether it entered the loss); only the
loss sees the subset. :func:`install_downsampling` wraps TRL's private
``_calculate_rewards`` (to read the summed rewards) and ``_generate_and_score_completions`` (to cut the batch);
``tests/test_private_apis.py`` checks both against the installed TRL.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any

__all__ = ["COMPLETION_KEYS", "downsample_batch", "install_downsampling", "max_variance_subset",
           "subset_advantages"]

#: The generation batch's ``[rows, completion tokens]`` entries: cut to the kept rows' longest completion.
COMPLETION_KEYS = ("completion_ids", "completion_mask", "tool_mask", "old_per_token_logps", "ref_per_token_logps",
                   "sampling_per_token_logps", "importance_sampling_ratio")


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def max_variance_subset(rewards: Sequence[float], keep: int) -> list[int]:
    """The indices of the ``keep`` rewards whose variance is largest, in ascending index order.

    Unscorable rollouts (NaN) are taken only when fewer than ``keep`` rewards are numbers. Among subsets of equal
    variance the one with fewer high rewards is chosen, and among equal rewards the low end takes the earliest
    rollouts and the high end the latest; the choice is therefore deterministic.

    Args:
        rewards: One group's rewards (NaN: unscorable).
        keep: How many to keep, ``1 <= keep <= len(rewards)``.

    Returns:
        ``keep`` distinct indices into ``rewards``.

    Raises:
        ValueError: ``keep`` is out of range.
    """
    if not 1 <= keep <= len(rewards):
        raise ValueError(f"keep={keep} must be in [1, {len(rewards)}] (the group's size)")
    scored = sorted((i for i, r in enumerate(rewards) if not math.isnan(r)), key=lambda i: (rewards[i], i))
    unscored = [i for i, r in enumerate(rewards) if math.isnan(r)]
    if len(scored) <= keep:
        return sorted(scored + unscored[:keep - len(scored)])
    best: list[int] = []
    best_variance = -1.0
    for high in range(keep + 1):
        chosen = scored[:keep - high] + scored[len(scored) - high:]
        variance = _variance([rewards[i] for i in chosen])
        if variance > best_variance:
            best, best_variance = chosen, variance
    return sorted(best)


def subset_advantages(rewards: Any, scale_rewards: str) -> Any:
    """GRPO advantages of the kept rollouts, computed over them as TRL computes them over whole groups.

    Args:
        rewards: ``[groups, kept]`` float tensor of the kept rollouts' summed rewards (NaN: unscorable).
        scale_rewards: TRL's ``scale_rewards``: ``group`` (divide by each group's standard deviation),
            ``batch`` (by the whole batch's) or ``none``.

    Returns:
        The flat ``[groups * kept]`` advantages; unscorable rollouts get 0.

    Raises:
        ValueError: An unknown ``scale_rewards``.
    """
    import torch
    from trl.trainer.utils import nanstd

    centred = rewards - torch.nanmean(rewards, dim=1, keepdim=True)
    if scale_rewards == "group":
        centred = centred / (nanstd(rewards, dim=1, keepdim=True) + 1e-4)
    elif scale_rewards == "batch":
        centred = centred / (nanstd(rewards) + 1e-4)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards={scale_rewards!r}: valid values are group, batch, none")
    return torch.nan_to_num(centred.reshape(-1), nan=0.0)


def downsample_batch(batch: dict[str, Any], rewards: Any, num_generations: int, keep: int,
                     scale_rewards: str) -> tuple[dict[str, Any], list[int]]:
    """Cut one generation batch to the max-variance ``keep`` rollouts of each group.

    Args:
        batch: What TRL's ``_generate_and_score_completions`` returned for one process: groups of
            ``num_generations`` consecutive rows.
        rewards: The rows' summed rewards (a ``[rows]`` tensor, NaN where unscorable).
        num_generations: The group size.
        keep: Rollouts kept per group.
        scale_rewards: TRL's ``scale_rewards`` (how the kept advantages are scaled).

    Returns:
        The cut batch (its advantages recomputed over the kept rows, ``num_items_in_batch`` recounted, the
        completion columns trimmed to the longest kept completion) and the kept row indices.

    Raises:
        ValueError: The batch's rows are not whole groups, or the rewards do not match the rows.
    """
    import torch

    rows = int(batch["completion_ids"].size(0))
    if rows % num_generations or int(rewards.numel()) != rows:
        raise ValueError(f"a generation batch of {rows} rows with {int(rewards.numel())} rewards is not whole "
                         f"groups of num_generations={num_generations}")
    grouped = rewards.detach().float().cpu().view(-1, num_generations)
    kept: list[int] = []
    for g, group in enumerate(grouped.tolist()):
        kept.extend(g * num_generations + i for i in max_variance_subset(group, keep))
    index = torch.tensor(kept, dtype=torch.long, device=batch["completion_ids"].device)
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.size(0) == rows:
            out[name] = value.index_select(0, index.to(value.device))
        elif isinstance(value, list) and len(value) == rows:
            out[name] = [value[i] for i in kept]
        else:
            out[name] = value
    kept_rewards = grouped.reshape(-1)[torch.tensor(kept)].view(-1, keep)
    advantages = subset_advantages(kept_rewards, scale_rewards)
    out["advantages"] = advantages.to(dtype=batch["advantages"].dtype, device=batch["advantages"].device)
    loss_mask = out["completion_mask"] if out.get("tool_mask") is None else out["completion_mask"] * out["tool_mask"]
    used_columns = out["completion_mask"].any(dim=0).nonzero()
    width = int(used_columns.max()) + 1 if used_columns.numel() else 1
    for name in COMPLETION_KEYS:
        value = out.get(name)
        if isinstance(value, torch.Tensor) and value.ndim == 2 and value.size(1) > width:
            out[name] = value[:, :width]
    if "num_items_in_batch" in batch:
        count = loss_mask.sum()
        previous = batch["num_items_in_batch"]
        out["num_items_in_batch"] = count.to(previous.dtype) if isinstance(previous, torch.Tensor) else int(count)
    return out, kept


def _mark_trained(reward_funcs: Sequence[Any], rows: int, kept: set[int]) -> None:
    """Set ``trained`` on the rollout records of the batch just scored (an outcome reward's ``last_batch``), so
    ``rollouts.jsonl`` says which rollouts entered the loss."""
    for func in reward_funcs:
        scored = getattr(func, "last_batch", None)
        if isinstance(scored, dict) and scored.get("n") == rows:
            for row, record in enumerate(scored["records"]):
                record.trained = row in kept


def install_downsampling(trainer: Any, keep: int) -> None:
    """Make ``trainer`` train on the max-variance ``keep`` rollouts of each group (the module docstring).

    Each step logs ``downsampling/kept_reward_std`` and ``downsampling/group_reward_std``: the mean over the step's
    groups of the kept rollouts' and of the whole group's reward spread.

    Args:
        trainer: An ``OrchestraGRPOTrainer`` before ``train()``; one process.
        keep: Rollouts kept per group, ``2 <= keep < num_generations``.

    Raises:
        ValueError: Several processes (a group's rollouts may sit on different ranks) or ``keep`` out of range.
    """
    import torch
    from trl.trainer.utils import nanstd

    if trainer.accelerator.num_processes != 1:
        raise ValueError(f"downsample_generations needs one process (this run has "
                         f"{trainer.accelerator.num_processes}: a group's rollouts may sit on several ranks)")
    if not 2 <= keep < trainer.num_generations:
        raise ValueError(f"downsample_generations={keep} must be in [2, num_generations={trainer.num_generations})")
    calculate, generate_and_score = trainer._calculate_rewards, trainer._generate_and_score_completions
    summed: dict[str, Any] = {}

    def calculate_rewards(self: Any, *args: Any, **kwargs: Any) -> Any:
        per_func = calculate(*args, **kwargs)
        weighted = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(per_func).all(dim=1)] = torch.nan
        summed["rewards"] = weighted
        return per_func

    def generate_and_score_completions(self: Any, inputs: Any) -> Any:
        summed.pop("rewards", None)
        batch = generate_and_score(inputs)
        rewards = summed.pop("rewards", None)
        if not self.model.training or rewards is None:
            return batch
        cut, kept = downsample_batch(batch, rewards, self.num_generations, keep, str(self.scale_rewards))
        _mark_trained(self.reward_funcs, len(rewards), set(kept))
        kept_rewards = rewards.detach().float().cpu()[torch.tensor(kept)].view(-1, keep)
        metrics = self._metrics["train"]
        metrics["downsampling/kept_reward_std"].append(float(nanstd(kept_rewards, dim=1).nanmean()))
        metrics["downsampling/group_reward_std"].append(
            float(nanstd(rewards.detach().float().cpu().view(-1, self.num_generations), dim=1).nanmean()))
        return cut

    trainer._calculate_rewards = types.MethodType(calculate_rewards, trainer)
    trainer._generate_and_score_completions = types.MethodType(generate_and_score_completions, trainer)
