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

Multi-answer truths (a list of strings, MASBench horizon/parallel): the prediction must contain at least
``len(truth)`` ``\\boxed{}``; the LAST ``len(truth)`` boxes are compared with the truths in order and all
must be correct (fewer boxes -> False). Taking the last ones lets a model show boxed intermediate work
before its final answers. A one-element list is graded like a plain string. For ``"judge"`` the answers
are shown to the judge as a numbered list.

Math-Verify runs with its own (signal based, main-thread only) timeouts disabled; this module bounds the
time itself by running the check in a persistent worker subprocess that is killed when ``timeout``
expires (the grade is then False). A process, not a thread, because sympy can sit inside one C call that
never releases the GIL (``9^{9^{9^9}}``), which no thread timeout can interrupt. This makes ``grade``
safe from any thread and inside a running event loop. Set ``MAS_ORCHESTRA_GRADING_BACKEND=thread`` to use
a daemon thread instead (no subprocess; a runaway computation then keeps burning CPU in the background),
and ``MAS_ORCHESTRA_GRADING_WORKERS`` for the number of worker processes (default ``min(4, cpus)``).

This module imports only the standard library at import time; ``math_verify`` is imported in the worker
(or lazily, in thread mode), so ``import mas_orchestra.grading`` stays cheap.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import logging
import os
import re
import select
import string
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

VALID_KINDS: tuple[str, ...] = ("math", "exact", "f1", "mcq", "judge")
F1_PASS = 0.8

_JUDGE_PROMPT_PATH = Path(__file__).resolve().parent / "prompts" / "judge.txt"
# How long a fresh worker may take to import sympy/math_verify; kept apart from the per-call timeout so a
# cold start is never mistaken for a pathological answer.
_STARTUP_TIMEOUT_S = 120.0

Truth = str | Sequence[str]


# --------------------------------------------------------------------------------------------------
# Boxed-answer extraction
# --------------------------------------------------------------------------------------------------

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")


def extract_boxed(text: str) -> list[str]:
    """Return the contents of every top-level ``\\boxed{...}`` / ``\\fbox{...}`` in ``text``, in order.

    Nested braces are matched; escaped braces (``\\{``, ``\\}``) are content, not structure. A box that
    is never closed is ignored; a box inside another box is part of the outer one's content.
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


# --------------------------------------------------------------------------------------------------
# Math normalisation
# --------------------------------------------------------------------------------------------------

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


def _math_key(s: str) -> str:
    """A string key for the cheap equality check; equal keys mean equal answers."""
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


def _mv_gold(truth: str) -> str:
    # Boxed, so Math-Verify parses a bare "25" or "\frac{1}{2}" gold as the answer itself.
    return "\\boxed{" + _math_clean(truth) + "}"


def _mv_pred(prediction: str, boxed: bool) -> str:
    return "\\boxed{" + _math_clean(prediction) + "}" if boxed else prediction


class _QuietTimeoutWarning(logging.Filter):
    """Drops Math-Verify's "timeout is disabled" warning: here the timeout is ours, on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _quiet_math_verify() -> None:
    for name in ("math_verify.parser", "math_verify.grader", "math_verify"):
        lg = logging.getLogger(name)
        if not any(isinstance(f, _QuietTimeoutWarning) for f in lg.filters):
            lg.addFilter(_QuietTimeoutWarning())


def _verify_pairs(pairs: Sequence[Sequence[str]]) -> bool:
    """Math-Verify every (gold, prediction) pair, no timeouts; runs in the worker (or a thread)."""
    from math_verify import parse, verify

    for gold, pred in pairs:
        g = parse(gold, parsing_timeout=None)
        if not g:
            return False
        p = parse(pred, parsing_timeout=None)
        if not p or not verify(g, p, timeout_seconds=None):
            return False
    return True


# --------------------------------------------------------------------------------------------------
# Worker processes that bound Math-Verify's running time
# --------------------------------------------------------------------------------------------------


def _worker_loop() -> None:
    """Entry point of a worker subprocess: JSON lines in on stdin, JSON lines out on the original stdout."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    # Whatever sympy or a library prints must not corrupt the protocol channel.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    parent = os.getppid()

    def watchdog() -> None:
        # If the parent dies while we are stuck in a long computation, nobody would ever kill us.
        while True:
            time.sleep(2.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        import math_verify  # noqa: F401
    except Exception as exc:
        proto.write(json.dumps({"ready": False, "error": repr(exc)}) + "\n")
        return
    _quiet_math_verify()
    sys.setrecursionlimit(10_000)
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            ok = _verify_pairs(json.loads(line)["pairs"])
        except Exception:  # any parser/sympy failure is simply "not equivalent"
            ok = False
        proto.write(json.dumps({"ok": bool(ok)}) + "\n")


class _WorkerUnavailable(RuntimeError):
    """A worker subprocess could not be started (or could not import math_verify)."""


class _Worker:
    def __init__(self) -> None:
        path = str(Path(__file__).resolve())
        # Load this file by path under a private name: the child does not import the mas_orchestra
        # package (whose __init__ may pull in langgraph) nor re-run the parent's __main__ (unlike
        # multiprocessing's spawn), and it never inherits the parent's threads or locks (unlike fork).
        code = (
            "import importlib.util as u\n"
            f"s = u.spec_from_file_location('_mas_orchestra_grading_worker', {path!r})\n"
            "m = u.module_from_spec(s)\n"
            "s.loader.exec_module(m)\n"
            "m._worker_loop()\n"
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except (OSError, ValueError) as exc:
            raise _WorkerUnavailable(f"cannot start a grading worker: {exc}") from exc
        self._buf = b""
        self.ready = False

    def _readline(self, deadline: float) -> bytes | None:
        """One protocol line, or None when the deadline passes first. EOFError if the worker died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            # poll, not select: select fails for descriptors >= 1024, common in busy training processes.
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(max(1, int(remaining * 1000))):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("grading worker exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            line = self._readline(time.monotonic() + _STARTUP_TIMEOUT_S)
        except EOFError as exc:
            raise _WorkerUnavailable("grading worker exited during start-up") from exc
        msg = json.loads(line) if line else {}
        if not msg.get("ready"):
            reason = msg.get("error", "start-up timed out")
            raise _WorkerUnavailable(f"grading worker did not start: {reason}")
        self.ready = True

    def run(self, pairs: list[list[str]], timeout: float) -> bool | None:
        """True/False from Math-Verify; None if the worker timed out or died (it must then be killed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"pairs": pairs}) + "\n").encode("ascii"))
            self.proc.stdin.flush()
            line = self._readline(time.monotonic() + timeout)
        except (OSError, EOFError):
            return None
        if line is None:
            return None
        return bool(json.loads(line).get("ok"))

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # already gone; nothing else to do
            logger.debug("grading worker kill failed", exc_info=True)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class _WorkerPool:
    """At most ``size`` workers; a caller takes an idle one (or starts one) and hands it back."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.idle: list[_Worker] = []
        self.count = 0
        self.cond = threading.Condition()

    def acquire(self) -> _Worker:
        with self.cond:
            while not self.idle and self.count >= self.size:
                self.cond.wait()
            if self.idle:
                return self.idle.pop()
            self.count += 1
        try:
            return _Worker()
        except BaseException:
            with self.cond:
                self.count -= 1
                self.cond.notify()
            raise

    def release(self, worker: _Worker, broken: bool) -> None:
        if broken:
            worker.kill()
            if _USE_THREADS:  # workers cannot start here at all; do not keep trying
                with self.cond:
                    self.count -= 1
                    self.cond.notify()
                return
            try:
                # Start the replacement now so it imports sympy while nobody waits for it.
                worker = _Worker()
            except _WorkerUnavailable:
                with self.cond:
                    self.count -= 1
                    self.cond.notify()
                return
        with self.cond:
            self.idle.append(worker)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            workers, self.idle = self.idle, []
            self.count -= len(workers)
        for w in workers:
            w.kill()


_POOL: _WorkerPool | None = None
_POOL_LOCK = threading.Lock()
_USE_THREADS = os.environ.get("MAS_ORCHESTRA_GRADING_BACKEND", "").lower() == "thread" or os.name != "posix"


def _pool() -> _WorkerPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            default = min(4, os.cpu_count() or 1)
            size = int(os.environ.get("MAS_ORCHESTRA_GRADING_WORKERS", default))
            _POOL = _WorkerPool(size)
            atexit.register(_POOL.close)
        return _POOL


def _verify_in_thread(pairs: list[list[str]], timeout: float) -> bool:
    import math_verify  # noqa: F401  -- fail here, loudly, rather than inside the thread

    _quiet_math_verify()
    result: dict[str, bool] = {}

    def target() -> None:
        try:
            result["ok"] = _verify_pairs(pairs)
        except Exception:
            result["ok"] = False

    t = threading.Thread(target=target, daemon=True, name="mas-orchestra-math-verify")
    t.start()
    t.join(timeout)
    if t.is_alive():
        logger.warning("math grading timed out after %.1fs (thread left running)", timeout)
        return False
    return result.get("ok", False)


def _missing_math_verify() -> ImportError:
    """The typed missing-extra error (an ImportError) naming ``pip install 'mas-orchestra[grading]'``."""
    # Imported here, not at the top: this file must stay standard-library only, because grading workers
    # load it by path in a bare interpreter (see _Worker).
    from agents.errors import MissingExtraError

    return MissingExtraError("kind='math' grading (Math-Verify)", "grading", "math-verify")


def _verify_bounded(pairs: list[list[str]], timeout: float) -> bool:
    """Math-Verify ``pairs`` within ``timeout`` seconds (after worker start-up); False on timeout."""
    global _USE_THREADS
    if importlib.util.find_spec("math_verify") is None:
        raise _missing_math_verify()
    if _USE_THREADS:
        try:
            return _verify_in_thread(pairs, timeout)
        except ImportError as exc:
            raise _missing_math_verify() from exc
    pool = _pool()
    try:
        worker = pool.acquire()
    except _WorkerUnavailable as exc:
        logger.warning("%s; falling back to thread-based math grading", exc)
        _USE_THREADS = True
        return _verify_in_thread(pairs, timeout)
    broken = True
    try:
        worker.wait_ready()
        result = worker.run(pairs, timeout)
        broken = result is None
        if result is None:
            logger.info("math grading timed out after %.1fs; worker restarted", timeout)
            return False
        return result
    except _WorkerUnavailable as exc:
        logger.warning("%s; falling back to thread-based math grading", exc)
        _USE_THREADS = True
        return _verify_in_thread(pairs, timeout)
    finally:
        pool.release(worker, broken)


def _pairs_for(prediction: str, truths: list[str]) -> list[tuple[str, bool]] | None:
    """(prediction part, is_boxed) per truth, or None when the prediction has too few boxes."""
    if len(truths) == 1:
        return [(prediction, bool(extract_boxed(prediction)))]
    boxes = extract_boxed(prediction)
    if len(boxes) < len(truths):
        return None
    return [(b, True) for b in boxes[-len(truths) :]]


def _grade_math(prediction: str, truths: list[str], timeout: float) -> bool:
    parts = _pairs_for(prediction, truths)
    if parts is None:
        return False
    pending: list[list[str]] = []
    for (pred, boxed), gold in zip(parts, truths, strict=True):
        if _math_key(pred) and _math_key(pred) == _math_key(gold):
            continue  # cheap path: no sympy needed
        pending.append([_mv_gold(gold), _mv_pred(pred, boxed)])
    if not pending:
        return True
    return _verify_bounded(pending, timeout)


# --------------------------------------------------------------------------------------------------
# Exact match / F1 (SQuAD / HotpotQA normalisation)
# --------------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_ANSWER_PREFIX = re.compile(r"^\s*(?:\*\*)?\s*(?:final\s+)?answer\s*(?:\*\*)?\s*:\s*(?:\*\*)?", re.IGNORECASE)
_SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(s: str) -> str:
    """SQuAD/HotpotQA normalisation: lower-case, drop punctuation and articles, collapse whitespace."""
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


def _f1(prediction: str, truth: str) -> float:
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


def _exact(prediction: str, truth: str) -> bool:
    return normalize_answer(_qa_text(prediction)) == normalize_answer(_qa_text(truth))


# --------------------------------------------------------------------------------------------------
# Multiple choice
# --------------------------------------------------------------------------------------------------

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


def _mcq(prediction: str, truth: str) -> bool:
    gold = extract_choice(truth)
    if gold is None:
        raise ValueError(f"mcq truth must name a letter A-E, got {truth!r}")
    return extract_choice(prediction) == gold


# --------------------------------------------------------------------------------------------------
# LLM judge
# --------------------------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


@lru_cache(maxsize=1)
def _judge_template() -> string.Template:
    return string.Template(_JUDGE_PROMPT_PATH.read_text(encoding="utf-8"))


def _judge_messages(question: str, response: str, truths: list[str]) -> list[dict[str, str]]:
    answer = truths[0] if len(truths) == 1 else "\n".join(f"{i}. {t}" for i, t in enumerate(truths, 1))
    prompt = _judge_template().safe_substitute(question=question, response=response, answer=answer)
    return [{"role": "user", "content": prompt}]


def _reply_text(reply: Any) -> str:
    # Imported here, not at the top: the Math-Verify worker loads this file alone, without the packages.
    from agents.base import message_text

    return message_text(reply)


def parse_judge_reply(text: str) -> bool:
    """True iff the first "yes"/"no" word of the reply (after any ``<think>`` block) is "yes"."""
    m = _YES_NO.search(_THINK.sub(" ", text))
    return bool(m) and m.group(1).lower() == "yes"


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def _check(truth: Truth, kind: str) -> list[str]:
    if kind not in VALID_KINDS:
        raise ValueError(f"unknown grading kind {kind!r}; valid kinds: {', '.join(VALID_KINDS)}")
    truths = [truth] if isinstance(truth, str) else list(truth)
    if not truths or not all(isinstance(t, str) for t in truths):
        raise ValueError("truth must be a string or a non-empty list of strings")
    return truths


def _per_part(prediction: str, truths: list[str]) -> list[tuple[str, str]] | None:
    """(prediction part, truth) pairs for the non-math kinds; None if too few boxes."""
    if len(truths) == 1:
        return [(prediction, truths[0])]
    boxes = extract_boxed(prediction)
    if len(boxes) < len(truths):
        return None
    return list(zip(boxes[-len(truths) :], truths, strict=True))


def grade(
    prediction: str,
    truth: Truth,
    kind: str = "math",
    *,
    question: str | None = None,
    judge: Any = None,
    timeout: float = 5.0,
) -> bool:
    """Whether ``prediction`` answers correctly; see the module docstring for each kind.

    ``truth`` is one answer or, for multi-answer tasks, a list that the prediction's last ``len(truth)``
    boxes must match in order. ``timeout`` bounds Math-Verify (seconds, not counting a worker's one-off
    start-up); a check that runs out of time grades False. ``question`` and ``judge`` are required for
    ``kind="judge"``; errors raised by the judge model propagate (an API failure is not a wrong answer).
    Raises ValueError for an unknown kind, an empty truth, or an mcq truth without a letter, and
    ImportError (``pip install 'mas-orchestra[grading]'``) if kind="math" needs Math-Verify and it is
    missing.
    """
    truths = _check(truth, kind)
    prediction = "" if prediction is None else str(prediction)
    if kind == "math":
        return _grade_math(prediction, truths, timeout)
    if kind == "judge":
        if question is None or judge is None:
            raise ValueError("kind='judge' needs question= and judge=")
        return parse_judge_reply(_reply_text(judge.invoke(_judge_messages(question, prediction, truths))))
    parts = _per_part(prediction, truths)
    if parts is None:
        return False
    if kind == "exact":
        return all(_exact(p, t) for p, t in parts)
    if kind == "f1":
        return all(_exact(p, t) or _f1(p, t) >= F1_PASS for p, t in parts)
    return all(_mcq(p, t) for p, t in parts)


def score(
    prediction: str,
    truth: Truth,
    kind: str = "f1",
    *,
    question: str | None = None,
    judge: Any = None,
    timeout: float = 5.0,
) -> float:
    """A number in [0, 1]: token F1 for ``kind="f1"`` (the mean over the answers of a multi-answer truth,
    0 if boxes are missing), else 1.0 if ``grade`` says correct and 0.0 otherwise."""
    if kind == "f1":
        truths = _check(truth, kind)
        parts = _per_part("" if prediction is None else str(prediction), truths)
        if parts is None:
            return 0.0
        return sum(_f1(p, t) for p, t in parts) / len(parts)
    return float(grade(prediction, truth, kind, question=question, judge=judge, timeout=timeout))


async def agrade(
    prediction: str,
    truth: Truth,
    kind: str = "math",
    *,
    question: str | None = None,
    judge: Any = None,
    timeout: float = 5.0,
) -> bool:
    """Async ``grade``: the judge is awaited through ``ainvoke`` (if it has one); other kinds run
    ``grade`` in a worker thread so the event loop is never blocked by Math-Verify."""
    if kind == "judge":
        truths = _check(truth, kind)
        if question is None or judge is None:
            raise ValueError("kind='judge' needs question= and judge=")
        messages = _judge_messages(question, "" if prediction is None else str(prediction), truths)
        if hasattr(judge, "ainvoke"):
            reply = await judge.ainvoke(messages)
        else:
            reply = await asyncio.to_thread(judge.invoke, messages)
        return parse_judge_reply(_reply_text(reply))
    return await asyncio.to_thread(
        grade, prediction, truth, kind, question=question, judge=judge, timeout=timeout
    )
