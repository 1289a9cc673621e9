"""Scripted models for the eval tests, importable as ``python:tests.eval_models:<factory>`` model strings.

Questions look like ``What is 12 + 30?`` followed by optional tags that script the outcome:

* no tag — the sub-agent answers the true sum (correct);
* ``[wrong]`` — it answers the sum + 1 (wrong);
* ``[flaky]`` — its final-node answers alternate correct, wrong, correct, … per question, so of k samples
  exactly ceil(k/2) are correct whatever order they run in;
* ``[boom]`` — it raises a non-transient error (the run ends ``exec_error``);
* ``[invalid]`` — the orchestrator writes an orchestration with an unknown agent (``invalid_spec``).

The orchestrator writes a two-node spec: ``A`` (CoT on the question) feeding ``FINAL`` (CoT checking
``${A}``). Every factory returns fresh models (their call counters start at zero);
``EVAL_MODELS_DELAY`` (seconds per sub-agent call) makes :func:`slow_subagent` slow, for the kill test.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mas_orchestra.testing import ScriptedChatModel, cot_reply

__all__ = ["ORCHESTRATION", "make_rows", "orchestrator", "slow_subagent", "subagent", "true_answer"]

FINAL_MARK = "Check the proposed solution"
ORCHESTRATION = f"""<thinking>Solve, then check.</thinking>
<agent>
  <agent_id>A</agent_id>
  <agent_name>CoTAgent</agent_name>
  <agent_description>Solve the problem</agent_description>
  <required_arguments><agent_input></agent_input></required_arguments>
</agent>
<agent>
  <agent_id>FINAL</agent_id>
  <agent_name>CoTAgent</agent_name>
  <agent_description>Check and answer</agent_description>
  <required_arguments><agent_input>{FINAL_MARK} ${{A}} and give the final answer.</agent_input></required_arguments>
</agent>
<edge><from>A</from><to>FINAL</to></edge>
"""
INVALID_ORCHESTRATION = "<agent><agent_id>A</agent_id><agent_name>OracleAgent</agent_name></agent>"
_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?([^\n;]*)")


def true_answer(question: str) -> str:
    """The gold answer of a scripted question."""
    match = _QUESTION.search(question)
    if match is None:
        raise ValueError(f"not a scripted question: {question!r}")
    return str(int(match.group(1)) + int(match.group(2)))


def make_rows(tags: Sequence[str]) -> list[dict[str, Any]]:
    """One row per tag ("" for a plain correct question): ids q0, q1, …, distinct sums."""
    rows = []
    for i, tag in enumerate(tags):
        question = f"What is {10 + i} + {20 * i + 1}?" + (f" [{tag}]" if tag else "")
        rows.append({"id": f"q{i}", "question": question, "answer": true_answer(question)})
    return rows


def _text(messages: Sequence[Any]) -> str:
    return "\n".join(str(getattr(m, "content", m)) for m in messages)


def orchestrator() -> ScriptedChatModel:
    """Writes :data:`ORCHESTRATION`, or an invalid one for ``[invalid]`` questions."""

    def reply(messages: Sequence[Any], index: int) -> str:
        return INVALID_ORCHESTRATION if "[invalid]" in _text(messages) else ORCHESTRATION

    return ScriptedChatModel(replies=reply, model_name="scripted-orchestrator")


def subagent(delay: float = 0.0) -> ScriptedChatModel:
    """Answers per the question's tag (module docstring)."""
    lock = threading.Lock()
    final_calls: Counter[str] = Counter()

    def reply(messages: Sequence[Any], index: int) -> Any:
        text = _text(messages)
        match = _QUESTION.search(text)
        if match is None:
            return cot_reply("unknown")
        answer = int(true_answer(text))
        tags = match.group(3)
        if "[boom]" in tags:
            return RuntimeError("scripted sub-agent failure")
        if "[wrong]" in tags:
            answer += 1
        elif "[flaky]" in tags and FINAL_MARK in text:
            with lock:
                turn = final_calls[match.group(0)]
                final_calls[match.group(0)] += 1
            answer += turn % 2
        return cot_reply(str(answer))

    return ScriptedChatModel(replies=reply, delay=delay, model_name="scripted-subagent")


def slow_subagent() -> ScriptedChatModel:
    """:func:`subagent` with ``$EVAL_MODELS_DELAY`` seconds (default 0.2) per call."""
    return subagent(delay=float(os.environ.get("EVAL_MODELS_DELAY", "0.2")))
