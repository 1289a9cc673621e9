"""The model calls of a live run, per node: prompt, reply, tokens and seconds, published as they end.

A LangChain callback handler passed to :meth:`Orchestra.astream`: LangGraph puts the running node's name in
each call's metadata (``langgraph_node``; inside the spec subgraph that is the spec's node id), and the
orchestrator's call carries the runtime's orchestrator tag.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler

from mas_orchestra.runtime.usage import ORCHESTRATOR_TAG
from mas_orchestra.studio.common import clip

__all__ = ["ORCHESTRATOR_NODE", "CallCollector"]

#: The node name the page shows the orchestrator's call under.
ORCHESTRATOR_NODE = "orchestrator"
_TEXT_CHARS = 20_000


def _message_text(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return str(content)


class CallCollector(AsyncCallbackHandler):
    """Turns chat-model callbacks into ``call`` events passed to ``emit``.

    Args:
        emit: Receives each event (``call_start``, then the call's end).
    """

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self._open: dict[UUID, dict[str, Any]] = {}

    async def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: UUID,
        parent_run_id: UUID | None = None, tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a model call's record: its node, prompt and start time (LangChain callback).

        Args:
            serialized: The model's description (unused).
            messages: The prompt's message batches.
            run_id: The call's id.
            parent_run_id: The parent run's id (unused).
            tags: The call's tags (the orchestrator's tag marks its calls).
            metadata: The call's metadata (``langgraph_node`` names a sub-agent's node).
            **kwargs: The callback's other arguments (unused).
        """
        metadata = metadata or {}
        node = ORCHESTRATOR_NODE if ORCHESTRATOR_TAG in (tags or []) else str(metadata.get("langgraph_node", "?"))
        prompt = "\n\n".join(_message_text(m) for batch in messages for m in batch)
        self._open[run_id] = {"node": node, "prompt": clip(prompt, _TEXT_CHARS), "started": time.perf_counter()}
        self.emit({"type": "call_start", "node": node, "call": str(run_id)})

    async def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the call's record with its reply and tokens (LangChain callback).

        Args:
            response: The call's result.
            run_id: The call's id.
            **kwargs: The callback's other arguments (unused).
        """
        call = self._open.pop(run_id, None)
        if call is None:
            return
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        message = getattr(generation, "message", None)
        reply = _message_text(message) if message is not None else str(getattr(generation, "text", ""))
        usage = getattr(message, "usage_metadata", None) or {}
        self._finish(run_id, call, reply=clip(reply, _TEXT_CHARS), tokens=int(usage.get("total_tokens") or 0))

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the call's record with the error (LangChain callback).

        Args:
            error: The error.
            run_id: The call's id.
            **kwargs: The callback's other arguments (unused).
        """
        call = self._open.pop(run_id, None)
        if call is not None:
            self._finish(run_id, call, reply="", tokens=0, error=f"{type(error).__name__}: {error}")

    def abandon(self, reason: str) -> None:
        """End the calls still open when the run stopped (a cancelled call reports no end of its own).

        Args:
            reason: Why the run stopped (in each call's error).
        """
        for run_id in list(self._open):
            self._finish(run_id, self._open.pop(run_id), reply="", tokens=0, error=f"no reply: {reason}")

    def _finish(self, run_id: UUID, call: dict[str, Any], **fields: Any) -> None:
        seconds = round(time.perf_counter() - call.pop("started"), 3)
        self.emit({"type": "call", "call": str(run_id), **call, "seconds": seconds, **fields})
