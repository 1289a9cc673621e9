"""How many torch intra-op threads local generation uses: the cores this process may run on, never more.

torch's default is the machine's core count, whatever the process's CPU affinity (``taskset``, a container's
cpuset) or the number of sibling processes (``accelerate launch`` starts one per device). More OpenMP threads
than cores makes them spin waiting for each other: on a shared 2-core machine, 2-thread decoding fell an order
of magnitude below 1-thread decoding. The rule, in order:

1. ``MAS_TORCH_THREADS`` (a positive integer) if set;
2. ``OMP_NUM_THREADS`` if set (the variable ``accelerate launch`` and CI runners commonly set);
3. the cores in ``os.sched_getaffinity(0)`` divided by ``LOCAL_WORLD_SIZE`` (processes per machine, set by
   ``accelerate launch`` / ``torchrun``), at least 1.

Nothing here imports torch at import time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from mas_orchestra import environment
from mas_orchestra.errors import MasOrchestraError

__all__ = ["THREADS_ENV_VAR", "TorchThreadsError", "default_torch_threads", "torch_threads", "usable_cores"]

THREADS_ENV_VAR = "MAS_TORCH_THREADS"


class TorchThreadsError(MasOrchestraError, ValueError):
    """A thread-count environment variable is not a positive integer."""


def _positive(name: str) -> int | None:
    return environment.positive_int(name, error=TorchThreadsError)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def default_torch_threads() -> int:
    """Torch intra-op threads for local generation (see the module docstring for the rule)."""
    for name in (THREADS_ENV_VAR, "OMP_NUM_THREADS"):
        value = _positive(name)
        if value is not None:
            return value
    local_processes = _positive("LOCAL_WORLD_SIZE") or 1
    return max(1, usable_cores() // local_processes)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` torch intra-op threads inside the block, then restore the previous count (``None``/``0``: leave
    torch alone).

    Args:
        n: Threads (``None`` or ``0``: leave torch alone).

    Yields:
        Nothing; the thread count is restored on exit.
    """
    if not n:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    if previous == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
