"""Self-consistency: several chain-of-thought samples and a majority vote (original ``SCAgent``)."""

from __future__ import annotations

import asyncio
from collections import Counter

from langchain_core.runnables import Runnable
from pydantic import Field

from agents.base import DEFAULT_TEMPERATURE, Agent, AgentResult, CallSettings, Params, SubAgentError, Temperature, Usage
from agents.cot import cot_attempt
from agents.normalize import normalize_answer

DEFAULT_SAMPLES = 5
#: The most samples a spec may ask for.
MAX_SAMPLES = 20


class SCParams(Params):
    """What a spec may set for a self-consistency node."""

    samples: int = Field(DEFAULT_SAMPLES, ge=1, le=MAX_SAMPLES, description="Number of CoT samples to vote over.")
    temperature: Temperature = DEFAULT_TEMPERATURE


class SCAgent(Agent):
    """Sample ``samples`` CoT answers concurrently and return the most common (normalised) answer.

    Samples whose reply never parsed are dropped from the vote; the agent fails only if none parsed.
    Ties go to the answer that appeared first.

    Args:
        model: The sub-agent chat model (any Runnable over messages).
        samples: Number of CoT samples to vote over.
        temperature: Sampling temperature of every call (``None``: the model's own).
        max_parallel: Samples in flight at once (``None``: all of them).
        settings: Per-call time-out, concurrency limiter and reply grammar (default: none).

    Raises:
        ValueError: ``samples`` is below 1.
    """

    kind = "sc"
    params_model = SCParams

    def __init__(
        self,
        model: Runnable,
        *,
        samples: int = DEFAULT_SAMPLES,
        temperature: float | None = DEFAULT_TEMPERATURE,
        max_parallel: int | None = None,
        settings: CallSettings | None = None,
    ) -> None:
        if samples < 1:
            raise ValueError(f"SCAgent needs samples >= 1, got {samples}")
        self.model = model
        self.samples = samples
        self.temperature = temperature
        self.max_parallel = max_parallel
        self.settings = settings or CallSettings()

    async def arun(self, task: str) -> AgentResult:
        """Sample, vote, and return the majority answer (``details`` holds the votes).

        Args:
            task: The (sub-)task text.

        Returns:
            The result: reasoning, answer and usage.

        Raises:
            SubAgentError: The model failed or never wrote a parsable reply.
        """
        usage = Usage()
        gate = asyncio.Semaphore(self.max_parallel or self.samples)

        async def one_sample():
            async with gate:
                return await cot_attempt(
                    self.model, task, usage=usage, temperature=self.temperature, settings=self.settings
                )

        outcomes = await asyncio.gather(
            *(one_sample() for _ in range(self.samples)), return_exceptions=True
        )
        for outcome in outcomes:  # a cancellation or a programming error is not a bad sample
            if isinstance(outcome, BaseException) and not isinstance(outcome, SubAgentError):
                raise outcome
        replies = [o for o in outcomes if not isinstance(o, BaseException)]
        if not replies:
            raise SubAgentError(f"all {self.samples} self-consistency samples failed: {outcomes[0]}")
        keys = [normalize_answer(r.answer) for r in replies]
        votes = Counter(keys)
        best = max(votes, key=lambda k: (votes[k], -keys.index(k)))
        chosen = replies[keys.index(best)]
        return AgentResult(
            agent=self.kind,
            thinking=chosen.thinking,
            answer=chosen.answer,
            usage=usage,
            details={
                "votes": dict(votes),
                "samples": [r.answer for r in replies],
                "failed_samples": len(outcomes) - len(replies),
            },
        )
