"""Test helpers: a scripted chat model that counts calls, in-flight calls and tokens."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

__all__ = ["ScriptedChatModel", "cot_reply"]

Reply = str | BaseException | AIMessage
Responder = Callable[[list[BaseMessage], int], Reply]


def cot_reply(answer: str, thinking: str = "step by step") -> str:
    """A well-formed sub-agent reply.

    Args:
        answer: The ``<answer>`` text.
        thinking: The ``<thinking>`` text.

    Returns:
        ``<thinking>…</thinking><answer>…</answer>``.
    """
    return f"<thinking>{thinking}</thinking><answer>{answer}</answer>"


def _prompt_text(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


class ScriptedChatModel(BaseChatModel):
    """A chat model that replies from a script (tests, examples, offline demos).

    Token usage is reported like a real provider: input tokens = words in the prompt, output tokens = words in
    the reply. Counters: ``calls``, ``in_flight``, ``peak_in_flight``, ``prompts``, ``call_kwargs``.

    Attributes:
        replies: A list (used in order) of strings, ``AIMessage``s or exceptions (raised instead of replying),
            or a function ``(messages, call_index) -> reply``.
        cycle: Start the list again when it runs out.
        delay: Seconds of latency per call (``asyncio.sleep`` on the async path, so concurrent calls overlap).
        input_tokens: A fixed input token count per call, instead of the words in the prompt.
        output_tokens: A fixed output token count per call, instead of the words in the reply.
        model_name: The name usage is reported under.
        tool_calling: Whether ``bind_tools`` works (native tool calls scripted as ``AIMessage(tool_calls=...)``).

    Example:
        ```python
        model = ScriptedChatModel(replies=[cot_reply("391")], delay=0.2)
        ```
    """

    replies: list[Any] | Callable[..., Any] = [cot_reply("42")]  # noqa: RUF012 - pydantic copies defaults
    cycle: bool = True
    delay: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    model_name: str = "scripted"
    #: Whether ``bind_tools`` works (the replies script the tool calls, as ``AIMessage(tool_calls=...)``).
    tool_calling: bool = False

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: int = PrivateAttr(default=0)
    _in_flight: int = PrivateAttr(default=0)
    _peak: int = PrivateAttr(default=0)
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _script: Any = PrivateAttr(default=None)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """The tools as OpenAI schemas in the call's kwargs (so tests can see them) — if ``tool_calling``.

        Args:
            tools: The tools.
            **kwargs: More call arguments to bind.
        """
        if not self.tool_calling:
            return super().bind_tools(tools, **kwargs)
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def calls(self) -> int:
        """Model calls made so far."""
        return self._calls

    @property
    def in_flight(self) -> int:
        """Calls running now."""
        return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most calls that ran at once."""
        return self._peak

    @property
    def prompts(self) -> list[str]:
        """The prompt text of every call, in order."""
        return list(self._prompts)

    @property
    def call_kwargs(self) -> list[dict[str, Any]]:
        """The keyword arguments of every call, in order."""
        return list(self._kwargs)

    def reset(self) -> None:
        """Forget every recorded call and counter."""
        with self._lock:
            self._calls = self._in_flight = self._peak = 0
            self._prompts.clear()
            self._kwargs.clear()
            self._script = None

    def _start(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> int:
        with self._lock:
            index = self._calls
            self._calls += 1
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            self._prompts.append(_prompt_text(messages))
            self._kwargs.append(dict(kwargs))
            return index

    def _finish(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _next_reply(self, messages: list[BaseMessage], index: int) -> Reply:
        if callable(self.replies):
            return self.replies(messages, index)
        with self._lock:
            if self._script is None:
                self._script = itertools.cycle(self.replies) if self.cycle else iter(self.replies)
            try:
                return next(self._script)
            except StopIteration:
                return RuntimeError(f"ScriptedChatModel script exhausted after {len(self.replies)} replies")

    def _result(self, messages: list[BaseMessage], reply: Reply) -> ChatResult:
        if isinstance(reply, BaseException):
            raise reply
        message = reply if isinstance(reply, AIMessage) else AIMessage(content=str(reply))
        text = str(message.content)
        inp = self.input_tokens if self.input_tokens is not None else len(_prompt_text(messages).split())
        out = self.output_tokens if self.output_tokens is not None else len(text.split())
        message = message.model_copy(
            update={
                "usage_metadata": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
                "response_metadata": {**message.response_metadata, "model_name": self.model_name},
            }
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = self._start(messages, kwargs)
        try:
            if self.delay:
                time.sleep(self.delay)
            return self._result(messages, self._next_reply(messages, index))
        finally:
            self._finish()

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = self._start(messages, kwargs)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            return self._result(messages, self._next_reply(messages, index))
        finally:
            self._finish()
