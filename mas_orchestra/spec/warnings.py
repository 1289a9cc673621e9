"""Typed warnings: every leniency the readers and the validator apply to real orchestration text.

Released orchestrators write more than the format asks for (commentary after the plan, a second copy of
it, tags mentioned while thinking, ``""`` for an empty input …). The reader keeps the plan and records each
thing it tolerated as a :class:`SpecWarning` on :attr:`GraphSpec.warnings
<mas_orchestra.spec.model.GraphSpec.warnings>`; ``strict=True`` turns them into a
:class:`~mas_orchestra.errors.SpecError` instead (:func:`raise_if_strict`). Nothing here changes what the
graph means: leniencies that would (unknown agents, dangling edges, cycles, several sinks, ``${X}`` without
an edge path) stay errors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from mas_orchestra.errors import SpecError

__all__ = ["WARNING_KINDS", "SpecWarning", "WarningKind", "count_warnings", "line_of", "raise_if_strict"]

#: What a warning is about (one value per leniency; the fidelity table, docs/concepts/fidelity.md, has a row for each).
WarningKind = Literal[
    "ignored_after_plan",   # commentary, a second copy, repeated blocks or answers after the first plan
    "answer_ignored",       # an <answer> next to agents (high DoM) or disagreeing with the agent's output id (low)
    "markup_in_thinking",   # tags mentioned inside <thinking> are prose: they create nothing
    "quoted_empty_input",   # <agent_input>""</agent_input> (or '') read as empty = the whole question
    "unpaired_edge",        # an extra <from> or <to> without a partner, dropped
    "duplicate_edge",       # the same edge listed twice, kept once
    "edges_ignored",        # <edge> blocks in low DoM (one agent cannot have edges)
    "missing_output_id",    # low DoM agent without <agent_output_id>: the id is a label only
    "unclosed_block",       # an <agent> block never closed (truncated text): read up to the next block / end
    "capped_param",         # a parameter above the sub-agent model's cap (mas_orchestra.caps), run at the cap
]
WARNING_KINDS: tuple[str, ...] = get_args(WarningKind)


class SpecWarning(BaseModel):
    """One leniency applied while reading a spec: what (``kind``), where (``location``) and a message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: WarningKind
    location: str = Field(..., description="Where in the text: 'line 12', 'agent #2', 'edge block 1' …")
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message} [{self.kind}]"


def line_of(text: str, pos: int) -> str:
    """``line N`` of character offset ``pos`` in ``text`` (1-based).

    Args:
        text: The text.
        pos: The character offset (a negative one counts as 0).
    """
    return f"line {text.count(chr(10), 0, max(0, pos)) + 1}"


def count_warnings(warnings: Iterable[SpecWarning]) -> dict[str, int]:
    """How many warnings of each kind (kinds with none are left out).

    Args:
        warnings: The spec's warnings.

    Returns:
        Kind → count.
    """
    return dict(Counter(w.kind for w in warnings))


def raise_if_strict(warnings: Iterable[SpecWarning], strict: bool) -> None:
    """With ``strict``, any warning is an error.

    Args:
        warnings: The spec's warnings.
        strict: Whether leniencies are refused.

    Raises:
        SpecError: ``strict`` and at least one warning (each listed, its kind in brackets).
    """
    found = list(warnings)
    if strict and found:
        raise SpecError([f"{w} (strict reading: fix the text or parse with strict=False)" for w in found])
