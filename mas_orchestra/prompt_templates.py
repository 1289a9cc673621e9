"""Orchestrator prompt templates: a folder of message files with placeholders, chosen per run.

A template folder holds three parts, one chat message each, sent in this order (the original system's
layout: a system message, a user message with the instructions and the question, a second user message
listing the agents):

- ``system.txt`` — the system message;
- ``user.txt`` — the first user message;
- ``second_user.txt`` — the second user message.

A part that is empty (only whitespace) sends no message; a missing file is an error. A folder may instead
hold one sub-folder per degree of MAS (``high/``, ``low/``), each with the three parts; the run's DoM picks
one. Our own wording ships in ``mas_orchestra/prompts/<dom>/``; ``scripts/convert_original_prompts.py``
writes such a folder from a checkout of the original repository, so released checkpoints can be run on the
prompts they were trained on.

Placeholders are ``{name}`` with a name from :data:`PLACEHOLDERS`; ``{{name}}`` writes a literal ``{name}``;
any other brace (JSON, ``${AGENT_ID}`` references) is text. An unknown ``{name}`` is a
:class:`PromptTemplateError` naming the file and the placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from mas_orchestra.errors import MasOrchestraError
from mas_orchestra.spec import Dom, check_dom

__all__ = [
    "ARCHIVE_ORDER",
    "PARTS",
    "PLACEHOLDERS",
    "PromptTemplate",
    "PromptTemplateError",
    "load_template",
]

#: The parts of a template, in the order their messages are sent: (file name, chat role).
PARTS: tuple[tuple[str, str], ...] = (("system.txt", "system"), ("user.txt", "user"), ("second_user.txt", "user"))

#: The original's agent archive order (COT, COT_SC, Reflexion, LLM_debate, WebSearch) as our kind names;
#: kinds registered by users follow in registration order.
ARCHIVE_ORDER: tuple[str, ...] = ("cot", "sc", "reflexion", "debate", "search")

#: Every placeholder a template may use, and what fills it.
PLACEHOLDERS: dict[str, str] = {
    "question": "the task",
    "agents": "our description of each offered agent (block name, description, parameters with bounds)",
    "agent_names": "the offered agents' block names, comma-separated",
    "example": "worked example orchestrations in the format of the DoM, naming offered agents only (high DoM: "
               "a two-agent chain wired with ${A1}, then a single agent)",
    "example_chain": "high DoM: only the two-agent chain example; low DoM: empty",
    "example_chain_3": "high DoM: a three-agent chain example (each agent reads the previous one's result); "
                       "low DoM: empty",
    "example_single": "only the single-agent example of the DoM",
    "archive": "the offered agents as a JSON list in archive order (description, name, required_arguments)",
    "agent_cot": "CoTAgent as one JSON object (empty when not offered)",
    "agent_sc": "SCAgent as one JSON object (empty when not offered)",
    "agent_reflexion": "ReflexionAgent as one JSON object (empty when not offered)",
    "agent_debate": "DebateAgent as one JSON object (empty when not offered)",
    "agent_search": "WebSearchAgent as one JSON object (empty when not offered)",
    "model": "the sub-agents' model name",
}

# {{name}} (a literal {name}) or {name} (a placeholder); "${" is a spec reference, never a placeholder.
_PLACEHOLDER_RE = re.compile(r"(?<!\$)\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BUILTIN = "mas_orchestra.prompts"


class PromptTemplateError(MasOrchestraError, ValueError):
    """A prompt template folder that cannot be used: a missing part, an unknown placeholder, no ``{question}``.

    Args:
        path: The folder or file.
        problem: What is wrong.
        placeholder: The offending placeholder, when there is one.

    Attributes:
        path: The folder or file.
        placeholder: The offending placeholder, or ``None``.
    """

    def __init__(self, path: str, problem: str, *, placeholder: str | None = None) -> None:
        super().__init__(f"prompt template {path}: {problem}")
        self.path = path
        self.placeholder = placeholder


@dataclass(frozen=True)
class PromptTemplate:
    """The parts of one template and where they were read from.

    Attributes:
        source: The folder (or ``<builtin>/<dom>``) the parts were read from.
        parts: ``(role, file name, text)`` of each chat message, in order.
    """

    source: str
    parts: tuple[tuple[str, str, str], ...]

    def placeholders(self) -> set[str]:
        """The placeholder names the template uses."""
        return {m.group(2) for _, _, text in self.parts for m in _PLACEHOLDER_RE.finditer(text) if m.group(2)}

    def render(self, values: Mapping[str, str] | Callable[[str], str]) -> list[dict[str, str]]:
        """The chat messages, placeholders filled; empty parts send nothing.

        Args:
            values: A mapping, or a function of the placeholder name (so costly values are built only when
                used).

        Returns:
            ``{"role", "content"}`` dicts, in order.
        """
        get = values.__getitem__ if isinstance(values, Mapping) else values
        filled: dict[str, str] = {}

        def fill(match: re.Match[str]) -> str:
            if match.group(1):
                return "{" + match.group(1) + "}"
            name = match.group(2)
            if name not in filled:
                filled[name] = get(name)
            return filled[name]

        messages = []
        for role, _, text in self.parts:
            if text.strip():
                messages.append({"role": role, "content": _PLACEHOLDER_RE.sub(fill, text)})
        return messages


def _check(template: PromptTemplate) -> PromptTemplate:
    for _, file_name, text in template.parts:
        for match in _PLACEHOLDER_RE.finditer(text):
            name = match.group(2)
            if name and name not in PLACEHOLDERS:
                line = text.count("\n", 0, match.start()) + 1
                raise PromptTemplateError(
                    f"{template.source}/{file_name}",
                    f"unknown placeholder {{{name}}} at line {line}; known: "
                    + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS) + " (write {{" + name + "}} for a literal)",
                    placeholder=name,
                )
    if "question" not in template.placeholders():
        raise PromptTemplateError(
            template.source, "no part uses {question}, so the orchestrator would never see the task; add it",
            placeholder="question",
        )
    return template


def _read_folder(folder: Path) -> PromptTemplate:
    if not folder.is_dir():
        raise PromptTemplateError(str(folder), "not a folder; give a folder with " + ", ".join(f for f, _ in PARTS))
    missing = [f for f, _ in PARTS if not (folder / f).is_file()]
    if missing:
        raise PromptTemplateError(
            str(folder), f"missing part {', '.join(missing)}; a template has {', '.join(f for f, _ in PARTS)} "
            "(an empty file sends no message)",
        )
    parts = []
    for file_name, role in PARTS:
        try:
            text = (folder / file_name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PromptTemplateError(str(folder / file_name), f"cannot be read: {exc}") from None
        parts.append((role, file_name, text))
    return _check(PromptTemplate(str(folder), tuple(parts)))


@cache
def _builtin(dom: Dom) -> PromptTemplate:
    root = resources.files("mas_orchestra").joinpath("prompts", dom)
    parts = tuple((role, f, root.joinpath(f).read_text("utf-8")) for f, role in PARTS)
    return _check(PromptTemplate(f"{_BUILTIN}/{dom}", parts))


def load_template(source: str | Path | PromptTemplate | None, dom: Dom = "high") -> PromptTemplate:
    """The template for ``dom``.

    Args:
        source: ``None`` (ours), a :class:`PromptTemplate`, or a folder path (its ``<dom>/`` sub-folder when
            it has one).
        dom: ``high`` or ``low``.

    Returns:
        The template.

    Raises:
        PromptTemplateError: A folder that cannot be used (a missing part, an unknown placeholder, no
            ``{question}``).
        TypeError: ``source`` is neither a path nor a template.
    """
    check_dom(dom)
    if source is None:
        return _builtin(dom)
    if isinstance(source, PromptTemplate):
        return _check(source)
    if not isinstance(source, (str, Path)):
        raise TypeError(f"prompt must be a folder path or a PromptTemplate, got {type(source).__name__}")
    folder = Path(source).expanduser()
    return _read_folder(folder / dom if (folder / dom).is_dir() else folder)
