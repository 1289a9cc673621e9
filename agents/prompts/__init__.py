"""Prompt templates of the blocks, kept as data files beside this module."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from string import Template

__all__ = ["REPLY_FORMAT_MARKER", "render", "template", "without_reply_format", "worked_examples"]

#: Where a block template's reply-format instructions (and their worked example) begin; they run to the end.
REPLY_FORMAT_MARKER = "Reply in exactly this format:"
# A complete reply written out in a template: ``<thinking>…</thinking>`` then ``<answer>…</answer>``, no ``$``.
_EXAMPLE_RE = re.compile(r"<thinking>([^<$]+)</thinking>\s*<answer>([^<$]+)</answer>")


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


@cache
def worked_examples() -> tuple[tuple[str, str], ...]:
    """The worked example replies written in the shipped templates, as ``(thinking, answer)`` pairs.

    The reply instructions show a concrete example instead of placeholder text; a reply that copies one of
    these examples verbatim has not answered its own task (see :func:`agents.echo.is_format_echo`).
    """
    found: list[tuple[str, str]] = []
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".txt"):
            for match in _EXAMPLE_RE.finditer(entry.read_text(encoding="utf-8")):
                pair = (match.group(1).strip(), match.group(2).strip())
                if pair not in found:
                    found.append(pair)
    return tuple(found)


def without_reply_format(prompt: str) -> str:
    """``prompt`` without its reply-format instructions (from :data:`REPLY_FORMAT_MARKER` to the end), for a call
    asked plainly; a prompt without them is returned as it is.

    Args:
        prompt: The rendered prompt.
    """
    head, marker, _ = prompt.rpartition(REPLY_FORMAT_MARKER)
    return head.rstrip() if marker else prompt
