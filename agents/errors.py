"""The root of mas-orchestra's errors and the one error for a missing optional extra.

It lives in the lowest layer so that every layer (``agents``, ``mas_orchestra``, ``graphs``, ``training``)
can raise and catch the same classes; ``mas_orchestra.errors`` re-exports them.

Every error the project raises on purpose derives from :class:`MasOrchestraError` *and* keeps the builtin
base it always had (``ValueError``, ``RuntimeError``, ``ImportError`` …), so ``except MasOrchestraError``
catches all of them while existing ``except ValueError`` clauses keep working.
"""

from __future__ import annotations

__all__ = ["DIST_NAME", "MasOrchestraError", "MissingExtraError", "install_command"]

DIST_NAME = "mas-orchestra"
"""The distribution name ``pip`` installs (and whose extras the install commands name)."""


def install_command(extra: str) -> str:
    """The exact command that installs an optional extra: ``pip install 'mas-orchestra[<extra>]'``.

    The one place this command is spelled; every install hint of the project is built from it.

    Args:
        extra: The extra's name (letters, digits, ``-`` and ``_``).

    Returns:
        The command, the extra quoted for shells that glob square brackets.

    Raises:
        ValueError: Not an extra name.
    """
    if not extra or not extra.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"not an extra name: {extra!r}")
    # Quoted so that shells which glob square brackets (zsh) pass it through unchanged.
    return f"pip install '{DIST_NAME}[{extra}]'"


class MasOrchestraError(Exception):
    """Base class of every error mas-orchestra raises on purpose."""


class MissingExtraError(MasOrchestraError, ImportError):
    """An optional dependency is missing; the message carries the exact command that installs it.

    Being an ``ImportError``, it is caught wherever a missing optional package is expected.

    Args:
        what: What needed it (``"the BM25 backend"``).
        extra: The optional extra holding the package (the command is then
            ``pip install 'mas-orchestra[<extra>]'``).
        package: The missing package.
        command: Replaces the command for a dependency that no extra installs; ``what`` is then written as
            is, followed by ``; install with: <command>``.

    Attributes:
        extra: The extra (``None`` when ``command`` was given instead).
        command: The command that installs what is missing.
        package: The missing package, or ``None``.

    Raises:
        TypeError: Neither ``extra`` nor ``command`` was given.
    """

    def __init__(
        self, what: str, extra: str | None = None, package: str | None = None, *, command: str | None = None
    ) -> None:
        if command is None:
            if extra is None:
                raise TypeError("MissingExtraError needs an extra or a command")
            command = install_command(extra)
        self.extra = extra
        self.command = command
        self.package = package
        super().__init__(self._message(what))

    def _message(self, what: str) -> str:
        if self.extra is None:
            return f"{what}; install with: {self.command}"
        package = f"the '{self.package}' package of " if self.package else ""
        return f"{what} needs {package}the optional extra '{self.extra}': {self.command}"

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuild from the attributes, not from ``args`` (which hold the finished message): an error
        # crossing a process boundary (a grading worker, a multiprocessing pool) keeps its fields.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[MissingExtraError], args: tuple[object, ...], state: dict[str, object]) -> MissingExtraError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
