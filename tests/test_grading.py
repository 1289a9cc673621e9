"""Tests for mas_orchestra.bench.grading: math equivalence, EM/F1, mcq, judge, time bounds, gold datasets."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mas_orchestra.bench.grading import agrade, answers, bounded, extract_boxed, extract_choice, grade, kinds, score

pytest.importorskip("math_verify")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
BOUNDED_PY = Path(bounded.__file__).resolve()  # the file grading workers load by path
log = logging.getLogger(__name__)


@pytest.fixture(scope="module", autouse=True)
def warm_worker():
    # Start the Math-Verify worker once, so timing assertions measure grading, not sympy's import.
    assert grade(r"\boxed{\frac12}", "0.5")


# ----------------------------------------------------------------------------------------- boxed


def test_extract_boxed_nested_and_fbox():
    text = r"first \boxed{\frac{1}{2}} then \fbox{3}, a set \boxed{\{1,2\}} and \boxed {x^{2}}"
    assert extract_boxed(text) == [r"\frac{1}{2}", "3", r"\{1,2\}", "x^{2}"]


def test_extract_boxed_outer_only_and_unclosed():
    assert extract_boxed(r"\boxed{a \boxed{b}} \boxed{c") == [r"a \boxed{b}"]
    assert extract_boxed(r"\boxed{ \boxed{7}") == ["7"]
    assert extract_boxed("no boxes here") == []


def test_extract_boxed_linear_on_adversarial_input():
    start = time.monotonic()
    assert extract_boxed("\\boxed{" * 20000) == []
    assert time.monotonic() - start < 2.0


# ------------------------------------------------------------------------------------------ math


@pytest.mark.parametrize(
    ("prediction", "truth"),
    [
        (r"\boxed{\frac12}", "0.5"),
        (r"\boxed{\frac12}", r"\frac{1}{2}"),
        (r"so the answer is $\boxed{0.5}$.", r"\frac{1}{2}"),
        (r"\boxed{25}", "25"),
        ("25", r"\boxed{25}"),
        ("1,000", "1000"),
        (r"\boxed{1,000}", "1000"),
        ("1000", "1{,}000"),
        ("The answer is 42.", "42"),
        ("$42$", "42"),
        (r"\boxed{\dfrac{3}{4}}", r"\frac34"),
        (r"\boxed{5\text{ cm}}", "5"),
        (r"\boxed{\$18}", "18"),
        (r"\boxed{x^2+1}", "1+x^2"),
        (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"(3,\frac{\pi}{2})"),
        (r"\boxed{\sqrt{4}}", "2"),
    ],
)
def test_math_equivalent(prediction, truth):
    assert grade(prediction, truth)


@pytest.mark.parametrize(
    ("prediction", "truth"),
    [
        (r"\boxed{24}", "25"),
        (r"\boxed{\frac13}", "0.5"),
        ("The answer is 41.", "42"),
        (r"\boxed{(0,100)}", "100"),
        ("", "3"),
        ("I don't know", "7"),
        # The LAST box is the answer, not an earlier one.
        (r"first \boxed{25}, on reflection \boxed{26}", "25"),
    ],
)
def test_math_wrong(prediction, truth):
    assert not grade(prediction, truth)


def test_cheap_path_needs_no_worker(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("math-verify should not run for string-equal answers")

    monkeypatch.setattr(kinds, "verify_bounded", boom)
    assert grade(r"The total is $\boxed{1,000}$.", "1000")
    assert grade(r"\boxed{\text{(C)}}", "(C)")


def test_multi_answer_in_order():
    assert grade(r"\boxed{3} and \boxed{5}", ["3", "5"])
    assert grade(r"\boxed{\frac{6}{2}} \boxed{5.0}", ["3", "5"])


def test_multi_answer_needs_exactly_one_box_per_answer():
    # The original's rule: a boxed intermediate result (or an answer boxed twice) makes the row wrong,
    # even when the last boxes are right.
    assert not grade(r"scratch \boxed{1}; answers \boxed{3} \boxed{5}", ["3", "5"])
    assert not grade(r"\boxed{3} \boxed{5} \boxed{5}", ["3", "5"])
    assert not grade(r"scratch \boxed{1}; answers \boxed{3} \boxed{5}", ["3", "5"], "exact")
    assert score(r"\boxed{x} \boxed{3} \boxed{5}", ["3", "5"], "f1") == 0.0
    assert score(r"\boxed{3} \boxed{5}", ["3", "5"], "f1") == 1.0


def test_multi_answer_out_of_order_or_missing():
    assert not grade(r"\boxed{5} \boxed{3}", ["3", "5"])
    assert not grade(r"\boxed{3}", ["3", "5"])
    assert not grade("3 and 5", ["3", "5"])
    assert not grade(r"\boxed{3} \boxed{6}", ["3", "5"])


def test_single_element_list_is_a_plain_answer():
    assert grade("The answer is 7", ["7"])


def test_import_does_not_import_math_verify():
    code = (
        "import importlib.util, sys\n"
        f"s = importlib.util.spec_from_file_location('g', {str(BOUNDED_PY)!r})\n"
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
        "assert 'math_verify' not in sys.modules and 'sympy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_math_verify_raises_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install 'mas-orchestra\[grading\]'"):
        grade(r"\boxed{\frac12}", "0.5")


@pytest.mark.parametrize(
    "prediction",
    [
        "(" * 10000 + ")" * 10000,
        r"\boxed{" + "(" * 10000 + ")" * 10000 + "}",
        "x" * 100_000,
        "\\frac{" * 20000,
        "\\sqrt{" * 5000 + "2" + "}" * 5000,
        # Python's big-int power holds the GIL: only a killable worker process can bound this one.
        r"\boxed{9^{9^{9^{9}}}}",
    ],
    ids=["parens", "boxed-parens", "100kB", "unclosed-frac", "deep-sqrt", "huge-power"],
)
def test_pathological_input_false_within_timeout(prediction):
    timeout = 1.5
    grade(r"\boxed{\frac{2}{4}}", "0.5")  # a worker killed by an earlier case is warm again
    start = time.monotonic()
    assert grade(prediction, "123456789", timeout=timeout) is False
    assert time.monotonic() - start < timeout + 1.0
    # The pool recovers: the next answer is graded normally.
    assert grade(r"\boxed{\frac{1}{4}}", "0.25")


def test_grading_from_worker_threads():
    results: dict[int, bool] = {}

    def work(i: int) -> None:
        results[i] = grade(rf"\boxed{{\frac{{{i}}}{{4}}}}", str(i / 4)) and not grade(
            rf"\boxed{{\frac{{{i}}}{{3}}}}", str(i / 4 + 1)
        )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == dict.fromkeys(range(1, 7), True)


def test_pathological_from_a_thread_is_bounded():
    out: dict[str, object] = {}
    grade(r"\boxed{\frac{2}{4}}", "0.5")  # warm

    def work() -> None:
        start = time.monotonic()
        out["ok"] = grade(r"\boxed{9^{9^{9^{9}}}}", "1", timeout=1.0)
        out["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    assert out["ok"] is False
    assert out["elapsed"] < 2.0  # timeout + 1 s


def test_grading_inside_running_event_loop():
    async def main() -> list[bool]:
        return [
            await asyncio.to_thread(grade, r"\boxed{\frac12}", "0.5"),
            await agrade(r"\boxed{\sqrt{9}}", "3"),
            await agrade(r"\boxed{4}", "3"),
            await agrade("Answer: Paris", "paris", "exact"),
        ]

    assert asyncio.run(main()) == [True, True, False, True]


def test_thread_backend(monkeypatch):
    monkeypatch.setattr(bounded, "_USE_THREADS", True)
    assert grade(r"\boxed{\frac12}", "0.5")
    assert not grade(r"\boxed{\frac13}", "0.5")


# ---------------------------------------------------------------------------------------- EM / F1


def test_exact_match_normalisation():
    assert grade("The Eiffel Tower", "eiffel tower", "exact")
    assert grade(r"\boxed{Paris.}", "paris", "exact")
    assert grade("Answer: an apple", "Apple", "exact")
    assert not grade("Paris, France", "Paris", "exact")


def test_f1_values_by_hand():
    # [barack, obama, was, president] vs [barack, obama]: P = 2/4, R = 2/2, F1 = 2/3.
    assert score("Barack Obama was president", "Barack Obama") == pytest.approx(2 / 3)
    # Articles drop out: [cat, sat, on, mat] vs [cat, on, mat]: P = 3/4, R = 1, F1 = 6/7.
    assert score("the cat sat on a mat", "cat on mat") == pytest.approx(6 / 7)
    # [paris, france] vs [paris] after unwrapping "Answer:": P = 1/2, R = 1, F1 = 2/3.
    assert score("Answer: Paris, France", "Paris") == pytest.approx(2 / 3)
    assert score("Eiffel Tower!", "the eiffel tower") == 1.0
    assert score("London", "Paris") == 0.0


def test_f1_yes_no_special_case():
    assert score("yes it is", "yes") == 0.0  # token overlap is no credit for yes/no
    assert score("no", "yes") == 0.0
    assert score("Yes.", "yes") == 1.0
    assert score("noanswer", "no answer") == 0.0


def test_f1_grade_threshold():
    assert not grade("Barack Obama was president", "Barack Obama", "f1")  # F1 = 0.67
    assert grade("the cat sat on a mat", "cat on mat", "f1")  # F1 = 0.86 >= 0.8
    assert grade("Eiffel Tower", "The Eiffel Tower", "f1")


def test_f1_multi_answer_mean():
    assert score(r"\boxed{Paris} \boxed{Barack Obama was president}", ["paris", "barack obama"]) == (
        pytest.approx((1 + 2 / 3) / 2)
    )
    assert score(r"\boxed{Paris}", ["paris", "rome"]) == 0.0


def test_score_other_kinds_is_binary():
    assert score(r"\boxed{\frac12}", "0.5", "math") == 1.0
    assert score("B", "C", "mcq") == 0.0


# ------------------------------------------------------------------------------------------- mcq


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        (r"\boxed{C}", "C"),
        (r"so $\boxed{\text{(b)}}$", "B"),
        ("The answer is (d).", "D"),
        ("Answer: E", "E"),
        ("C) 42 apples", "C"),
        ("(A)", "A"),
        ("c", "C"),
        ("I first thought (A), but the answer is (E).", "E"),
        ("Options:\nA) one\nB) two\nThe correct one:\nB) two", "B"),
        ("the answer is a dog", None),
        ("no idea", None),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


def test_mcq_grade():
    assert grade(r"\boxed{c}", "C", "mcq")
    assert grade("The answer is (B)", "(b)", "mcq")
    assert not grade("(A)", "B", "mcq")
    with pytest.raises(ValueError, match="letter"):
        grade("A", "forty-two", "mcq")


# ----------------------------------------------------------------------------------------- judge


class RecordingJudge:
    """Minimal judge: anything with invoke(messages) -> object with .content."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def invoke(self, messages):
        self.prompts.append(messages[-1]["content"])
        return type("Msg", (), {"content": self.reply})()


def test_judge_prompt_and_yes():
    judge = RecordingJudge("Yes, it matches.")
    assert grade("It was Paris.", "Paris", "judge", question="Capital of France?", judge=judge)
    (prompt,) = judge.prompts
    assert "Capital of France?" in prompt and "It was Paris." in prompt and "Paris" in prompt
    assert "$question" not in prompt and "$answer" not in prompt


@pytest.mark.parametrize(
    ("reply", "expected"),
    [("yes", True), ("No.", False), ("maybe", False), ("", False), ("<think>no, wait</think> YES", True)],
)
def test_judge_reply_parsing(reply, expected):
    judge = RecordingJudge(reply)
    assert grade("x", "y", "judge", question="q", judge=judge) is expected


def test_judge_with_langchain_fake_chat_model():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    judge = FakeListChatModel(responses=["yes", "no"])
    assert grade("Paris", "Paris", "judge", question="Capital of France?", judge=judge)
    assert not grade("Rome", "Paris", "judge", question="Capital of France?", judge=judge)
    ajudge = FakeListChatModel(responses=["Yes"])
    assert asyncio.run(agrade("Paris", "Paris", "judge", question="Capital?", judge=ajudge))


def test_judge_needs_question_and_model():
    with pytest.raises(ValueError, match="question"):
        grade("x", "y", "judge", judge=RecordingJudge("yes"))
    with pytest.raises(ValueError, match="judge"):
        grade("x", "y", "judge", question="q")


def test_judge_prompt_file_is_a_template():
    text = (Path(answers.__file__).resolve().parent / "judge.txt").read_text(encoding="utf-8")
    for field in ("$question", "$response", "$answer"):
        assert field in text


# ---------------------------------------------------------------------------------------- errors


def test_unknown_kind_raises_with_valid_kinds():
    with pytest.raises(ValueError, match=r"math.*exact.*f1.*mcq.*judge"):
        grade("1", "1", "fuzzy")
    with pytest.raises(ValueError):
        score("1", "1", "fuzzy")


def test_empty_truth_list_raises():
    with pytest.raises(ValueError):
        grade("1", [])


# ------------------------------------------------------------------------------------ gold data


def _rows(name: str) -> list[dict]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_gsm8k_gold_solutions_agree():
    rows = _rows("gsm8k_test.jsonl")
    failures = [r["id"] for r in rows if not grade(r["solution"].split("####")[-1].strip(), r["answer"])]
    log.info("gsm8k gold agreement: %d/%d", len(rows) - len(failures), len(rows))
    assert failures == []


def test_gsm8k_golds_reject_other_answers():
    # Negative control: each gold against the next row's (different) answer must be False.
    rows = _rows("gsm8k_test.jsonl")
    wrong = [
        r["id"]
        for r, nxt in zip(rows, rows[1:] + rows[:1], strict=True)
        if float(r["answer"].replace(",", "")) != float(nxt["answer"].replace(",", ""))
        and grade(r["solution"].split("####")[-1].strip(), nxt["answer"])
    ]
    assert wrong == []


def test_math500_gold_solutions_agree():
    rows = _rows("math500.jsonl")
    failures = [r["id"] for r in rows if not grade(r["solution"], r["answer"])]
    log.info("math500 gold agreement: %d/%d", len(rows) - len(failures), len(rows))
    assert failures == []


def test_math500_golds_agree_through_math_verify_alone():
    # The cheap string path decides most golds above; check Math-Verify itself accepts every gold too.
    rows = _rows("math500.jsonl")
    failures = [
        r["id"]
        for r in rows
        if not bounded.verify_bounded(
            [[answers.mv_gold(r["answer"]), answers.mv_pred(r["solution"], True)]], timeout=10.0
        )
    ]
    assert failures == []


@pytest.mark.parametrize("executable", ["/nonexistent/python", "/bin/false"])
def test_falls_back_to_threads_when_workers_cannot_start(monkeypatch, executable):
    monkeypatch.setattr(bounded, "_POOL", None)
    monkeypatch.setattr(bounded, "_USE_THREADS", False)
    monkeypatch.setattr(sys, "executable", executable)
    assert grade(r"\boxed{\frac12}", "0.5")
    assert bounded._USE_THREADS is True
    assert not grade(r"\boxed{\frac13}", "0.5")
