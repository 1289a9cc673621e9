"""Answer grading: math equivalence, exact match / F1, multiple choice and an LLM judge.

The reward of an executed orchestration is ``grade(final_answer, ground_truth, kind)`` (DESIGN §6).

Kinds (``VALID_KINDS``):

* ``"math"``: cheap string normalisation first (``\\boxed{}``, ``$``, ``\\text{}``, trailing period,
  thousands separators, whitespace); if the normalised strings differ, Hugging Face Math-Verify decides
  (symbolic/numeric equivalence, so ``\\boxed{\\frac12}`` matches ``0.5``). The prediction's answer is its
  LAST ``\\boxed{}``; without one, the whole text is handed to Math-Verify, whose own extraction finds
  "The answer is 42".
* ``"exact"``: SQuAD/HotpotQA normalised exact match.
* ``"f1"``: token F1 (``score``). ``grade(kind="f1")`` is True when the normalised strings are equal OR
  F1 >= ``F1_PASS`` (0.8): a partial overlap is not a correct answer, a near-verbatim one is.
* ``"mcq"``: the chosen letter A-E (``\\boxed{C}``, "the answer is (C)", "C) ...", a bare "c") compared
  case-insensitively with the truth's letter.
* ``"judge"``: an LLM (any object with ``invoke(messages)`` returning a message with ``.content``, e.g. a
  LangChain chat model) answers yes/no on (question, response, correct answer).

Multi-answer truths (a list of strings, MASBench horizon/parallel): the prediction must contain exactly
``len(truth)`` ``\\boxed{}``, compared with the truths in order, all correct (fewer or more boxes -> False),
which is the original's rule for its ``<<horizon>>`` rows. A one-element list is graded like a plain string.
For ``"judge"`` the answers are shown to the judge as a numbered list.

Modules: :mod:`~mas_orchestra.bench.grading.kinds` (the kinds and :func:`grade`/:func:`score`/:func:`agrade`),
:mod:`~mas_orchestra.bench.grading.answers` (answer extraction and normalisation, the judge prompt) and
:mod:`~mas_orchestra.bench.grading.bounded` (Math-Verify in killable worker processes; importing this
package never imports ``math_verify``).
"""

from mas_orchestra.bench.grading.answers import extract_boxed, extract_choice, normalize_answer, parse_judge_reply
from mas_orchestra.bench.grading.kinds import F1_PASS, VALID_KINDS, Truth, agrade, default_grade_timeout, grade, score

__all__ = [
    "F1_PASS",
    "VALID_KINDS",
    "Truth",
    "agrade",
    "default_grade_timeout",
    "extract_boxed",
    "extract_choice",
    "grade",
    "normalize_answer",
    "parse_judge_reply",
    "score",
]
