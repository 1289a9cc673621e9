"""The studio's typed errors and small shared helpers."""

from __future__ import annotations

from typing import Any

from mas_orchestra.errors import MasOrchestraError

__all__ = ["RunFolderError", "StudioInputError", "clip"]


class StudioInputError(MasOrchestraError, ValueError):
    """A request the studio cannot serve: says what is wrong and how to fix it.

    Args:
        message: What is wrong and how to fix it.
        status: The HTTP status code.
        problems: Every problem found (default: the message alone).
    """

    def __init__(self, message: str, *, status: int = 400, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problems = problems or [message]


class RunFolderError(StudioInputError):
    """A ``--runs`` path that is not an eval or training output folder (or a folder of them)."""


def clip(text: Any, limit: int) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut).

    Args:
        text: Any value (``None`` reads as empty).
        limit: Most characters.
    """
    value = "" if text is None else str(text)
    return value if len(value) <= limit else value[: limit - 1] + "…"
