"""GRPO with two training processes on CPU: ``accelerate launch --cpu --num_processes 2`` (gloo).

One run of ``recipes/cpu_ddp.yaml`` (the tiny random orchestrator, constrained decoding, a scripted sub-agent):
each rank executes the multi-agent systems of its own half of every step's 8 rollouts; the logged metrics and
``rollouts.jsonl`` cover all 8, each once; a checkpoint written by the two ranks resumes with two ranks and
continues the same curve; resuming it with one process is a clear error naming both sizes (these three share
one two-rank run and are marked ``multiprocess``: deselected by default, ``pytest -m multiprocess``). A rank
that crashes makes the launcher exit non-zero with that rank's error, its peer does not hang (in the default run).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_training import needs_train

pytestmark = [needs_train, pytest.mark.slow]
multiprocess = pytest.mark.multiprocess  # the three-run tests: deselected by default (minutes), run with -m multiprocess

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "cpu_ddp.yaml"
GLOBAL_BATCH = 8  # 2 processes x 2 per device x 2 accumulation steps = 2 prompts x 4 generations


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(out: Path, *extra: str, processes: int = 2, env: dict | None = None,
           timeout: float = 420) -> subprocess.CompletedProcess:
    # --multi_gpu is accelerate's torchrun launcher: on a machine without CUDA it starts the processes on CPU
    # over gloo (its --cpu launcher would start ONE process; training.distributed.check_launch refuses that).
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--num_cpu_threads_per_process", "1", "--main_process_port", str(_free_port()),
               "-m", "training.grpo", "--config", str(RECIPE), "--output-dir", str(out), *extra]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO)


def logged_steps(out: Path) -> list[dict]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return [e for e in history if "valid_spec_rate" in e]


def rollouts(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """Two steps with two ranks, a checkpoint after each (the recipe as written)."""
    out = tmp_path_factory.mktemp("ddp") / "run"
    done = launch(out)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return out, done


@multiprocess
def test_two_ranks_share_every_step_and_the_logs_count_all_rollouts(ddp_run):
    out, done = ddp_run
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["processes"] == 2 and summary["torch_threads"] == 1
    steps = logged_steps(out)
    assert [e["step"] for e in steps] == [1, 2]
    # each rank's reward executed its own 4 systems per step (one log line per rank and step)
    for step in (1, 2):
        assert done.stderr.count(f"reward batch {step}: 4 completions") == 2
    lines = rollouts(out)
    for entry in steps:
        assert entry["rollouts"] == GLOBAL_BATCH and entry["rollout_ranks"] == 2
        mine = [r for r in lines if r["step"] == entry["step"]]
        # every rollout once, half executed by each rank
        assert len(mine) == GLOBAL_BATCH
        assert sorted(r["rank"] for r in mine) == [0] * 4 + [1] * 4
        # the logged rates are over all 8 (a rate of one rank alone would be a multiple of 1/4 that differs)
        statuses = [r["status"] for r in mine]
        assert entry["status/ok"] == pytest.approx(statuses.count("ok") / GLOBAL_BATCH)
        assert entry["valid_spec_rate"] == 1.0  # constrained decoding: every rollout a spec that ran
        assert entry["outcome_reward/mean"] == pytest.approx(sum(r["reward"] for r in mine) / GLOBAL_BATCH)
        assert entry["reward"] == pytest.approx(entry["outcome_reward/mean"])  # TRL's gathered mean agrees
    # the two ranks sampled different completions for the same prompt (per-rank seeds)
    first = [r for r in lines if r["step"] == 1]
    assert {r["completion"] for r in first if r["rank"] == 0} != {r["completion"] for r in first if r["rank"] == 1}
    assert len(lines) == 2 * GLOBAL_BATCH
    assert done.stdout.count("output dir:") == 1  # rank 0 alone prints and writes the summary
    for step in (1, 2):
        folder = out / f"checkpoint-{step}"
        assert (folder / "rng_state_0.pth").is_file() and (folder / "rng_state_1.pth").is_file()


@multiprocess
def test_a_two_rank_checkpoint_resumes_with_two_ranks_on_the_same_curve(ddp_run, tmp_path):
    out, _ = ddp_run
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "checkpoint-1", resumed / "checkpoint-1")
    done = launch(resumed, "--resume")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    summary = json.loads((resumed / "run_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-1")
    original, again = logged_steps(out), logged_steps(resumed)
    assert [e["step"] for e in again] == [1, 2]
    assert again[0] == original[0]  # carried over from the checkpoint's trainer state
    # step 2 recomputed by two new processes from the checkpoint: the same rollouts and the same numbers
    second = [(r["rank"], r["completion"]) for r in rollouts(resumed) if r["step"] == 2]
    assert second == [(r["rank"], r["completion"]) for r in rollouts(out) if r["step"] == 2]
    for key in ("reward", "valid_spec_rate", "status/ok", "rollouts", "rollout_ranks", "loss", "kl", "entropy"):
        assert again[1][key] == pytest.approx(original[1][key], rel=1e-4, abs=1e-6), key


@multiprocess
def test_resuming_a_two_rank_checkpoint_with_one_process_names_both_sizes(ddp_run, tmp_path):
    out, _ = ddp_run
    single = tmp_path / "single"
    single.mkdir()
    shutil.copytree(out / "checkpoint-1", single / "checkpoint-1")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = subprocess.run(
        [sys.executable, "-m", "training.grpo", "--config", str(RECIPE), "--output-dir", str(single), "--resume"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**env, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode != 0
    assert "written by 2 process(es) but this run has 1" in done.stderr
    assert "--num_processes 2" in done.stderr and "Traceback" not in done.stderr


def test_a_rank_that_crashes_fails_the_launch_without_hanging_its_peer(tmp_path):
    """Rank 1 raises while it sets up (its sub-agent endpoint is unreachable); rank 0 has gone on and waits for it
    in the first collective. The launcher must stop rank 0 and exit non-zero with rank 1's error, in bounded time
    (``subprocess.run``'s timeout turns a hang into a failure)."""
    out = tmp_path / "crash"
    started = time.perf_counter()
    done = launch(out, "--subagent", "python:tests.ddp_models:unreachable_on_rank_1", "--max-steps", "1",
                  timeout=300)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "ConnectionError: rank 1 cannot reach its sub-agent endpoint (injected failure)" in text
    assert "rank      : 1" in text or "local_rank: 1" in text, text[-3000:]  # torchrun names the failed rank
    assert not (out / "trainer_state.json").exists()
    assert time.perf_counter() - started < 300
