"""Run folders for the studio tests and benchmark: a real eval folder (``aevaluate`` on scripted models) and
training folders whose ``rollouts.jsonl`` lines have the keys the GRPO trainer writes (step, train and the
fields of ``training.records.RolloutRecord``)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from tests import eval_models as em
from tests.conftest import REPO

__all__ = ["TRAINER_STATE", "make_eval_folder", "make_training_folder", "rollout_line"]

TRAINER_STATE = REPO / "examples" / "data" / "cpu_learning_seed0_trainer_state.json"
_KINDS = ("cot", "sc", "reflexion", "debate")
_INVALID = "<agent><agent_id>A</agent_id><agent_name>OracleAgent</agent_name></agent>"


async def make_eval_folder(path: Path) -> Path:
    """An eval output folder with ok (right and wrong), exec_error and invalid_spec records."""
    from mas_orchestra import RunSettings
    from mas_orchestra.bench.evaluation import aevaluate

    rows = em.make_rows(["", "wrong", "", "boom", "invalid", ""])
    await aevaluate(rows, orchestrator=em.orchestrator(), subagent=em.subagent(), out_dir=path, grader="exact",
                    progress=False, settings=RunSettings(max_retries=0))
    return path


def rollout_line(index: int, step: int, rng: random.Random) -> dict:
    """One rollouts.jsonl record: a valid two-agent orchestration most of the time, an invalid one otherwise."""
    valid = rng.random() < 0.85
    kind = rng.choice(_KINDS)
    correct = valid and rng.random() < min(0.9, 0.2 + 0.05 * step)
    return {
        "step": step, "train": True, "index": index, "status": "ok" if valid else "invalid_spec",
        "reward": 1.0 if correct else 0.0, "correct": correct, "agents": 2 if valid else None,
        "agent_counts": {"cot": 1, kind: 1 + (kind == "cot")} if valid else {},
        "subagent_calls": 2 if valid else 0, "total_tokens": 300 + index % 50, "cost_usd": 0.0, "wall_s": 0.5,
        "answer": "42" if correct else ("41" if valid else None),
        "error": None if valid else "agent 'A': unknown agent 'OracleAgent'",
        "question": f"What is {index} + {step}? (rollout {index})",
        "completion": em.ORCHESTRATION if valid else _INVALID,
    }


def make_training_folder(path: Path, rollouts: int = 48, steps: int = 6, *, state: bool = True,
                         seed: int = 0) -> Path:
    """A training output folder: ``rollouts.jsonl`` (``rollouts`` lines over ``steps`` steps) and, with
    ``state``, the trainer_state.json of the repo's example CPU run."""
    path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_step = max(1, rollouts // steps)
    with (path / "rollouts.jsonl").open("w", encoding="utf-8") as out:
        for i in range(rollouts):
            out.write(json.dumps(rollout_line(i, 1 + i // per_step, rng)) + "\n")
    if state:
        shutil.copy(TRAINER_STATE, path / "trainer_state.json")
    return path
