"""Prompt templates of the blocks, kept as data files beside this module."""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template

__all__ = ["render", "template"]


@cache
def template(name: str) -> Template:
    """Load the template ``<name>.txt`` shipped with this package.

    Args:
        name: The template's name (``<name>.txt``).

    Returns:
        The ``string.Template``.
    """
    text = resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return Template(text)


def render(name: str, **values: str) -> str:
    """Fill template ``name``; ``$`` signs inside the values are kept as they are (data, not syntax).

    Args:
        name: The template's name (``<name>.txt``).
        **values: The placeholders' values.

    Returns:
        The filled text.
    """
    return template(name).substitute(**values).strip()
