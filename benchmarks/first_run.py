"""The quality floor of a first run: the main job against one plain call of the same model, side by side.

On a small fixed set of short questions shipped in the repo (``benchmarks/data/first_run.jsonl``: ten facts and
ten one-step arithmetic questions), in one process:

1. **plain call** — the question as the one user message, under the model's chat template, greedy
   (``temperature=0``), one call;
2. **main job** — what ``mas-orchestra run QUESTION`` does: an :class:`~mas_orchestra.runtime.Orchestra` with the
   same model as orchestrator and sub-agents and the CLI's defaults.

Both answers are graded by the same lenient rule (:func:`grade`): a numeric gold answer must be the last number
in the answer, a text gold answer must appear in it as whole words (case-insensitive). It prints accuracy, model
calls and wall seconds of both systems, the plan sizes of the main job (0 = the orchestrator answered directly),
and, over every sub-agent reply of the main job, how many echoed the reply format's wording instead of answering
("placeholder echoes") and how many were token soup (a heuristic: at least 8 words, under 15% of them common
English function words).

    MAS_TORCH_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/first_run.py [--model embedded] [--data FILE]
        [--limit N] [--seed S] [--json OUT]

``--data`` takes any JSONL with ``question`` and ``answers`` (a list) or ``answer`` (a string), e.g. GSM8K's test
split. The main job must score at least the plain call; absolute seconds depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.callbacks import BaseCallbackHandler

DATA = Path(__file__).resolve().parent / "data" / "first_run.jsonl"
#: Tokens of the plain call's reply (short questions; the orchestrated calls keep their own defaults).
PLAIN_MAX_TOKENS = 128

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_WORD_RE = re.compile(r"[A-Za-z']+")
#: Common English function words: ordinary prose has roughly 40% of them, token soup almost none.
_FUNCTION_WORDS = frozenset([
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "of", "to", "in", "on", "at", "for", "and",
    "or", "but", "so", "if", "then", "than", "that", "this", "these", "those", "it", "its", "he", "she",
    "they", "we", "you", "i", "his", "her", "their", "our", "your", "my", "not", "no", "with", "by", "from",
    "as", "there", "here", "what", "which", "who", "how", "many", "much", "has", "have", "had", "do", "does",
    "did", "can", "will", "would", "should", "one", "two"
])
#: The reply format's wording as the prompts wrote it before worked examples replaced it (and close variants).
_PLACEHOLDER_PHRASES = (
    "your final answer only", "the correct final answer only", "your final answer", "the correct final answer",
    "your step-by-step reasoning", "your reasoning", "your improved step-by-step reasoning", "final answer only",
    "your feedback on the attempt", "your evaluation of the arguments",
)


def load_questions(path: Path, limit: int | None) -> list[dict[str, Any]]:
    """Questions of a JSONL file with their accepted answers (``answers`` list or ``answer`` string)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        answers = row.get("answers") or [row["answer"]]
        rows.append({"id": row.get("id", str(len(rows))), "question": row["question"],
                     "answers": [str(a) for a in answers]})
    return rows[:limit] if limit else rows


def _numbers(text: str) -> list[float]:
    out = []
    for match in _NUMBER_RE.findall(text):
        try:
            out.append(float(match.replace(",", "")))
        except ValueError:
            continue
    return out


def grade(answer: str, accepted: list[str]) -> bool:
    """The same lenient rule for both systems: a number must be the answer's last number, a text must appear as
    whole words (case-insensitive)."""
    text = answer or ""
    for gold in accepted:
        gold_numbers = _numbers(gold)
        if gold_numbers and _NUMBER_RE.fullmatch(gold.strip()):
            found = _numbers(text)
            if found and abs(found[-1] - gold_numbers[0]) < 1e-6:
                return True
        elif re.search(rf"(?<![A-Za-z0-9]){re.escape(gold.lower())}(?![A-Za-z0-9])", text.lower()):
            return True
    return False


def is_token_soup(text: str) -> bool:
    """Heuristic: at least 8 words and under 15% of them common function words (prose has ~40%)."""
    words = [w.lower() for w in _WORD_RE.findall(text)]
    if len(words) < 8:
        return False
    return sum(w in _FUNCTION_WORDS for w in words) / len(words) < 0.15


def _answer_of(reply: str) -> str | None:
    match = re.search(r"<answer>(.*?)(?:</answer>|$)", reply, re.S | re.I)
    return match.group(1) if match else None


def is_placeholder_echo(reply: str) -> bool:
    """The reply's ``<answer>`` is the format's wording (or blank) rather than an answer."""
    answer = _answer_of(reply)
    if answer is None:
        return False
    norm = " ".join(re.sub(r"[^a-z0-9' -]", " ", answer.lower()).split())
    return not norm or any(norm == p or norm.startswith(p + " is the") for p in _PLACEHOLDER_PHRASES)


class ReplyRecorder(BaseCallbackHandler):
    """The text of every sub-agent reply of a run (orchestrator calls left out)."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self._orchestrator: set[UUID] = set()
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: UUID,
                            tags: list[str] | None = None, **kwargs: Any) -> None:
        from mas_orchestra.runtime.usage import ORCHESTRATOR_TAG

        if ORCHESTRATOR_TAG in (tags or []):
            with self._lock:
                self._orchestrator.add(run_id)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if run_id in self._orchestrator:
                return
            for generations in response.generations:
                for generation in generations:
                    self.replies.append(str(getattr(generation, "text", "")))


def plain_call(model: Any, question: str) -> tuple[str, float]:
    """One call of ``model``: the question alone, greedy. Returns the reply text and its wall seconds."""
    from langchain_core.messages import HumanMessage

    from agents.base import message_text

    started = time.perf_counter()
    reply = model.invoke([HumanMessage(content=question)], temperature=0, max_tokens=PLAIN_MAX_TOKENS)
    return message_text(reply), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="model string for both systems (default: embedded)")
    parser.add_argument("--data", type=Path, default=DATA, help="JSONL questions (default: the shipped set)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N questions")
    parser.add_argument("--seed", type=int, default=0, help="random/torch seed set before each main job")
    parser.add_argument("--json", type=Path, default=None, help="also write every row and the summary here")
    parser.add_argument("--skip-plain", action="store_true", help="run the main job only")
    args = parser.parse_args()

    from mas_orchestra.models import resolve_model
    from mas_orchestra.runtime.orchestra import Orchestra

    rows = load_questions(args.data, args.limit or None)
    model = resolve_model(args.model)
    orchestra = Orchestra(orchestrator=model, subagent=model)
    print(f"model {args.model!r}, {len(rows)} questions from {args.data.name}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    results: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        record: dict[str, Any] = {"id": row["id"], "question": row["question"], "answers": row["answers"]}
        if not args.skip_plain:
            text, wall = plain_call(model, row["question"])
            record["plain"] = {"answer": text, "wall_s": wall, "calls": 1, "correct": grade(text, row["answers"])}
        try:
            import torch

            torch.manual_seed(args.seed + index)
        except ImportError:
            pass
        random.seed(args.seed + index)
        recorder = ReplyRecorder()
        started = time.perf_counter()
        outcome = orchestra.run(row["question"], callbacks=[recorder])
        wall = time.perf_counter() - started
        spec = outcome.spec
        record["job"] = {
            "answer": outcome.answer or "", "status": outcome.status.value, "wall_s": wall,
            "calls": outcome.usage.llm_calls, "correct": grade(outcome.answer or "", row["answers"]),
            "agents": len(spec.nodes) if spec is not None else None,
            "plan": [node.agent for node in spec.nodes] if spec is not None else None,
            "params": {node.id: node.params for node in spec.nodes} if spec is not None else None,
            "warnings": [str(w) for w in spec.warnings] if spec is not None else [],
            "replies": len(recorder.replies),
            "placeholder_echoes": sum(is_placeholder_echo(r) for r in recorder.replies),
            "token_soup": sum(is_token_soup(r) for r in recorder.replies),
        }
        results.append(record)
        plain = record.get("plain")
        job = record["job"]
        print(f"[{index + 1}/{len(rows)}] {row['id']}: "
              + (f"plain {'ok ' if plain['correct'] else 'no '} {plain['wall_s']:5.1f}s | " if plain else "")
              + f"job {'ok ' if job['correct'] else 'no '} {job['wall_s']:5.1f}s {job['calls']:2d} calls "
              f"plan {job['plan']} -> {job['answer'][:60]!r}", flush=True)
    summary = summarize(results)
    print_table(summary, args.model)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "summary": summary, "rows": results}, indent=1))


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy, calls and wall seconds per system; plan sizes and reply-quality counts of the main job."""
    out: dict[str, Any] = {"questions": len(results)}
    for system in ("plain", "job"):
        got = [r[system] for r in results if system in r]
        if not got:
            continue
        out[system] = {
            "correct": sum(g["correct"] for g in got),
            "accuracy": sum(g["correct"] for g in got) / len(got),
            "calls": sum(g["calls"] for g in got),
            "wall_s": sum(g["wall_s"] for g in got),
            "median_wall_s": statistics.median(g["wall_s"] for g in got),
        }
    jobs = [r["job"] for r in results]
    out["plan_sizes"] = dict(sorted(Counter(str(j["agents"]) for j in jobs).items()))
    out["replies"] = sum(j["replies"] for j in jobs)
    out["placeholder_echoes"] = sum(j["placeholder_echoes"] for j in jobs)
    out["token_soup"] = sum(j["token_soup"] for j in jobs)
    out["capped_warnings"] = sum(1 for j in jobs for w in j["warnings"] if "capped" in w)
    return out


def print_table(summary: dict[str, Any], model: str) -> None:
    print(f"\n{model}: {summary['questions']} questions")
    print(f"{'system':<12} {'correct':>8} {'accuracy':>9} {'calls':>6} {'wall s':>8} {'median s':>9}")
    for system, label in (("plain", "plain call"), ("job", "main job")):
        if system in summary:
            s = summary[system]
            print(f"{label:<12} {s['correct']:>8} {s['accuracy']:>9.2f} {s['calls']:>6} {s['wall_s']:>8.1f} "
                  f"{s['median_wall_s']:>9.1f}")
    print(f"plan sizes (agents: runs; 0 = direct answer, None = no valid plan): {summary['plan_sizes']}")
    print(f"sub-agent replies {summary['replies']}: placeholder echoes {summary['placeholder_echoes']}, "
          f"token soup {summary['token_soup']}; plans with capped parameters {summary['capped_warnings']}")
    if "plain" in summary and "job" in summary:
        verdict = "holds" if summary["job"]["correct"] >= summary["plain"]["correct"] else "BROKEN"
        print(f"quality floor (main job >= plain call): {verdict}")


if __name__ == "__main__":
    main()
