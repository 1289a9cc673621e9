"""Answer normalisation so that equivalent answers vote together in self-consistency."""

from __future__ import annotations

import re
from fractions import Fraction

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_TEXT_RE = re.compile(r"\\text\s*\{([^{}]*)\}")
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(-?\d+)\s*\}")
_NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def _unbox(text: str) -> str:
    match = None
    for match in _BOXED_RE.finditer(text):  # noqa: B007 - the last box is the answer
        pass
    if match is None:
        return text
    depth, start = 1, match.end()
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return text[start:]


def normalize_answer(answer: str) -> str:
    """Canonical form of an answer: unboxed, lower-case, no ``$``/trailing dot, numbers canonical.

    ``\\boxed{1,000}``, ``1000.0`` and ``$1000$`` all become ``1000``; ``\\frac{1}{2}`` and ``0.5``
    become ``1/2``. Non-numeric answers are compared case- and space-insensitively.

    Args:
        answer: An answer as a model wrote it.

    Returns:
        The canonical form (equal forms mean the same answer).
    """
    text = _unbox(answer.strip())
    text = _TEXT_RE.sub(r"\1", text)
    text = text.replace("$", "").replace("\\!", "").replace("\\,", "").strip().rstrip(".").strip()
    frac = _FRAC_RE.fullmatch(text)
    candidate = f"{frac.group(1)}/{frac.group(2)}" if frac else text.replace(",", "")
    try:
        value = Fraction(candidate)
    except (ValueError, ZeroDivisionError):
        value = None
    if value is not None and len(candidate) < 64:
        return str(value)
    return " ".join(text.lower().split())
