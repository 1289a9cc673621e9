"""Reward shaping beyond right or wrong: partial credit for intermediate results, and cost ranked within a group.

- :func:`stated_share`: how many of a task's intermediate facts a final agent's text states (MASBench rows carry
  them as ``intermediates``): the partial credit of a wrong answer (``partial_credit_weight``).
- :func:`group_cost_rewards`: cost normalised among the correct rollouts of one prompt, so only a cheaper way to
  the same right answer is preferred (``cost_reward="group"``, the form ToolOrchestra trains with).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from mas_orchestra.runtime import Status
from training.records import RolloutRecord

__all__ = ["CostWeights", "group_cost_rewards", "stated_share"]


class CostWeights(Protocol):
    """The reward settings :func:`group_cost_rewards` reads (an :class:`~training.rewards.OutcomeReward`)."""

    cost_weight: float
    final_answer_weight: float
    execution_success_weight: float

    def cost_of(self, record: RolloutRecord) -> float:
        """The rollout's cost in the reward's cost metric.

        Args:
            record: The rollout.
        """
        ...


def stated_share(text: str | Sequence[str], facts: Sequence[str]) -> float:
    """Share of ``facts`` (``the <quantity> = <value>``) that ``text`` states: the quantity's name followed,
    within 40 characters that hold no other digit, by the value. This is the partial credit of a MASBench
    rollout: how far up the dependency chain the final agent got (one text), or the system as a whole (several
    texts: a fact counts when any of them states it).

    Args:
        text: the final agent's output (reasoning and answer), or every agent's.
        facts: the intermediate facts of the task (``intermediates`` column of MASBench rows).

    Returns:
        A number in [0, 1] (0 for no facts).
    """
    texts = [text] if isinstance(text, str) else list(text)
    found = 0
    for fact in facts:
        name, _, value = fact.removeprefix("the ").rpartition(" = ")
        pattern = re.escape(name) + r"\D{0,40}?(?<!\d)" + re.escape(value.strip()) + r"(?!\d)"
        if name and any(re.search(pattern, t) for t in texts):
            found += 1
    return found / len(facts) if facts else 0.0


def group_cost_rewards(records: Sequence[RolloutRecord], groups: Sequence[str], reward: CostWeights) -> list[float]:
    """Rewards with cost normalised among the correct rollouts of each group (one prompt's rollouts).

    Args:
        records: the scored rollouts (their ``reward`` without any cost penalty).
        groups: one key per record; records with the same key were sampled for the same prompt.
        reward: gives ``cost_weight``, ``final_answer_weight``, ``execution_success_weight`` and ``cost_of``.

    Returns:
        One reward per record: unchanged for wrong or failed rollouts; for a correct one
        ``execution_success_weight + final_answer_weight × (1 − cost_weight × (c − min) / (max − min))`` over the
        costs ``c`` of the group's correct rollouts (no penalty when they all cost the same).
    """
    by_group: dict[str, list[int]] = {}
    for i, key in enumerate(groups):
        if records[i].correct and records[i].status == Status.OK.value:
            by_group.setdefault(key, []).append(i)
    out = [r.reward for r in records]
    for members in by_group.values():
        costs = [reward.cost_of(records[i]) for i in members]
        low, high = min(costs), max(costs)
        for i, cost in zip(members, costs, strict=True):
            share = (cost - low) / (high - low) if high > low else 0.0
            out[i] = reward.execution_success_weight + reward.final_answer_weight * (1.0 - reward.cost_weight * share)
    return out
