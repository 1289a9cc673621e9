"""Where a training step's time and memory go: wall seconds and peak resident memory per phase.

``python -m training.grpo --profile-phases`` wraps the phases of TRL's step — ``generate`` (rollout
sampling), ``reward`` (executing the multi-agent systems and grading them), ``forward`` (the policy's
log-probabilities and the loss), ``backward`` and ``optimizer`` — and adds, to every log entry,
``profile/<phase>_s`` (seconds spent in it since the previous log) and ``profile/<phase>_peak_rss_mb`` (the
highest resident set size of the process while it ran), plus ``profile/step_start_rss_mb``.

Peaks are exact on Linux: at every phase boundary the kernel's high-water mark (``VmHWM``) is read and reset
(``/proc/self/clear_refs``), so each phase's peak is the kernel's own, not a sample. Where that interface is
missing (another OS, a restricted container) the peaks are the resident size at the boundaries only, and
``profile/peak_exact`` is 0.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["PHASES", "PhaseProfiler", "profile_trainer"]

#: The phases ``profile_trainer`` measures, in the order a step runs them.
PHASES: tuple[str, ...] = ("generate", "reward", "forward", "backward", "optimizer")

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class PhaseProfiler:
    """Seconds and peak RSS per named phase; phases may nest (the innermost one is charged)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stack: list[str] = []
        self.seconds: dict[str, float] = {}
        self.peak_kib: dict[str, int] = {}
        self.overall_peak_kib = _status_kib("VmHWM") or 0  # before the first reset: the run so far
        self.exact = _reset_peak()
        self.step_start_kib = _status_kib("VmRSS") or 0

    def _charge_peak(self) -> None:
        """Give the peak since the last boundary to the phase that ran (the innermost open one)."""
        peak = _status_kib("VmHWM") if self.exact else _status_kib("VmRSS")
        if peak is not None:
            self.overall_peak_kib = max(self.overall_peak_kib, peak)
        if peak is not None and self._stack:
            name = self._stack[-1]
            self.peak_kib[name] = max(self.peak_kib.get(name, 0), peak)
        if self.exact:
            _reset_peak()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the time and memory of the ``with`` body to ``name``.

        Args:
            name: The phase (an enclosing phase is charged only for its own time).
        """
        with self._lock:
            self._charge_peak()
            self._stack.append(name)
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self._charge_peak()
                self._stack.pop()
                self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
                # an outer phase is charged only for its own time, not its inner phases'
                if self._stack:
                    outer = self._stack[-1]
                    self.seconds[outer] = self.seconds.get(outer, 0.0) - elapsed

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Replace ``owner.<attribute>`` (a method or function) by one that runs inside ``phase(name)``.

        Args:
            owner: The object holding the callable.
            attribute: The callable's attribute name.
            name: The phase to charge.
        """
        original: Callable[..., Any] = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)

    @property
    def overall_peak_mb(self) -> float:
        """The highest resident size seen at any boundary since the profiler started (MiB)."""
        with self._lock:
            self._charge_peak()
            return self.overall_peak_kib / 1024.0

    def pop_metrics(self) -> dict[str, float]:
        """The metrics since the previous call (``profile/…``), then start counting afresh."""
        with self._lock:
            metrics = {f"profile/{name}_s": seconds for name, seconds in self.seconds.items()}
            metrics.update({f"profile/{name}_peak_rss_mb": kib / 1024.0 for name, kib in self.peak_kib.items()})
            metrics["profile/step_start_rss_mb"] = self.step_start_kib / 1024.0
            metrics["profile/peak_exact"] = float(self.exact)
            self.seconds, self.peak_kib = {}, {}
            self.step_start_kib = _status_kib("VmRSS") or 0
            if self.exact:
                _reset_peak()
        return metrics


def profile_trainer(trainer: Any) -> PhaseProfiler:
    """Wrap the phases of a TRL ``GRPOTrainer`` (see the module docstring); returns the profiler whose
    :meth:`~PhaseProfiler.pop_metrics` the trainer adds to its logs.

    Args:
        trainer: The trainer (its generation, reward, loss, backward and, once created, optimizer step are
            wrapped).
    """
    profiler = PhaseProfiler()
    profiler.wrap(trainer, "_generate_single_turn", "generate")
    profiler.wrap(trainer, "_calculate_rewards", "reward")
    profiler.wrap(trainer, "compute_loss", "forward")
    profiler.wrap(trainer.accelerator, "backward", "backward")
    original_create = trainer.create_optimizer

    def create_optimizer(*args: Any, **kwargs: Any) -> Any:
        optimizer = original_create(*args, **kwargs)
        profiler.wrap(optimizer, "step", "optimizer")
        return optimizer

    trainer.create_optimizer = create_optimizer
    return profiler
