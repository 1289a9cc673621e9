"""A scripted sub-agent for checkpoint and thread tests: answers 'answer-<i>' for step i of a chain."""

from __future__ import annotations

from langchain_core.messages import BaseMessage
from pydantic import PrivateAttr

from mas_orchestra.testing import ScriptedChatModel, cot_reply


class StepModel(ScriptedChatModel):
    """Answers 'answer-<i>' for the prompt of step i; raises once on the steps in ``fail_once``; records the
    steps asked (``steps``)."""

    fail_once: set[int] = set()  # noqa: RUF012 - pydantic copies defaults
    _seen: list[int] = PrivateAttr(default_factory=list)
    _failed: set[int] = PrivateAttr(default_factory=set)

    def _next_reply(self, messages: list[BaseMessage], index: int) -> object:
        text = str(messages[-1].content)
        step = int(text.split("Current sub-task: step ")[1].split()[0]) if "sub-task: step" in text else -1
        with self._lock:
            self._seen.append(step)
            if step in self.fail_once and step not in self._failed:
                self._failed.add(step)
                return ValueError(f"injected failure at step {step}")
        return cot_reply(f"answer-{step}")

    @property
    def steps(self) -> list[int]:
        return list(self._seen)
