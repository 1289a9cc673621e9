"""What happened to each rollout (:class:`RolloutRecord`) and the metrics of a batch of them (:func:`summarize`).

The outcome reward (:mod:`training.rewards`) fills one record per completion; the trainer
(:mod:`training.trainer`) and the validation passes (:mod:`training.validation`) summarise them into the
metrics of ``trainer_state.json``'s ``log_history``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mas_orchestra.runtime import Status
from mas_orchestra.spec import WARNING_KINDS
from mas_orchestra.spec.structure import STRUCTURE_KEYS, Structure, summarize_structures

__all__ = ["STATUSES", "RolloutRecord", "summarize"]

#: Every status a rollout can end with: the runtime's statuses plus ``crash`` (an unexpected exception).
STATUSES: tuple[str, ...] = (*(s.value for s in Status), "crash")


@dataclass
class RolloutRecord:
    """What happened to one completion.

    Attributes:
        index: The completion's position in its batch.
        status: One of :data:`STATUSES`.
        reward: The reward it earned.
        correct: The graded answer was correct.
        agents: Agents in the parsed spec (0 = direct answer); ``None`` when the completion did not parse.
        agent_counts: Agents in the parsed spec by kind.
        subagent_calls: Sub-agent model calls made running the spec.
        total_tokens: Input plus output tokens of those calls.
        cost_usd: Their cost in USD.
        wall_s: Seconds the rollout took.
        answer: The system's answer, if it ran.
        error: What went wrong, if anything.
        question: The question as sampled (what ``rollouts.jsonl`` keeps for inspection).
        completion: The completion as sampled.
        spec_warnings: Leniencies the parser applied to the completion, by kind (see
            ``mas_orchestra.spec.SpecWarning``).
        whole_response: The answer graded was the whole completion (``whole_response_fallback``).
        partial: Share of the task's intermediate facts the final agent's text states (None: the row has none).
        structure: The parsed spec's structure (:class:`mas_orchestra.spec.structure.Structure` as a dict); None
            if invalid.
        trained: Whether the rollout entered the loss (set under ``downsample_generations``; None: every rollout
            of the step did, or it was not a training rollout).
    """

    index: int
    status: str = "crash"
    reward: float = 0.0
    correct: bool = False
    agents: int | None = None
    agent_counts: dict[str, int] = field(default_factory=dict)
    subagent_calls: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    answer: str | None = None
    error: str | None = None
    question: str = ""
    completion: str = ""
    spec_warnings: dict[str, int] = field(default_factory=dict)
    whole_response: bool = False
    partial: float | None = None
    structure: dict[str, Any] | None = None
    trained: bool | None = None

    @property
    def valid(self) -> bool:
        """The completion parsed and validated into a spec (whatever happened when it ran)."""
        return self.agents is not None


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def summarize(records: Sequence[RolloutRecord], kinds: Sequence[str] = ()) -> dict[str, float]:
    """Metrics of a batch of rollouts; the same keys for every batch (zeros when there is nothing to count).

    - ``valid_spec_rate``: completions that parsed and validated into a spec / all completions;
    - ``status/<s>`` for each of :data:`STATUSES`: share of all completions;
    - ``correct_rate``: correct answers / all completions;
    - over the valid specs only: ``agents_per_spec`` (mean agents per spec, 0 for a direct answer),
      ``delegation_share`` (specs with exactly one agent), ``direct_answer_share`` (specs with none),
      ``subagent_calls``, ``subagent_tokens``, ``subagent_cost_usd`` (means per spec);
    - ``agent_share/<kind>`` for each kind in ``kinds`` (and any other kind seen): that kind's share of all
      agent nodes in the valid specs;
    - ``outcome_reward/mean``, ``outcome_reward/std`` (population std), ``rollout_wall_s/mean`` and ``/max``;
    - ``spec_warnings/<kind>`` for each of :data:`~mas_orchestra.spec.WARNING_KINDS`: share of all completions
      whose reading needed that leniency; ``whole_response_rate``: completions graded on their whole text;
    - ``structure/<key>`` for each of :data:`~mas_orchestra.spec.structure.STRUCTURE_KEYS` over the valid specs
      (``agents_mean``, ``depth_mean`` along edges, ``ref_depth_mean`` along ``${id}`` references, ``width_mean``,
      ``edges_mean``, ``wired_share``; see :func:`mas_orchestra.spec.structure.summarize_structures`);
      ``structure/correct_ref_depth_mean``: ``ref_depth`` of the correct ones (0 when none);
    - ``partial_credit/mean``: mean share of the task's intermediate facts the final agent stated, over the
      executed rollouts whose rows carry ``intermediates`` (0 when none do);
    - ``dead_group_share``: share of groups (rollouts of the same question) whose rewards are all equal, so their
      GRPO advantages are zero and they give the policy no gradient.

    Args:
        records: The batch's rollouts.
        kinds: Agent kinds that always get an ``agent_share/<kind>`` key.
    """
    n = len(records)
    statuses = Counter(r.status for r in records)
    valid = [r for r in records if r.valid]
    nodes: Counter[str] = Counter()
    for r in valid:
        nodes.update(r.agent_counts)
    total_nodes = sum(nodes.values())
    rewards = [r.reward for r in records]
    out: dict[str, float] = {
        "valid_spec_rate": len(valid) / n if n else 0.0,
        "correct_rate": sum(r.correct for r in records) / n if n else 0.0,
    }
    for status in STATUSES:
        out[f"status/{status}"] = statuses[status] / n if n else 0.0
    out["agents_per_spec"] = _mean([r.agents or 0 for r in valid])
    out["delegation_share"] = sum(r.agents == 1 for r in valid) / len(valid) if valid else 0.0
    out["direct_answer_share"] = sum(r.agents == 0 for r in valid) / len(valid) if valid else 0.0
    for kind in sorted({*kinds, *nodes}):
        out[f"agent_share/{kind}"] = nodes[kind] / total_nodes if total_nodes else 0.0
    out["subagent_calls"] = _mean([r.subagent_calls for r in valid])
    out["subagent_tokens"] = _mean([r.total_tokens for r in valid])
    out["subagent_cost_usd"] = _mean([r.cost_usd for r in valid])
    out["outcome_reward/mean"] = _mean(rewards)
    out["outcome_reward/std"] = statistics.pstdev(rewards) if n > 1 else 0.0
    out["rollout_wall_s/mean"] = _mean([r.wall_s for r in records])
    out["rollout_wall_s/max"] = max((r.wall_s for r in records), default=0.0)
    for kind in WARNING_KINDS:
        out[f"spec_warnings/{kind}"] = sum(kind in r.spec_warnings for r in records) / n if n else 0.0
    out["whole_response_rate"] = sum(r.whole_response for r in records) / n if n else 0.0
    measured = [(r, Structure(**r.structure)) for r in valid if r.structure is not None]
    structure = summarize_structures(shape for _, shape in measured)
    for key in STRUCTURE_KEYS:
        out[f"structure/{key}"] = structure[key]
    out["structure/correct_ref_depth_mean"] = _mean([shape.ref_depth for r, shape in measured if r.correct])
    partial = [r.partial for r in records if r.partial is not None]
    out["partial_credit/mean"] = _mean(partial)  # share of intermediate facts stated, over rollouts that had any
    groups: dict[str, list[float]] = {}
    for r in records:
        groups.setdefault(r.question, []).append(r.reward)
    # A group whose rollouts all scored the same has zero advantages: GRPO learns nothing from it.
    out["dead_group_share"] = (sum(len(set(g)) == 1 for g in groups.values()) / len(groups)) if groups else 0.0
    return out
