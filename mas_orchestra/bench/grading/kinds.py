"""The grading kinds and the public API: :func:`grade`, :func:`score`, :func:`agrade`."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from typing import Any

from agents.errors import MissingExtraError
from mas_orchestra.bench.grading.answers import (
    exact_match,
    extract_boxed,
    judge_messages,
    math_key,
    mcq_match,
    mv_gold,
    mv_pred,
    parse_judge_reply,
    token_f1,
)
from mas_orchestra.bench.grading.bounded import verify_bounded

__all__ = ["F1_PASS", "VALID_KINDS", "Truth", "agrade", "default_grade_timeout", "grade", "score"]

VALID_KINDS: tuple[str, ...] = ("math", "exact", "f1", "mcq", "judge")
F1_PASS = 0.8


def default_grade_timeout() -> float:
    """Seconds Math-Verify may take on one answer when the caller gives none: ``RunSettings.grade_timeout``'s
    default (read from the field, imported here only when needed: ``mas-orchestra --help`` loads no pydantic)."""
    from mas_orchestra.settings import RunSettings

    return float(RunSettings.model_fields["grade_timeout"].default)


Truth = str | Sequence[str]


def _pairs_for(prediction: str, truths: list[str]) -> list[tuple[str, bool]] | None:
    """(prediction part, is_boxed) per truth, or None when a multi-answer prediction's box count is wrong."""
    if len(truths) == 1:
        return [(prediction, bool(extract_boxed(prediction)))]
    boxes = _boxes_for_multi_answer(prediction, truths)
    return None if boxes is None else [(b, True) for b in boxes]


def _boxes_for_multi_answer(prediction: str, truths: list[str]) -> list[str] | None:
    """The prediction's boxes when there is exactly one per truth, else None.

    The original grades a multi-answer (``<<horizon>>``) row as wrong unless the response holds exactly as many
    ``\\boxed{}`` as there are answers: a response that boxes an intermediate result as well, or one answer
    twice, fails even if its last boxes are right. We grade the same way, so scores compare with the paper's.
    """
    boxes = extract_boxed(prediction)
    return boxes if len(boxes) == len(truths) else None


def _grade_math(prediction: str, truths: list[str], timeout: float) -> bool:
    parts = _pairs_for(prediction, truths)
    if parts is None:
        return False
    pending: list[list[str]] = []
    for (pred, boxed), gold in zip(parts, truths, strict=True):
        if math_key(pred) and math_key(pred) == math_key(gold):
            continue  # cheap path: no sympy needed
        pending.append([mv_gold(gold), mv_pred(pred, boxed)])
    if not pending:
        return True
    if importlib.util.find_spec("math_verify") is None:
        raise _missing_math_verify()
    try:
        return verify_bounded(pending, timeout)
    except ImportError as exc:  # thread mode imports math_verify in this process
        raise _missing_math_verify() from exc


def _missing_math_verify() -> MissingExtraError:
    """The typed missing-extra error (an ImportError) naming ``pip install 'mas-orchestra[grading]'``."""
    return MissingExtraError("kind='math' grading (Math-Verify)", "grading", "math-verify")


def _check(truth: Truth, kind: str) -> list[str]:
    if kind not in VALID_KINDS:
        raise ValueError(f"unknown grading kind {kind!r}; valid kinds: {', '.join(VALID_KINDS)}")
    truths = [truth] if isinstance(truth, str) else list(truth)
    if not truths or not all(isinstance(t, str) for t in truths):
        raise ValueError("truth must be a string or a non-empty list of strings")
    return truths


def _per_part(prediction: str, truths: list[str]) -> list[tuple[str, str]] | None:
    """(prediction part, truth) pairs for the non-math kinds; None if the box count is wrong."""
    if len(truths) == 1:
        return [(prediction, truths[0])]
    boxes = _boxes_for_multi_answer(prediction, truths)
    return None if boxes is None else list(zip(boxes, truths, strict=True))


def grade(
    prediction: str,
    truth: Truth,
    kind: str = "math",
    *,
    question: str | None = None,
    judge: Any = None,
    timeout: float | None = None,
) -> bool:
    """Whether ``prediction`` answers correctly; see the module docstring for each kind.

    Args:
        prediction: The system's answer.
        truth: One answer or, for multi-answer tasks, a list: the prediction must hold exactly ``len(truth)``
            boxes, matching the answers in order (the original's rule for ``<<horizon>>`` rows).
        kind: ``math``, ``exact``, ``f1``, ``mcq`` or ``judge``.
        question: The question (required for ``kind="judge"``).
        judge: The judge chat model (required for ``kind="judge"``); errors it raises propagate (an API
            failure is not a wrong answer).
        timeout: Seconds Math-Verify may take (not counting a worker's one-off start-up; ``None``:
            :func:`default_grade_timeout`); a check that runs out
            of time grades False.

    Returns:
        Whether the prediction is correct.

    Raises:
        ValueError: An unknown kind, an empty truth, or an mcq truth without a letter.
        ImportError: ``kind="math"`` needs Math-Verify and it is missing (``pip install
            'mas-orchestra[grading]'``).
    """
    truths = _check(truth, kind)
    prediction = "" if prediction is None else str(prediction)
    if kind == "math":
        return _grade_math(prediction, truths, default_grade_timeout() if timeout is None else timeout)
    if kind == "judge":
        if question is None or judge is None:
            raise ValueError("kind='judge' needs question= and judge=")
        from agents.base import message_text

        return parse_judge_reply(message_text(judge.invoke(judge_messages(question, prediction, truths))))
    parts = _per_part(prediction, truths)
    if parts is None:
        return False
    if kind == "exact":
        return all(exact_match(p, t) for p, t in parts)
    if kind == "f1":
        return all(exact_match(p, t) or token_f1(p, t) >= F1_PASS for p, t in parts)
    return all(mcq_match(p, t) for p, t in parts)


def score(
    prediction: str,
    truth: Truth,
    kind: str = "f1",
    *,
    question: str | None = None,
    judge: Any = None,
    timeout: float | None = None,
) -> float:
    """A number in [0, 1]: token F1 for ``kind="f1"``, else 1.0 if :func:`grade` says correct and 0.0 otherwise.

    Args:
        prediction: The system's answer.
        truth: One answer, or a list for a multi-answer task (F1 is then the mean over the answers, 0 unless
            there is exactly one box per answer).
        kind: A grading kind (see :func:`grade`).
        question: The question (``kind="judge"``).
        judge: The judge chat model (``kind="judge"``).
        timeout: Seconds Math-Verify may take (``None``: :func:`default_grade_timeout`).

    Returns:
        The score.

    Raises:
        ValueError: As :func:`grade` raises it.
    """
    if kind == "f1":
        truths = _check(truth, kind)
        parts = _per_part("" if prediction is None else str(prediction), truths)
        if parts is None:
            return 0.0
        return sum(token_f1(p, t) for p, t in parts) / len(parts)
    return float(grade(prediction, truth, kind, question=question, judge=judge, timeout=timeout))


async def agrade(
    prediction: str,
    truth: Truth,
    kind: str = "math",
    *,
    question: str | None = None,
    judge: Any = None,
    timeout: float | None = None,
) -> bool:
    """Async :func:`grade`: the judge is awaited through ``ainvoke`` (if it has one).

    Other kinds run :func:`grade` in a worker thread, so the event loop is never blocked by Math-Verify.

    Args:
        prediction: The system's answer.
        truth: One answer, or a list for a multi-answer task.
        kind: A grading kind (see :func:`grade`).
        question: The question (``kind="judge"``).
        judge: The judge chat model (``kind="judge"``).
        timeout: Seconds Math-Verify may take (``None``: :func:`default_grade_timeout`).

    Returns:
        Whether the prediction is correct.

    Raises:
        ValueError: As :func:`grade` raises it, or the judge kind without ``question`` and ``judge``.
    """
    if kind == "judge":
        truths = _check(truth, kind)
        if question is None or judge is None:
            raise ValueError("kind='judge' needs question= and judge=")
        from agents.base import message_text

        messages = judge_messages(question, "" if prediction is None else str(prediction), truths)
        if hasattr(judge, "ainvoke"):
            reply = await judge.ainvoke(messages)
        else:
            reply = await asyncio.to_thread(judge.invoke, messages)
        return parse_judge_reply(message_text(reply))
    return await asyncio.to_thread(
        grade, prediction, truth, kind, question=question, judge=judge, timeout=timeout
    )
