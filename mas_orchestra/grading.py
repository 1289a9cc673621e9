"""Documented import path of answer grading: re-exports :mod:`mas_orchestra.bench.grading`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.bench.grading import (
    F1_PASS,
    VALID_KINDS,
    Truth,
    agrade,
    extract_boxed,
    extract_choice,
    grade,
    normalize_answer,
    parse_judge_reply,
    score,
)

__all__ = [
    "F1_PASS",
    "VALID_KINDS",
    "Truth",
    "agrade",
    "extract_boxed",
    "extract_choice",
    "grade",
    "normalize_answer",
    "parse_judge_reply",
    "score",
]
