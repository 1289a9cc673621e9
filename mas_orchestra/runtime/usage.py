"""Run accounting: LLM calls and tokens from callbacks (so failed and timed-out runs count too)."""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from pydantic import BaseModel, Field

from agents.base import FORMAT_RETRY_TAG, ModelUsage
from mas_orchestra.runtime.pricing import cost_usd

__all__ = ["ORCHESTRATOR_TAG", "RunUsage", "UsageCallback"]

ORCHESTRATOR_TAG = "mas:orchestrator"


class RunUsage(BaseModel):
    """What one run cost: calls, tokens, dollars and wall time.

    ``format_retries`` counts sub-agent calls that re-asked after an unparseable reply (they are included
    in ``subagent_calls``); constrained decoding should keep it at 0.
    """

    llm_calls: int = 0
    orchestrator_calls: int = 0
    subagent_calls: int = 0
    failed_calls: int = 0
    format_retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    by_model: dict[str, ModelUsage] = Field(default_factory=dict)
    unpriced_models: list[str] = Field(default_factory=list)


class UsageCallback(BaseCallbackHandler):
    """Counts every chat-model call of a run and the tokens its ``usage_metadata`` reports."""

    run_inline = True  # count synchronously, in the order calls finish

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.usage = RunUsage()

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None,
        tags: list[str] | None = None, **kwargs: Any,
    ) -> None:
        inp = out = 0
        name = "unknown"
        for generations in response.generations:
            for gen in generations:
                message = getattr(gen, "message", None)
                meta = getattr(message, "usage_metadata", None) or {}
                inp += int(meta.get("input_tokens", 0) or 0)
                out += int(meta.get("output_tokens", 0) or 0)
                rmeta = getattr(message, "response_metadata", None) or {}
                name = str(rmeta.get("model_name") or rmeta.get("model") or name)
        if name == "unknown" and response.llm_output:
            name = str(response.llm_output.get("model_name") or name)
        with self._lock:
            u = self.usage
            u.llm_calls += 1
            if tags and ORCHESTRATOR_TAG in tags:
                u.orchestrator_calls += 1
            else:
                u.subagent_calls += 1
            if tags and FORMAT_RETRY_TAG in tags:
                u.format_retries += 1
            u.input_tokens += inp
            u.output_tokens += out
            u.total_tokens = u.input_tokens + u.output_tokens
            entry = u.by_model.setdefault(name, ModelUsage())
            entry.calls += 1
            entry.input_tokens += inp
            entry.output_tokens += out

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self.usage.failed_calls += 1

    def snapshot(self, wall_s: float) -> RunUsage:
        with self._lock:
            usage = self.usage.model_copy(deep=True)
        usage.cost_usd, usage.unpriced_models = cost_usd(usage.by_model)
        usage.wall_s = wall_s
        return usage
