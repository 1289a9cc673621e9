"""Several training processes (``accelerate launch --num_processes N``): what each rank needs to agree on.

- :func:`world_size`: how many processes this run has (``WORLD_SIZE``, set by ``accelerate launch`` /
  ``torchrun``; 1 for ``python -m training.grpo``).
- :func:`checkpoint_world_size` / :func:`check_resume_world_size`: a checkpoint holds one RNG state per rank
  (``rng_state_<rank>.pth``; ``rng_state.pth`` for one process) and its data order assumes the same global
  batch, so it resumes only with the number of processes that wrote it: :class:`WorldSizeMismatchError` otherwise.
- :func:`check_launch`: ``accelerate launch --cpu --num_processes N`` (accelerate 1.x, no ``--mpirun_hostfile``)
  starts ONE process that trains alone with the batch of one; this is refused with the commands that do start
  N processes (``accelerate launch --multi_gpu --num_processes N``, which on a machine without CUDA runs N
  processes over gloo, or ``torchrun --nproc_per_node N``).
- :func:`tiny_random_model`: the ``model: tiny-random`` orchestrator, a 2-layer random Llama with the
  embedded model's tokenizer, built once per cache folder (every rank gets the same weights: fixed seed,
  atomic rename), so multi-process runs on CPU take seconds per step.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from mas_orchestra.errors import MasOrchestraError

__all__ = [
    "TINY_RANDOM",
    "LaunchError",
    "WorldSizeMismatchError",
    "check_launch",
    "check_resume_world_size",
    "checkpoint_world_size",
    "tiny_random_model",
    "world_size",
]

#: ``--model`` value naming the tiny random orchestrator.
TINY_RANDOM = "tiny-random"
_TINY_DIR = "tiny-random-llama-2l64"
_TINY_SHAPE = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
               "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}


class WorldSizeMismatchError(MasOrchestraError, ValueError):
    """A checkpoint written by N processes is resumed with M != N processes.

    Args:
        checkpoint: The checkpoint folder.
        written_by: How many processes wrote it.
        resuming_with: How many processes this run has.
    """

    def __init__(self, checkpoint: str, written_by: int, resuming_with: int) -> None:
        super().__init__(
            f"checkpoint {checkpoint!r} was written by {written_by} process(es) but this run has {resuming_with}: "
            f"its per-rank RNG states and data order assume {written_by}; resume with "
            f"`accelerate launch --num_processes {written_by} ...`"
            + (" (or plain `python -m training.grpo`)" if written_by == 1 else "")
            + ", or start a new --output-dir"
        )
        self.checkpoint = checkpoint
        self.written_by = written_by
        self.resuming_with = resuming_with


class LaunchError(MasOrchestraError, RuntimeError):
    """The launcher started fewer processes than asked for."""


def check_launch(environ: dict[str, str] | None = None) -> None:
    """Raise :class:`LaunchError` when ``accelerate launch --cpu --num_processes N>1`` started a single process.

    accelerate's simple (CPU) launcher sets ``MASTER_ADDR``/``MASTER_PORT`` when more than one process was asked
    for, but starts only one unless MPI is used; a real multi-process launch also sets ``WORLD_SIZE`` (torchrun)
    or an MPI rank variable.

    Args:
        environ: The environment to read (default: ``os.environ``).

    Raises:
        LaunchError: ``MASTER_ADDR`` and ``ACCELERATE_USE_CPU=true`` are set but no world-size variable is.
    """
    env = os.environ if environ is None else environ
    asked_for_several = "MASTER_ADDR" in env and str(env.get("ACCELERATE_USE_CPU", "")).lower() == "true"
    launched = any(k in env for k in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"))
    if asked_for_several and not launched:
        raise LaunchError(
            "accelerate launch --cpu --num_processes N started a single process (its CPU launcher needs MPI for "
            "more); start N processes with `accelerate launch --multi_gpu --num_processes N "
            "--num_cpu_threads_per_process 1 -m training.grpo ...` (gloo on a machine without CUDA) or "
            "`torchrun --nproc_per_node N -m training.grpo ...`"
        )


def world_size() -> int:
    """The number of training processes of this run (``WORLD_SIZE``; 1 when not launched by accelerate/torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def checkpoint_world_size(checkpoint: str | Path) -> int | None:
    """How many processes wrote ``checkpoint`` (from its RNG state files); None when it has none.

    Args:
        checkpoint: The checkpoint folder (``rng_state_<rank>.pth`` per process, or one ``rng_state.pth``).
    """
    folder = Path(checkpoint)
    ranks = [p for p in folder.glob("rng_state_*.pth") if re.fullmatch(r"rng_state_\d+\.pth", p.name)]
    if ranks:
        return len(ranks)
    return 1 if (folder / "rng_state.pth").is_file() else None


def check_resume_world_size(checkpoint: str | Path, processes: int | None = None) -> None:
    """Raise :class:`WorldSizeMismatchError` if ``checkpoint`` was written by another number of processes.

    Args:
        checkpoint: The checkpoint folder; one without RNG state files passes.
        processes: This run's number of processes (default: the current world size).

    Raises:
        WorldSizeMismatchError: The numbers differ.
    """
    processes = world_size() if processes is None else processes
    written = checkpoint_world_size(checkpoint)
    if written is not None and written != processes:
        raise WorldSizeMismatchError(str(checkpoint), written, processes)


def tiny_random_model(cache_dir: str | Path | None = None) -> Path:
    """The ``tiny-random`` orchestrator folder (built on first use from the embedded model's config/tokenizer).

    Args:
        cache_dir: The cache folder holding it and the embedded model (default: the embedded model's cache root).

    Returns:
        The folder with the model (random weights, seed 0) and the tokenizer.
    """
    from mas_orchestra.local.embedded import default_cache_root, embedded_model_dir

    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    target = root / _TINY_DIR
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = embedded_model_dir(root)
    config = AutoConfig.from_pretrained(source)
    config.update(_TINY_SHAPE)
    torch.manual_seed(0)  # the same weights in every process that builds it
    model = AutoModelForCausalLM.from_config(config)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{_TINY_DIR}-", dir=root))
    try:
        model.save_pretrained(staging)
        if not (staging / "config.json").is_file():
            # transformers writes model files on rank 0 only once torch.distributed is initialised; every rank
            # builds the same seeded weights, so this rank writes them itself (a rank-1 copy must be complete).
            from safetensors.torch import save_model

            model.config.save_pretrained(staging)
            save_model(model, str(staging / "model.safetensors"))
        AutoTokenizer.from_pretrained(source).save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process renamed its copy first: use that one
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
