"""Count the public functions, methods and classes whose docstrings document their parameters (Google style).

    python scripts/docstring_coverage.py [--list] [PACKAGE ...]      (needs the docs extra: griffe)

An object counts when it is public (no ``_`` in its module path or name; methods of public classes), defined in
our packages (not an import), and takes at least one parameter besides ``self``/``cls``. It is *documented*
when its docstring's ``Args:`` section names every parameter (``*args``/``**kwargs`` by their bare names or
with their stars). Classes are judged by their ``__init__`` (the reference merges it into the class); the
fields of pydantic models and dataclasses are attributes, not parameters, and are not counted.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agents", "mas_orchestra", "graphs", "training")


def _public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


def _callables(obj) -> Iterator:
    for member in obj.members.values():
        if member.is_alias or not _public(member.name):
            continue
        if member.is_module:
            if member.name == "frontend":
                continue
            yield from _callables(member)
        elif member.is_class:
            yield member
            yield from (m for m in _callables(member) if m.is_function)
        elif member.is_function:
            yield member


def _parameters(obj) -> list[str]:
    function = obj.members.get("__init__") if obj.is_class else obj
    if function is None or function.is_alias or not function.is_function:
        return []
    return [p.name for p in function.parameters if p.name not in ("self", "cls")]


def _documented_names(obj) -> set[str] | None:
    """Names in the Args: section of the object's docstring (the class's or its ``__init__``'s); None: no section."""
    from griffe import DocstringSectionKind

    sources = [obj]
    if obj.is_class and "__init__" in obj.members and not obj.members["__init__"].is_alias:
        sources.append(obj.members["__init__"])
    names: set[str] | None = None
    if obj.is_class and "dataclass" in obj.labels:
        # A dataclass's parameters are its fields: documented in an Attributes: section, by an attribute
        # docstring, or (our training config's convention) by the help text in the field's metadata.
        fields = {a.name for a in obj.attributes.values()
                  if not a.is_alias and (a.docstring is not None or "metadata=" in str(a.value))}
        names = fields or None
    for source in sources:
        if source.docstring is None:
            continue
        for section in source.docstring.parse("google"):
            if section.kind is DocstringSectionKind.parameters or (
                section.kind is DocstringSectionKind.attributes and "dataclass" in obj.labels
            ):
                names = (names or set()) | {p.name.lstrip("*") for p in section.value}
    return names


def measure(packages: tuple[str, ...]) -> tuple[list[str], list[str], int]:
    import griffe

    logging.getLogger("griffe").setLevel(logging.ERROR)  # missing-annotation notes are not what we count here
    documented, undocumented, with_section = [], [], 0
    previous = os.getcwd()
    os.chdir(REPO)  # griffe looks in the working directory before search_paths; measure this checkout
    try:
        modules = [griffe.load(package, search_paths=[str(REPO)], docstring_parser="google") for package in packages]
    finally:
        os.chdir(previous)
    for module in modules:
        for obj in _callables(module):
            params = _parameters(obj)
            if not params:
                continue
            names = _documented_names(obj)
            with_section += names is not None
            if names is not None and all(p.lstrip("*") in names for p in params):
                documented.append(obj.path)
            else:
                undocumented.append(obj.path)
    return documented, undocumented, with_section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", default=list(PACKAGES))
    parser.add_argument("--list", action="store_true", help="list the objects without documented parameters")
    args = parser.parse_args()
    documented, undocumented, with_section = measure(tuple(args.packages))
    total = len(documented) + len(undocumented)
    print(f"public callables with parameters: {total}; with an Args: section: {with_section}; "
          f"every parameter documented: {len(documented)} ({100 * len(documented) / max(total, 1):.1f} %)")
    if args.list:
        print("\n".join(sorted(undocumented)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
