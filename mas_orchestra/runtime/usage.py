"""Run accounting: LLM calls and tokens from callbacks (so failed and timed-out runs count too).

Tokens per model are every reply's ``usage_metadata``, summed per model name (``unknown`` for a reply that
names none); the calls, failed calls and format re-asks, the cost and the wall time are counted alongside
(see :class:`UsageCallback`).
"""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.messages.ai import UsageMetadata, add_usage
from langchain_core.outputs import LLMResult
from pydantic import BaseModel, Field

from agents.base import FORMAT_RETRY_TAG, ModelUsage
from mas_orchestra.runtime.pricing import cost_usd

__all__ = ["ORCHESTRATOR_TAG", "RunUsage", "UsageCallback"]

ORCHESTRATOR_TAG = "mas:orchestrator"


class RunUsage(BaseModel):
    """What one run cost: calls, tokens, dollars and wall time.

    ``format_retries`` counts sub-agent calls that re-asked after an unparseable reply (they are included
    in ``subagent_calls``); constrained decoding should keep it at 0. ``tool_calls`` counts the tool calls the
    tool agents made (LangChain tool runs), ``tool_errors`` those that raised (a timed-out call is cancelled and
    counts as a call only); each agent's ``details["tool_calls"]`` says what each call returned.
    """

    llm_calls: int = 0
    orchestrator_calls: int = 0
    subagent_calls: int = 0
    failed_calls: int = 0
    format_retries: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    by_model: dict[str, ModelUsage] = Field(default_factory=dict)
    unpriced_models: list[str] = Field(default_factory=list)


class UsageCallback(UsageMetadataCallbackHandler):
    """Counts every chat-model call of a run and the tokens of every reply.

    A subclass of :class:`~langchain_core.callbacks.UsageMetadataCallbackHandler` (``usage_metadata`` holds
    the tokens per model, as there), but ``on_llm_end`` is our own: the handler skips any reply whose
    ``response_metadata`` has no ``model_name`` — every user-written or ``python:`` chat model — so its
    tokens would count as 0. Here each reply's ``usage_metadata`` is added under its model name, or under
    ``unknown``. Calls (in total, per model, orchestrator vs sub-agents), failed calls and format re-asks
    (tags of a call) are counted too; prices and wall time come in :meth:`snapshot`.
    """

    run_inline = True  # count synchronously, in the order calls finish

    def __init__(self) -> None:
        super().__init__()
        self._calls_lock = threading.Lock()
        self._calls = RunUsage()  # calls only; tokens live in self.usage_metadata

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """Count a finished model call and the tokens its reply reports (LangChain callback).

        Args:
            response: The call's result.
            **kwargs: The callback's other arguments; ``tags`` tell an orchestrator call from a sub-agent's.
        """
        tags = kwargs.get("tags")
        name = _model_name(response) or "unknown"
        replies = [u for u in (_reply_usage(g) for gens in response.generations for g in gens) if u]
        with self._lock:  # the handler's lock over usage_metadata
            for used in replies:
                known = self.usage_metadata.get(name)
                self.usage_metadata[name] = add_usage(known, used) if known is not None else used
        with self._calls_lock:
            calls = self._calls
            calls.llm_calls += 1
            if tags and ORCHESTRATOR_TAG in tags:
                calls.orchestrator_calls += 1
            else:
                calls.subagent_calls += 1
            if tags and FORMAT_RETRY_TAG in tags:
                calls.format_retries += 1
            calls.by_model.setdefault(name, ModelUsage()).calls += 1

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        """Count a tool call (LangChain callback).

        Args:
            serialized: The tool's description (unused).
            input_str: The tool's input (unused).
            **kwargs: The callback's other arguments (unused).
        """
        with self._calls_lock:
            self._calls.tool_calls += 1

    def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        """Count a failed tool call (LangChain callback).

        Args:
            error: The error (unused).
            **kwargs: The callback's other arguments (unused).
        """
        with self._calls_lock:
            self._calls.tool_errors += 1

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        """Count a failed model call (LangChain callback).

        Args:
            error: The error (unused).
            **kwargs: The callback's other arguments (unused).
        """
        with self._calls_lock:
            self._calls.failed_calls += 1

    def snapshot(self, wall_s: float) -> RunUsage:
        """The run's usage so far: calls, tokens per model (and in total), cost and ``wall_s``.

        Args:
            wall_s: The run's wall-clock seconds so far.
        """
        with self._calls_lock:
            usage = self._calls.model_copy(deep=True)
        tokens = dict(self.usage_metadata)  # the handler replaces entries, never mutates them: a copy is stable
        for name, used in tokens.items():
            entry = usage.by_model.setdefault(name, ModelUsage())
            entry.input_tokens = int(used.get("input_tokens", 0) or 0)
            entry.output_tokens = int(used.get("output_tokens", 0) or 0)
        usage.input_tokens = sum(m.input_tokens for m in usage.by_model.values())
        usage.output_tokens = sum(m.output_tokens for m in usage.by_model.values())
        usage.total_tokens = usage.input_tokens + usage.output_tokens
        usage.cost_usd, usage.unpriced_models = cost_usd(usage.by_model)
        usage.wall_s = wall_s
        return usage


def _reply_usage(generation: Any) -> UsageMetadata | None:
    """The ``usage_metadata`` of one generated reply (None for a text completion or a reply without it)."""
    message = getattr(generation, "message", None)
    return getattr(message, "usage_metadata", None) or None


def _model_name(response: LLMResult) -> str | None:
    """The model name a reply reports, read where langchain-core's handler reads it (so calls and tokens
    are keyed alike)."""
    try:
        message = getattr(response.generations[0][0], "message", None)
    except IndexError:
        return None
    name = (getattr(message, "response_metadata", None) or {}).get("model_name")
    return str(name) if name else None
