"""Typed errors of mas-orchestra."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CompileError", "ConstrainedDecodingError", "GrammarError", "MissingExtraError", "SpecError"]


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
