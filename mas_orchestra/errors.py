"""Typed errors of mas-orchestra."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "CheckpointError",
    "CompileError",
    "ConstrainedDecodingError",
    "GrammarError",
    "MissingExtraError",
    "SpecError",
    "ThreadMismatchError",
]


class SpecError(ValueError):
    """A malformed or invalid orchestration: the only exception bad orchestration text raises.

    ``problems`` lists every violation found, each naming where it is (``agent 'A': …``,
    ``edge 2: …``, ``cycle: A -> B -> A``); ``str(exc)`` joins them.
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        if not self.problems:
            self.problems = ["invalid orchestration"]
        super().__init__("; ".join(self.problems))


class CompileError(ValueError):
    """A valid spec that cannot be compiled here (e.g. a search node but no search backend)."""


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message carries the exact ``pip install`` command."""

    def __init__(self, what: str, extra: str, package: str | None = None) -> None:
        command = f"pip install 'mas-orchestra[{extra}]'"
        super().__init__(f"{what} needs the optional extra '{extra}': {command}")
        self.extra = extra
        self.command = command
        self.package = package


class GrammarError(ValueError):
    """A grammar for constrained decoding cannot be built (e.g. a parameter type it cannot express)."""


class ConstrainedDecodingError(RuntimeError):
    """Constrained decoding was asked for but the backend cannot do it (the message names the switch)."""


class CheckpointError(RuntimeError):
    """A checkpoint store cannot be used: corrupt, locked, unreadable or not a checkpoint database.

    ``path`` names the file (or store); the store is never modified or recreated by the code that raises
    this, so what it already holds is kept.
    """

    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(f"checkpoint store {path!r}: {problem}; {fix}")
        self.path = path
        self.problem = problem


class ThreadMismatchError(ValueError):
    """A thread is resumed with a different question, spec or model set than the one that started it.

    ``differences`` maps what differs (``question``, ``spec``, ``orchestrator``, ``subagent``, ``dom``…) to
    ``(stored, given)``; nothing is run and nothing stored is changed.
    """

    def __init__(self, thread_id: str, differences: dict[str, tuple[object, object]]) -> None:
        parts = [f"{key}: thread has {old!r}, this run has {new!r}" for key, (old, new) in differences.items()]
        super().__init__(
            f"thread {thread_id!r} was started with a different setup ({'; '.join(parts)}); resume it with the "
            "same setup, start a new thread id, or fork it (Orchestra.arun(..., fork_from=...), CLI --fork)"
        )
        self.thread_id = thread_id
        self.differences = differences
