"""Reflexion: attempt, critique, refine until the critic accepts (original ``ReflexionAgent``)."""

from __future__ import annotations

import re

from langchain_core.runnables import Runnable
from pydantic import Field

from agents.base import DEFAULT_TEMPERATURE, Agent, AgentResult, CallSettings, Params, Temperature, Usage, ask
from agents.cot import cot_attempt
from agents.prompts import render

DEFAULT_ROUNDS = 5
#: The most critic/refine rounds a spec may ask for.
MAX_ROUNDS = 10
_TRUE_RE = re.compile(r"^\W*(true|yes|correct)\b", re.I)


class ReflexionParams(Params):
    """What a spec may set for a Reflexion node."""

    rounds: int = Field(DEFAULT_ROUNDS, ge=1, le=MAX_ROUNDS, description="Maximum critic/refine rounds.")
    temperature: Temperature = DEFAULT_TEMPERATURE


def _critic_accepts(verdict: str) -> bool:
    return bool(_TRUE_RE.match(verdict))


class ReflexionAgent(Agent):
    """One attempt, then up to ``rounds`` critic → refine rounds (``1 + 2·rounds`` calls at most).

    Args:
        model: The sub-agent chat model (any Runnable over messages).
        rounds: Maximum critic/refine rounds (``0``: the attempt only).
        temperature: Sampling temperature of every call (``None``: the model's own).
        settings: Per-call time-out, concurrency limiter and reply grammar (default: none).

    Raises:
        ValueError: ``rounds`` is negative.
    """

    kind = "reflexion"
    params_model = ReflexionParams

    def __init__(
        self,
        model: Runnable,
        *,
        rounds: int = DEFAULT_ROUNDS,
        temperature: float | None = DEFAULT_TEMPERATURE,
        settings: CallSettings | None = None,
    ) -> None:
        if rounds < 0:
            raise ValueError(f"ReflexionAgent needs rounds >= 0, got {rounds}")
        self.model = model
        self.rounds = rounds
        self.temperature = temperature
        self.settings = settings or CallSettings()

    async def arun(self, task: str) -> AgentResult:
        """Attempt, then critic and refine until the critic accepts or the rounds run out.

        Args:
            task: The (sub-)task text.

        Returns:
            The result: reasoning, answer and usage.

        Raises:
            SubAgentError: The model failed or never wrote a parsable reply.
        """
        usage = Usage()
        reply = await cot_attempt(
            self.model, task, usage=usage, temperature=self.temperature, settings=self.settings
        )
        history: list[dict[str, str | bool]] = []
        for _ in range(self.rounds):
            attempt = f"Reasoning: {reply.thinking}\nAnswer: {reply.answer}"
            critique = await ask(
                self.model, render("reflexion_critic", task=task, attempt=attempt), usage=usage,
                temperature=self.temperature, settings=self.settings,
            )
            accepted = _critic_accepts(critique.answer)
            history.append({"answer": reply.answer, "feedback": critique.thinking, "accepted": accepted})
            if accepted:
                break
            reply = await ask(
                self.model,
                render("reflexion_refine", task=task, attempt=attempt, feedback=critique.thinking),
                usage=usage, temperature=self.temperature, settings=self.settings,
            )
        return AgentResult(
            agent=self.kind, thinking=reply.thinking, answer=reply.answer, usage=usage,
            details={"rounds": history},
        )
