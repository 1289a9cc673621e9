"""Reading answers: the boxed answer, math keys, SQuAD/HotpotQA normalisation, the chosen letter, a judge's verdict.

Pure string work (no Math-Verify, no model calls); :mod:`mas_orchestra.bench.grading.kinds` decides with it.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache
from pathlib import Path

__all__ = [
    "exact_match",
    "extract_boxed",
    "extract_choice",
    "judge_messages",
    "math_key",
    "mcq_match",
    "mv_gold",
    "mv_pred",
    "normalize_answer",
    "parse_judge_reply",
    "token_f1",
]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


_BRACE = re.compile(r"\\[{}]|[{}]")


def extract_boxed(text: str) -> list[str]:
    """Return the contents of every top-level ``\\boxed{...}`` / ``\\fbox{...}`` in ``text``, in order.

    Nested braces are matched; escaped braces (``\\{``, ``\\}``) are content, not structure. A box that
    is never closed is ignored; a box inside another box is part of the outer one's content.

    Args:
        text: A model reply.

    Returns:
        The boxes' contents.
    """
    opens = {m.end() - 1 for m in _BOX_OPEN.finditer(text)}
    if not opens:
        return []
    # One pass over the braces with a stack: linear even for adversarial input like "\boxed{" * 10**4,
    # where scanning forward from every opening would be quadratic.
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        tok = m.group()
        if len(tok) == 2:
            continue
        if tok == "{":
            stack.append(m.start())
        elif stack:
            start = stack.pop()
            if start in opens:
                spans.append((start, m.start()))
    spans.sort()
    out: list[str] = []
    last_end = -1
    for start, end in spans:
        if start > last_end:  # skip boxes nested in one already taken
            out.append(text[start + 1 : end])
            last_end = end
    return out


_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")


_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?")


_SPACING = re.compile(r"\\[,;:!> ]|\\q?quad\b|~")


_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def _math_clean(s: str) -> str:
    """The answer part of ``s`` (its last box, if any), lightly cleaned but still LaTeX for Math-Verify."""
    boxes = extract_boxed(s)
    if boxes:
        s = boxes[-1]
    s = s.strip()
    for left, right in _DELIMS:
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            s = s[len(left) : len(s) - len(right)].strip()
            break
    s = s.replace("\\$", "").rstrip(" .").strip()
    if _THOUSANDS.fullmatch(s):
        # Only a whole-number answer is de-comma'd: inside "(0,100)" the comma separates coordinates.
        s = s.replace("{,}", "").replace(",", "")
    return s


def math_key(s: str) -> str:
    """A string key for the cheap equality check; equal keys mean equal answers.

    Args:
        s: An answer (LaTeX or plain).

    Returns:
        The key.
    """
    s = _math_clean(s)
    for _ in range(5):  # \text{} may nest a few levels; bounded so adversarial input stays linear-ish
        new = _TEXT_CMD.sub(r"\1", s)
        if new == s:
            break
        s = new
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SPACING.sub("", s).replace("$", "")
    s = "".join(s.split()).rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace("{,}", "").replace(",", "")
    return s


def mv_gold(truth: str) -> str:
    """The gold answer boxed, so Math-Verify parses a bare ``25`` or ``\\frac{1}{2}`` as the answer itself.

    Args:
        truth: The gold answer.

    Returns:
        ``\\boxed{…}`` of its cleaned answer part.
    """
    # Boxed, so Math-Verify parses a bare "25" or "\frac{1}{2}" gold as the answer itself.
    return "\\boxed{" + _math_clean(truth) + "}"


def mv_pred(prediction: str, boxed: bool) -> str:
    """The prediction as Math-Verify reads it: boxed when ``boxed``, else as written.

    Args:
        prediction: The system's answer.
        boxed: Box its cleaned answer part.

    Returns:
        The text Math-Verify parses.
    """
    return "\\boxed{" + _math_clean(prediction) + "}" if boxed else prediction


_ARTICLES = re.compile(r"\b(a|an|the)\b")


_PUNCT = str.maketrans("", "", string.punctuation)


_ANSWER_PREFIX = re.compile(r"^\s*(?:\*\*)?\s*(?:final\s+)?answer\s*(?:\*\*)?\s*:\s*(?:\*\*)?", re.IGNORECASE)


_SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(s: str) -> str:
    """SQuAD/HotpotQA normalisation: lower-case, drop punctuation and articles, collapse whitespace.

    Args:
        s: An answer.

    Returns:
        The normalised text.
    """
    s = s.lower().translate(_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _qa_text(s: str) -> str:
    """Unwrap a final ``\\boxed{}`` and a leading "Answer:" so a formatted reply is graded on its answer."""
    boxes = extract_boxed(s)
    if boxes:
        s = boxes[-1]
    s = _TEXT_CMD.sub(r"\1", s)
    return _ANSWER_PREFIX.sub("", s, count=1)


def token_f1(prediction: str, truth: str) -> float:
    """SQuAD/HotpotQA token F1 of the normalised strings (yes/no/noanswer must match exactly).

    Args:
        prediction: The system's answer.
        truth: The gold answer.

    Returns:
        F1 in [0, 1].
    """
    pred = normalize_answer(_qa_text(prediction))
    gold = normalize_answer(_qa_text(truth))
    # As in HotpotQA's official evaluation: yes/no/noanswer must match exactly, token overlap is no credit.
    if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
        return 0.0
    pred_toks, gold_toks = pred.split(), gold.split()
    if not pred_toks or not gold_toks:
        # SQuAD v2 convention: two empty answers agree, one empty answer scores 0.
        return float(pred_toks == gold_toks)
    same = sum((Counter(pred_toks) & Counter(gold_toks)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, truth: str) -> bool:
    """Whether the normalised prediction equals the normalised truth (SQuAD/HotpotQA EM).

    Args:
        prediction: The system's answer.
        truth: The gold answer.

    Returns:
        True on an exact match.
    """
    return normalize_answer(_qa_text(prediction)) == normalize_answer(_qa_text(truth))


_MCQ_SOLO = re.compile(r"^\s*[(\[]?\s*([A-Ea-e])\s*[)\]]?\s*[.:]?\s*$")


_MCQ_LEAD = re.compile(r"^\s*[(\[]?([A-Ea-e])(?:[)\]]|[.:](?:\s|$))")


_MCQ_ANSWER_PAREN = re.compile(
    r"answer\s*(?:is|:)?\s*(?:option\s*)?[:\-]?\s*[(\[]([A-Ea-e])[)\]]", re.IGNORECASE
)


_MCQ_ANSWER_BARE = re.compile(r"(?i:answer\s*(?:is|:)?\s*(?:option\s*)?[:\-]?)\s*\**([A-E])\b(?![\w'-])")


_MCQ_LINE = re.compile(r"^\s*[(\[]([A-Ea-e])[)\]]|^\s*([A-E])[).:](?:\s|$)", re.MULTILINE)


def extract_choice(text: str) -> str | None:
    """The multiple-choice letter (upper case, A-E) a text chooses, or None.

    Looked for in this order: the last ``\\boxed{}`` (``\\boxed{C}``, ``\\boxed{(c)}``,
    ``\\boxed{\\text{C}}``); the last "answer is (C)" / "Answer: C" (a bare letter must be upper case, so
    "the answer is a dog" is not "A"); a text that is only a letter ("c", "(C).", "C)"); a text starting
    with "C)" / "(C)" / "C." ; the last line starting so.

    Args:
        text: A model reply or a truth.

    Returns:
        The letter, or ``None``.
    """
    boxes = extract_boxed(text)
    if boxes:
        inner = _TEXT_CMD.sub(r"\1", boxes[-1])
        m = _MCQ_SOLO.match(inner) or _MCQ_LEAD.match(inner)
        if m:
            return m.group(1).upper()
    found: list[tuple[int, str]] = [(m.start(), m.group(1)) for m in _MCQ_ANSWER_PAREN.finditer(text)]
    found += [(m.start(), m.group(1)) for m in _MCQ_ANSWER_BARE.finditer(text)]
    if found:
        return max(found)[1].upper()
    m = _MCQ_SOLO.match(text) or _MCQ_LEAD.match(text)
    if m:
        return m.group(1).upper()
    lines = [m.group(1) or m.group(2) for m in _MCQ_LINE.finditer(text)]
    return lines[-1].upper() if lines else None


def mcq_match(prediction: str, truth: str) -> bool:
    """Whether the prediction names the truth's choice letter (A-E).

    Args:
        prediction: The system's answer.
        truth: The gold answer, naming a letter.

    Returns:
        True when the letters agree.

    Raises:
        ValueError: The truth names no letter.
    """
    gold = extract_choice(truth)
    if gold is None:
        raise ValueError(f"mcq truth must name a letter A-E, got {truth!r}")
    return extract_choice(prediction) == gold


_JUDGE_PROMPT_PATH = Path(__file__).resolve().parent / "judge.txt"


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


@lru_cache(maxsize=1)
def _judge_template() -> string.Template:
    return string.Template(_JUDGE_PROMPT_PATH.read_text(encoding="utf-8"))


def judge_messages(question: str, response: str, truths: list[str]) -> list[dict[str, str]]:
    """The judge model's chat messages for grading ``response`` against the truths.

    Args:
        question: The question.
        response: The system's answer.
        truths: The gold answer(s).

    Returns:
        One user message asking for yes or no.
    """
    answer = truths[0] if len(truths) == 1 else "\n".join(f"{i}. {t}" for i, t in enumerate(truths, 1))
    prompt = _judge_template().safe_substitute(question=question, response=response, answer=answer)
    return [{"role": "user", "content": prompt}]


def parse_judge_reply(text: str) -> bool:
    """True iff the first "yes"/"no" word of the reply (after any ``<think>`` block) is "yes".

    Args:
        text: The judge's reply.

    Returns:
        The verdict.
    """
    m = _YES_NO.search(_THINK.sub(" ", text))
    return m is not None and m.group(1).lower() == "yes"
