"""Lazy package exports: a package's public names are imported on first use, not when the package is.

A command line that only parses arguments (``mas-orchestra --help``) imports the packages its modules live in;
their ``__init__`` would otherwise load LangChain, LangGraph and pydantic models it never uses. A package lists
``{module: [names]}`` once; ``from package import Name`` and ``package.Name`` work as before, and the module
defining a name stays its one import path.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for names defined in the listed modules.

    Args:
        package: The package's ``__name__``.
        exports: The names to import on first use, by the module that defines them.

    Raises:
        ValueError: A name is also the name of one of the listed modules.
    """
    where = {name: module for module, names in exports.items() for name in names}
    # Importing a submodule sets the package attribute of its name, which would hide a lazy name like it for good.
    clashes = sorted(name for name in where if name in {module.rsplit(".", 1)[-1] for module in exports})
    if clashes:
        raise ValueError(f"{package}: {', '.join(clashes)} named like a submodule; import them eagerly instead")

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted(set(where) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__
