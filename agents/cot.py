"""Chain-of-thought: one call that thinks step by step (original block ``CoTAgent``)."""

from __future__ import annotations

from langchain_core.runnables import Runnable

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
    ask_plain,
)
from agents.prompts import render


class CoTParams(Params):
    """What a spec may set for a CoT node."""

    temperature: Temperature = DEFAULT_TEMPERATURE


async def cot_attempt(
    model: Runnable, task: str, *, usage: Usage, temperature: float | None, settings: CallSettings
) -> ParsedReply:
    """One step-by-step attempt at ``task``: CoT's only call, an SC sample, Reflexion's first attempt.

    Args:
        model: The sub-agent's chat model.
        task: The (sub-)task.
        usage: Counts the call's tokens.
        temperature: Sampling temperature (``None``: the model's default).
        settings: Call settings; with ``settings.plain_replies`` it is asked as a plain call
            (:func:`~agents.base.ask_plain`).
    """
    if settings.plain_replies:
        return await ask_plain(model, task, usage=usage, temperature=temperature, settings=settings)
    return await ask(model, render("cot", task=task), usage=usage, temperature=temperature, settings=settings)


class CoTAgent(Agent):
    """Answer a task with one step-by-step call.

    Args:
        model: The sub-agent chat model (any Runnable over messages).
        temperature: Sampling temperature of every call (``None``: the model's own).
        settings: Per-call time-out, concurrency limiter and reply grammar (default: none).
    """

    kind = "cot"
    params_model = CoTParams

    def __init__(
        self,
        model: Runnable,
        *,
        temperature: float | None = DEFAULT_TEMPERATURE,
        settings: CallSettings | None = None,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.settings = settings or CallSettings()

    async def arun(self, task: str) -> AgentResult:
        """One step-by-step call.

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
        return AgentResult(agent=self.kind, thinking=reply.thinking, answer=reply.answer, usage=usage)
