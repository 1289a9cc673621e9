"""Typed errors of mas-orchestra.

Every class derives from :class:`MasOrchestraError` (defined, with :class:`MissingExtraError`, in the
lowest layer, :mod:`agents.errors`, and re-exported here as the same objects) and keeps its builtin base,
so ``except MasOrchestraError`` and the older ``except ValueError`` / ``except RuntimeError`` both catch it.
Errors tied to one module stay there (``EvalInputError`` in :mod:`mas_orchestra.bench.evaluation`,
``MissingCredentialsError`` in :mod:`mas_orchestra.models` …); they derive from the same base.
"""

from __future__ import annotations

from collections.abc import Iterable

from agents.errors import MasOrchestraError, MissingExtraError, install_command

__all__ = [
    "CheckpointError",
    "CompileError",
    "ConstrainedDecodingError",
    "DataError",
    "GrammarError",
    "MasOrchestraError",
    "MissingExtraError",
    "NodeExecutionError",
    "SpecError",
    "ThreadMismatchError",
    "install_command",
]


class SpecError(MasOrchestraError, ValueError):
    """A malformed or invalid orchestration: the only exception bad orchestration text raises.

    ``str(exc)`` joins the problems with ``; ``.

    Args:
        problems: One problem, or every violation found, each naming where it is (``agent 'A': …``,
            ``edge 2: …``, ``cycle: A -> B -> A``).

    Attributes:
        problems: The problems, as a list.

    Example:
        ```python
        try:
            parse_orchestration(text)
        except SpecError as exc:
            for problem in exc.problems:
                print(problem)
        ```
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        if not self.problems:
            self.problems = ["invalid orchestration"]
        super().__init__("; ".join(self.problems))


class CompileError(MasOrchestraError, ValueError):
    """A valid spec that cannot be compiled here (e.g. a search node but no search backend)."""


class NodeExecutionError(MasOrchestraError, RuntimeError):
    """An agent failed while the graph ran; names the node and its kind.

    Args:
        node_id: The node that failed.
        block: Its agent kind's block name.
        cause: What the agent raised.

    Attributes:
        node_id: The node that failed.
        block: Its agent kind's block name.
        cause: What the agent raised.
    """

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


class CheckpointError(MasOrchestraError, RuntimeError):
    """A checkpoint store cannot be used: corrupt, locked, unreadable or not a checkpoint database.

    The store is never modified or recreated by the code that raises this, so what it already holds is kept.

    Args:
        path: The file (or store).
        problem: What is wrong with it.
        fix: What to do about it.

    Attributes:
        path: The file (or store).
        problem: What is wrong with it.
    """

    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(f"checkpoint store {path!r}: {problem}; {fix}")
        self.path = path
        self.problem = problem


class ThreadMismatchError(MasOrchestraError, ValueError):
    """A thread is resumed with a different question, spec or model set than the one that started it.

    Nothing is run and nothing stored is changed.

    Args:
        thread_id: The thread.
        differences: What differs (``question``, ``spec``, ``orchestrator``, ``subagent``, ``dom``…) mapped to
            ``(stored, given)``.

    Attributes:
        thread_id: The thread.
        differences: What differs, mapped to ``(stored, given)``.
    """

    def __init__(self, thread_id: str, differences: dict[str, tuple[object, object]]) -> None:
        parts = [f"{key}: thread has {old!r}, this run has {new!r}" for key, (old, new) in differences.items()]
        super().__init__(
            f"thread {thread_id!r} was started with a different setup ({'; '.join(parts)}); resume it with the "
            "same setup, start a new thread id, or fork it (Orchestra.arun(..., fork_from=...), CLI --fork)"
        )
        self.thread_id = thread_id
        self.differences = differences
