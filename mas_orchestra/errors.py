"""Typed errors of mas-orchestra.

Every class derives from :class:`MasOrchestraError` (defined, with :class:`MissingExtraError`, in the
lowest layer, :mod:`agents.errors`, and re-exported here as the same objects) and keeps its builtin base,
so ``except MasOrchestraError`` and the older ``except ValueError`` / ``except RuntimeError`` both catch it.
Errors tied to one module stay there (``EvalInputError`` in :mod:`mas_orchestra.eval`,
``MissingCredentialsError`` in :mod:`mas_orchestra.models` …); they derive from the same base.
"""

from __future__ import annotations

from collections.abc import Iterable

from agents.errors import MasOrchestraError, MissingExtraError, install_command

__all__ = [
    "CompileError",
    "ConstrainedDecodingError",
    "DataError",
    "GrammarError",
    "MasOrchestraError",
    "MissingExtraError",
    "NodeExecutionError",
    "SpecError",
    "install_command",
]


class SpecError(MasOrchestraError, ValueError):
    """A malformed or invalid orchestration: the only exception bad orchestration text raises.

    ``problems`` lists every violation found, each naming where it is (``agent 'A': …``,
    ``edge 2: …``, ``cycle: A -> B -> A``); ``str(exc)`` joins them.
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        if not self.problems:
            self.problems = ["invalid orchestration"]
        super().__init__("; ".join(self.problems))


class CompileError(MasOrchestraError, ValueError):
    """A valid spec that cannot be compiled here (e.g. a search node but no search backend)."""


class NodeExecutionError(MasOrchestraError, RuntimeError):
    """An agent failed while the graph ran; names the node and its kind."""

    def __init__(self, node_id: str, block: str, cause: BaseException) -> None:
        super().__init__(f"agent {node_id!r} ({block}) failed: {type(cause).__name__}: {cause}")
        self.node_id = node_id
        self.block = block
        self.cause = cause


class GrammarError(MasOrchestraError, ValueError):
    """A grammar for constrained decoding cannot be built (e.g. a parameter type it cannot express)."""


class ConstrainedDecodingError(MasOrchestraError, RuntimeError):
    """Constrained decoding was asked for but the backend cannot do it (the message names the switch)."""


class DataError(MasOrchestraError, ValueError):
    """A data file or row cannot be read (missing file, bad JSON, a row without a question …).

    The message names the file and line (``data.jsonl:3: …``) or the row (``row 3: …``).
    """
