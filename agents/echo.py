"""Replies that repeat the reply format instead of answering (placeholder wording, a copied worked example)."""

from __future__ import annotations

import re

from agents.prompts import worked_examples

__all__ = ["FORMAT_PLACEHOLDERS", "is_format_echo"]


def _words(text: str) -> str:
    """Lower-case words and digits only, single-spaced: how an echo is compared with the format's wording."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


#: The placeholder wording reply formats used to carry between the tags (and close variants). A small model
#: copies whatever stands there, so an answer that is only this wording answers nothing. The shipped templates
#: now show worked examples instead (:func:`agents.prompts.worked_examples`).
FORMAT_PLACEHOLDERS: frozenset[str] = frozenset(_words(p) for p in (
    "your final answer only", "your final answer", "the correct final answer only", "the correct final answer",
    "final answer only", "final answer", "the final answer", "your answer", "answer",
    "your final answer is", "the final answer is", "the correct final answer is",
    "your step-by-step reasoning", "your improved step-by-step reasoning", "your reasoning",
    "your feedback on the attempt", "your evaluation of the arguments",
    "True if the attempt's answer is correct, otherwise False",
    "your reasoning, citing the result numbers you used", "your reasoning, using the tool results",
    "which results matter and why", "the condensed facts with their result numbers",
))


def is_format_echo(thinking: str, answer: str) -> bool:
    """Whether a parsed reply repeats the reply format instead of answering.

    True when the answer is blank, is the format's placeholder wording (:data:`FORMAT_PLACEHOLDERS`,
    compared case- and punctuation-insensitively), or when thinking and answer together are a verbatim copy of
    a worked example from the reply instructions (:func:`agents.prompts.worked_examples`). An answer that only
    equals an example's answer, with reasoning of its own, is not an echo: it may be right.

    Args:
        thinking: The reply's reasoning.
        answer: The reply's answer.
    """
    said = _words(answer)
    if not said or said in FORMAT_PLACEHOLDERS:
        return True
    reasoning = _words(thinking)
    return any(said == _words(ex_answer) and reasoning == _words(ex_thinking)
               for ex_thinking, ex_answer in worked_examples())
