"""The bounds and the lexical rules of a spec, shared by the model, the validator and the text formats.

Kept in a module of its own so that the format readers (which turn text into plain data) and the model
(which validates that data) can both use them without importing each other.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "DOMS",
    "ID_RE",
    "MARKUP_RE",
    "MAX_DESCRIPTION_CHARS",
    "MAX_INPUT_CHARS",
    "MAX_NODES",
    "MAX_TEXT_CHARS",
    "MAX_THINKING_CHARS",
    "PLACEHOLDER_RE",
    "RESERVED_IDS",
    "THINKING_CLOSE_RE",
    "Dom",
    "check_dom",
    "references",
]

MAX_NODES = 256
MAX_INPUT_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 2_000
MAX_THINKING_CHARS = 200_000
#: The longest orchestration (or JSON spec) text any parser reads (a 10,000-block degenerate loop fits).
MAX_TEXT_CHARS = 4_000_000
ID_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
PLACEHOLDER_RE = re.compile(r"\$\{\s*([^{}\s]*)\s*\}")
# State keys of the compiled graph; LangGraph forbids node names equal to them.
RESERVED_IDS = frozenset({"question", "results", "final_answer", "direct_answer"})
# Tags of the orchestration format; text fields may not contain them (they would not round-trip).
MARKUP_RE = re.compile(
    r"<\s*/?\s*(agent|agent_id|agent_name|agent_description|required_arguments|agent_input|"
    r"debate_roles|edge|from|to|agent_output_id|answer|thinking)\s*>",
    re.I,
)

# The one tag thinking may not contain: it would end the thinking early when the spec is written as text.
THINKING_CLOSE_RE = re.compile(r"<\s*/\s*thinking\s*>", re.I)


def references(text: str) -> list[str]:
    """The ids referenced as ``${id}`` in a text, in order of appearance.

    Args:
        text: The text (a node's input).
    """
    return [m.group(1) for m in PLACEHOLDER_RE.finditer(text)]


#: Degree of MAS: ``high`` (any DAG of agents) or ``low`` (answer directly or delegate to one agent).
Dom = Literal["high", "low"]
DOMS: tuple[Dom, ...] = ("high", "low")


def check_dom(dom: object) -> Dom:
    """``dom`` itself when it is a degree of MAS; otherwise the one ``ValueError`` every entry point raises.

    Args:
        dom: The value to check (``high`` or ``low``).
    """
    if dom not in DOMS:
        raise ValueError(f"dom must be 'high' or 'low', got {dom!r}")
    return dom  # type: ignore[return-value]
