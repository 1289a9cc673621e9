"""GRPO training of the orchestrator: ``python -m training.grpo`` (TRL GRPOTrainer + PEFT LoRA + optional vLLM).

The reward is the executed outcome of the multi-agent system each completion writes
(:func:`training.rewards.make_outcome_reward`). Importing this package is cheap: torch, TRL and PEFT are
imported only by :mod:`training.grpo` when a run starts.
"""

from __future__ import annotations

import mas_orchestra  # noqa: F401  -- first: it checks that `agents` is our package
from training.records import RolloutRecord
from training.rewards import OutcomeReward, make_outcome_reward

__all__ = ["OutcomeReward", "RolloutRecord", "make_outcome_reward"]
