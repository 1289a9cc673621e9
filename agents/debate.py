"""Debate: roles argue over several rounds, then a judge decides (original ``DebateAgent``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated

from langchain_core.runnables import Runnable
from pydantic import Field, StringConstraints

from agents.base import (
    DEFAULT_TEMPERATURE,
    Agent,
    AgentResult,
    CallSettings,
    Params,
    ParsedReply,
    Temperature,
    Usage,
    ask,
)
from agents.prompts import render

DEFAULT_ROUNDS = 5
#: The most debate rounds and debaters a spec may ask for.
MAX_ROUNDS = 10
MAX_ROLES = 8

RoleText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class DebateParams(Params):
    """What a spec may set for a Debate node (the roles have no default: a spec names them)."""

    roles: list[RoleText] = Field(..., min_length=2, max_length=MAX_ROLES, description="Debater roles, at least two.")
    rounds: int = Field(DEFAULT_ROUNDS, ge=1, le=MAX_ROUNDS, description="Debate rounds before the judge decides.")
    temperature: Temperature = DEFAULT_TEMPERATURE


class DebateAgent(Agent):
    """``len(roles)`` debaters for ``rounds`` rounds, concurrently within a round, then one judge call.

    From the second round on each debater sees the other debaters' previous reasoning and answers.
    Calls: ``rounds × len(roles) + 1``.

    Args:
        model: The sub-agent chat model (any Runnable over messages).
        roles: The debaters' roles, at least two (blank ones are dropped).
        rounds: Debate rounds before the judge decides.
        temperature: Sampling temperature of every call (``None``: the model's own).
        max_parallel: Debaters in flight at once within a round (``None``: all of them).
        settings: Per-call time-out, concurrency limiter and reply grammar (default: none).

    Raises:
        ValueError: Fewer than two roles, or ``rounds`` below 1.
    """

    kind = "debate"
    params_model = DebateParams

    def __init__(
        self,
        model: Runnable,
        *,
        roles: Sequence[str],
        rounds: int = DEFAULT_ROUNDS,
        temperature: float | None = DEFAULT_TEMPERATURE,
        max_parallel: int | None = None,
        settings: CallSettings | None = None,
    ) -> None:
        roles = [str(r).strip() for r in roles if str(r).strip()]
        if len(roles) < 2:
            raise ValueError(f"DebateAgent needs at least 2 roles, got {roles!r}")
        if rounds < 1:
            raise ValueError(f"DebateAgent needs rounds >= 1, got {rounds}")
        self.model = model
        self.roles = roles
        self.rounds = rounds
        self.temperature = temperature
        self.max_parallel = max_parallel
        self.settings = settings or CallSettings()

    async def arun(self, task: str) -> AgentResult:
        """Debate for the rounds, then let the judge decide.

        Args:
            task: The (sub-)task text.

        Returns:
            The result: reasoning, answer and usage.

        Raises:
            SubAgentError: The model failed or never wrote a parsable reply.
        """
        usage = Usage()
        gate = asyncio.Semaphore(self.max_parallel or len(self.roles))
        previous: list[ParsedReply] = []
        transcript: list[list[dict[str, str]]] = []

        async def speak(index: int, role: str) -> ParsedReply:
            if not previous:
                prompt = render("debate_first", role=role, task=task)
            else:
                others = "\n\n".join(
                    f"[{self.roles[j]}]\nReasoning: {r.thinking}\nAnswer: {r.answer}"
                    for j, r in enumerate(previous)
                    if j != index
                )
                prompt = render("debate_round", role=role, task=task, others=others)
            async with gate:
                return await ask(
                    self.model, prompt, usage=usage, temperature=self.temperature, settings=self.settings
                )

        for _ in range(self.rounds):
            previous = list(await asyncio.gather(*(speak(i, r) for i, r in enumerate(self.roles))))
            transcript.append([{"role": r, "answer": p.answer} for r, p in zip(self.roles, previous)])
        arguments = "\n\n".join(
            f"[{role}]\nReasoning: {r.thinking}\nAnswer: {r.answer}" for role, r in zip(self.roles, previous)
        )
        verdict = await ask(
            self.model, render("debate_judge", task=task, arguments=arguments), usage=usage,
            temperature=self.temperature, settings=self.settings,
        )
        return AgentResult(
            agent=self.kind, thinking=verdict.thinking, answer=verdict.answer, usage=usage,
            details={"transcript": transcript},
        )
