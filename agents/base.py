"""The sub-agent call contract shared by every block.

Every sub-agent call asks the model for ``<thinking>…</thinking><answer>…</answer>``, parses the reply
leniently and, when no answer is found, re-asks with a format reminder a bounded number of times before
failing with :class:`SubAgentFormatError`. Results are typed objects that render as readable text downstream.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config
from pydantic import BaseModel, ConfigDict, Field

from agents.echo import is_format_echo
from agents.errors import MasOrchestraError
from agents.limits import CallLimiter
from agents.prompts import render, without_reply_format

__all__ = [
    "DEFAULT_TEMPERATURE",
    "FORMAT_RETRY_TAG",
    "Agent",
    "AgentResult",
    "CallLimiter",
    "CallSettings",
    "ModelUsage",
    "Params",
    "ParsedReply",
    "ReplyConstrainer",
    "SubAgentError",
    "SubAgentFormatError",
    "Temperature",
    "Usage",
    "ask",
    "ask_plain",
    "bind_tools",
    "call_kwargs",
    "message_text",
    "model_name_of",
    "parse_reply",
]

_ORIGINAL_FORMAT_RETRIES = 5
#: Sampling temperature of every block call in the original system.
DEFAULT_TEMPERATURE = 0.5
#: Tag of a model call that re-asks after an unparseable reply (run accounting counts them).
FORMAT_RETRY_TAG = "mas:format_retry"


class SubAgentError(MasOrchestraError, RuntimeError):
    """A sub-agent could not produce an answer (after its retries)."""


class SubAgentFormatError(SubAgentError):
    """The model never produced a parseable ``<answer>`` despite format reminders."""

    def __init__(self, message: str, *, last_reply: str = "") -> None:
        super().__init__(message)
        self.last_reply = last_reply


class ModelUsage(BaseModel):
    """Calls and tokens of one model."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class Usage(BaseModel):
    """Accumulated LLM usage, in total and per model name (the key the price table uses)."""

    calls: int = 0
    format_retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    by_model: dict[str, ModelUsage] = Field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def record(self, model_name: str, message: BaseMessage | None) -> None:
        """Count one model call and the tokens its reply reports in ``usage_metadata``."""
        meta = getattr(message, "usage_metadata", None) or {}
        inp = int(meta.get("input_tokens", 0) or 0)
        out = int(meta.get("output_tokens", 0) or 0)
        self.calls += 1
        self.input_tokens += inp
        self.output_tokens += out
        entry = self.by_model.setdefault(model_name, ModelUsage())
        entry.calls += 1
        entry.input_tokens += inp
        entry.output_tokens += out

    def add(self, other: Usage) -> None:
        """Add another usage record into this one."""
        self.calls += other.calls
        self.format_retries += other.format_retries
        self.tool_calls += other.tool_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        for name, used in other.by_model.items():
            entry = self.by_model.setdefault(name, ModelUsage())
            entry.calls += used.calls
            entry.input_tokens += used.input_tokens
            entry.output_tokens += used.output_tokens


class AgentResult(BaseModel):
    """What one agent produced: its reasoning, its final answer and what it cost.

    Attributes:
        agent: The agent kind that produced it.
        thinking: The reasoning (the reply's ``<thinking>``).
        answer: The final answer (the reply's ``<answer>``).
        usage: Calls and tokens of this agent.
        details: Kind-specific extras as plain data (votes, rounds, tool calls …).
    """

    agent: str
    thinking: str = ""
    answer: str
    usage: Usage = Field(default_factory=Usage)
    details: dict[str, Any] = Field(default_factory=dict)

    def text(self) -> str:
        """Readable rendering used when this result fills a downstream ``${id}`` placeholder.

        Returns:
            ``Reasoning: …`` (when there is any) and ``Answer: …`` lines.
        """
        if self.thinking.strip():
            return f"Reasoning: {self.thinking.strip()}\nAnswer: {self.answer.strip()}"
        return f"Answer: {self.answer.strip()}"

    def __str__(self) -> str:
        return self.text()


class Params(BaseModel):
    """Base of a block's parameter model: the parameters a spec may set, with their defaults and bounds.

    Each block declares its own (``CoTAgent.params_model`` …); the agent registry reads them, so the bounds
    are the caps a spec may ask for. Unknown parameters are errors, not silently ignored.
    """

    model_config = ConfigDict(extra="forbid")


Temperature = Annotated[float, Field(ge=0.0, le=2.0, description="Sampling temperature.")]


@dataclass(frozen=True)
class ParsedReply:
    """A sub-agent reply read as ``<thinking>…</thinking><answer>…</answer>`` (``raw``: the text as written)."""
    thinking: str
    answer: str
    raw: str


_TAG_RE = {
    name: (re.compile(rf"<\s*{name}\s*>", re.I), re.compile(rf"<\s*/\s*{name}\s*>", re.I))
    for name in ("thinking", "answer")
}
#: "Your final answer is 84." inside the answer tags: the format's wording leads in front of the answer itself.
_ANSWER_LEAD_RE = re.compile(
    r"^\s*(?:your|the|my)\s+(?:correct\s+)?final\s+answer\s+(?:is|would\s+be)\s*[:：]?\s+", re.I
)
_ANSWER_LINE_RE = re.compile(r"\b(?:final answer|answer)(?:\*\*)?\s*(?:is)?\s*[:：]\s*(?:\*\*)?(.+)", re.I)


def _tag_content(text: str, name: str, *, last: bool) -> str | None:
    open_re, close_re = _TAG_RE[name]
    opens = list(open_re.finditer(text))
    if not opens:
        return None
    start = opens[-1] if last else opens[0]
    close = close_re.search(text, start.end())
    if close is not None:
        return text[start.end() : close.start()]
    # An unclosed tag runs to the next tag we know, or to the end of the reply.
    nxt = [m.start() for o, c in _TAG_RE.values() for m in (o.search(text, start.end()),) if m]
    return text[start.end() : min(nxt)] if nxt else text[start.end() :]


def _last_boxed(text: str) -> str | None:
    idx = text.rfind("\\boxed{")
    if idx < 0:
        return None
    depth, i = 0, idx + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[idx : j + 1]
    return None


def _json_reply(text: str) -> ParsedReply | None:
    """A reply written as ``{"thinking": …, "answer": …}`` (JSON-schema constrained APIs)."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("answer"), (str, int, float)):
        return None
    answer = str(data["answer"]).strip()
    if not answer:
        return None
    return ParsedReply(thinking=str(data.get("thinking") or "").strip(), answer=answer, raw=text)


def _find_reply(text: str) -> ParsedReply | None:
    """Thinking and answer located in a reply, echo or not (see :func:`parse_reply`)."""
    if not isinstance(text, str):
        text = str(text)
    as_json = _json_reply(text)
    if as_json is not None:
        return as_json
    answer = _tag_content(text, "answer", last=True)
    thinking = _tag_content(text, "thinking", last=False) or ""
    if answer is None or not answer.strip():
        lines = _ANSWER_LINE_RE.findall(text)
        answer = lines[-1] if lines else _last_boxed(text)
        if answer is not None and not thinking:
            thinking = text
    if answer is None or not answer.strip():
        return None
    lead = _ANSWER_LEAD_RE.match(answer)
    if lead is not None and answer[lead.end():].strip():
        answer = answer[lead.end():]
    return ParsedReply(thinking=thinking.strip(), answer=answer.strip(), raw=text)


def parse_reply(text: str) -> ParsedReply | None:
    """Find thinking and answer in a model reply, or ``None`` when no answer can be located.

    Lenient in the ways real models deviate: tag case and spacing, an unclosed ``<answer>``, a missing
    ``<thinking>``; as fallbacks an ``Answer: …`` line or a final ``\\boxed{}``; a JSON ``{"thinking", "answer"}``.
    The format's wording in front of an answer ("Your final answer is 84.") is dropped. An answer that only repeats
    the reply format (:func:`is_format_echo`) is no answer: ``None``, so the caller re-asks.
    """
    found = _find_reply(text)
    if found is None or is_format_echo(found.thinking, found.answer):
        return None
    return found


def model_name_of(model: Any) -> str:
    """Best-effort model identifier for usage accounting and pricing."""
    seen = 0
    while seen < 5:  # unwrap RunnableBinding / RunnableRetry layers
        inner = getattr(model, "bound", None)
        if inner is None:
            break
        model, seen = inner, seen + 1
    for attr in ("model_name", "model", "model_id", "repo_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def bind_tools(model: Runnable, tools: Sequence[Any], **kwargs: Any) -> Runnable:
    """``model.bind_tools(tools)`` that keeps a ``with_retry`` wrapper around the tool-bound model.

    ``RunnableRetry`` forwards ``bind_tools`` to the model inside it and would return a binding
    without the retry; re-wrap so that tool-calling turns are retried like every other call.
    """
    from langchain_core.runnables.retry import RunnableRetry

    if isinstance(model, RunnableRetry):
        return model.model_copy(update={"bound": bind_tools(model.bound, tools, **kwargs)})
    binder = getattr(model, "bind_tools", None)
    if binder is None:
        raise NotImplementedError(f"{type(model).__name__} has no bind_tools")
    return binder(list(tools), **kwargs)


#: ``constrain(model, max_tokens)`` returns the model bound to decode replies in the contract's format.
ReplyConstrainer = Callable[[Runnable, "int | None"], Runnable]


@dataclass
class CallSettings:
    """How sub-agent calls are made: format repairs, time bound, concurrency limit, token cap, and optionally
    ``constrain_reply`` (binds the reply contract to the model: constrained decoding, no format re-asks)."""

    format_retries: int = _ORIGINAL_FORMAT_RETRIES
    call_timeout: float | None = None
    limiter: CallLimiter | asyncio.Semaphore | None = field(default=None, repr=False)
    max_tokens: int | None = None
    constrain_reply: ReplyConstrainer | None = field(default=None, repr=False)
    #: Ask a step-by-step attempt as a plain call and read the reply as its answer (:func:`ask_plain`): for small
    #: models (SmolLM2-135M answered 4 of 6 short questions asked plainly, 1 of 6 under the format grammar).
    plain_replies: bool = False


def message_text(message: Any) -> str:
    """The text of a model reply or chat message, read as :attr:`BaseMessage.text` reads it.

    A :class:`~langchain_core.messages.BaseMessage` gives its ``.text``; a plain string is its own content, a
    chat dict (``{"role", "content"}``, as in TRL completions) has ``"content"``, other objects their
    ``.content``; ``None`` content reads as ``""``.
    """
    if isinstance(message, BaseMessage):
        return str(message.text)
    content = message.get("content") if isinstance(message, Mapping) else getattr(message, "content", message)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # content blocks
        return "".join(
            block if isinstance(block, str) else block["text"]
            for block in content
            if isinstance(block, str)
            or (isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str))
        )
    return str(content)


async def _invoke(
    model: Runnable, messages: Sequence[BaseMessage], kwargs: dict[str, Any], settings: CallSettings,
    *, tags: Sequence[str] = (),
) -> BaseMessage:
    config = None
    if tags:  # add to the tags of the surrounding run (ensure_config reads them from the context)
        config = ensure_config()
        config["tags"] = [*(config.get("tags") or []), *tags]

    async def call() -> BaseMessage:
        coro = model.ainvoke(list(messages), config, **kwargs)
        if settings.call_timeout is not None:
            return await asyncio.wait_for(coro, settings.call_timeout)
        return await coro

    if settings.limiter is None:
        return await call()
    async with settings.limiter:
        return await call()


def call_kwargs(temperature: float | None, settings: CallSettings) -> dict[str, Any]:
    """The per-call keyword arguments of a sub-agent call: its temperature and token cap, where set."""
    kwargs: dict[str, Any] = {}
    if temperature is not None:
        kwargs["temperature"] = temperature
    if settings.max_tokens is not None:
        kwargs["max_tokens"] = settings.max_tokens
    return kwargs


async def ask(
    model: Runnable,
    prompt: str | Sequence[BaseMessage],
    *,
    usage: Usage,
    temperature: float | None = None,
    settings: CallSettings | None = None,
) -> ParsedReply:
    """One sub-agent call: ask, parse, and repair with format reminders; raises on persistent failure.

    With ``settings.plain_replies`` a text prompt is asked plainly instead, without its reply-format
    instructions (:func:`ask_plain`).

    Transport errors (time-outs, connection errors) propagate unchanged, so the retry policy wrapped
    around ``model`` (``with_retry``) or the caller decides what to do with them.
    """
    settings = settings or CallSettings()
    if settings.plain_replies and isinstance(prompt, str):  # a small model: no format to copy, the reply is read
        return await ask_plain(model, without_reply_format(prompt), usage=usage, temperature=temperature,
                               settings=settings)
    messages: list[BaseMessage] = (
        [HumanMessage(content=prompt)] if isinstance(prompt, str) else list(prompt)
    )
    kwargs = call_kwargs(temperature, settings)
    name = model_name_of(model)
    if settings.constrain_reply is not None:
        model = settings.constrain_reply(model, settings.max_tokens)
    reply_text = ""
    for attempt in range(settings.format_retries + 1):
        reply = await _invoke(model, messages, kwargs, settings, tags=(FORMAT_RETRY_TAG,) if attempt else ())
        usage.record(name, reply)
        usage.format_retries += 1 if attempt else 0
        reply_text = message_text(reply)
        found = _find_reply(reply_text)
        if found is not None and not is_format_echo(found.thinking, found.answer):
            return found
        # An echo of the format gets a reminder that says so; a reply without an answer, the format again.
        reminder = render("echo_reminder" if found is not None else "format_reminder")
        messages = [*messages, AIMessage(content=reply_text), HumanMessage(content=reminder)]
    raise SubAgentFormatError(
        f"model {name!r} gave no parseable <answer> of its own after {settings.format_retries + 1} tries; "
        f"last reply began: {reply_text[:120]!r}",
        last_reply=reply_text,
    )


async def ask_plain(
    model: Runnable,
    task: str,
    *,
    usage: Usage,
    temperature: float | None = None,
    settings: CallSettings | None = None,
) -> ParsedReply:
    """One sub-agent call asked as a plain call: the task as the only message, no reply format, no grammar.

    The reply's ``<answer>`` is read when it wrote one; otherwise the whole reply is the answer (its thinking
    empty). A blank reply, or one that only repeats a format's wording (:func:`is_format_echo`), is asked again,
    up to ``settings.format_retries`` times, then :class:`SubAgentFormatError`.

    Args:
        model: the sub-agent chat model.
        task: the task text, sent as it is.
        usage: where the call is counted.
        temperature: sampling temperature of the call (None: the model's default).
        settings: retries, time-out, limiter and token cap (``constrain_reply`` is not used).

    Returns:
        The reply's thinking and answer.

    Raises:
        SubAgentFormatError: every reply was blank or an echo.
    """
    settings = settings or CallSettings()
    kwargs = call_kwargs(temperature, settings)
    name = model_name_of(model)
    reply_text = ""
    for attempt in range(settings.format_retries + 1):
        reply = await _invoke(model, [HumanMessage(content=task)], kwargs, settings,
                              tags=(FORMAT_RETRY_TAG,) if attempt else ())
        usage.record(name, reply)
        usage.format_retries += 1 if attempt else 0
        reply_text = message_text(reply)
        found = _find_reply(reply_text) if "<answer" in reply_text.lower() else None
        if found is None and reply_text.strip():
            found = ParsedReply(thinking="", answer=reply_text.strip(), raw=reply_text)
        if found is not None and not is_format_echo(found.thinking, found.answer):
            return found
    raise SubAgentFormatError(
        f"model {name!r} gave no answer of its own after {settings.format_retries + 1} plain tries; "
        f"last reply began: {reply_text[:120]!r}",
        last_reply=reply_text,
    )


class Agent:
    """Base of the blocks: ``await agent.arun(task)`` returns an :class:`AgentResult`.

    An agent instance is also a LangGraph node: ``builder.add_node("cot", CoTAgent(model))`` reads the
    task from the state key ``task`` (or ``question``) and writes ``result`` and ``answer``.

    Attributes:
        kind: The agent kind's canonical name.
        params_model: The parameters a spec may set for this block (defaults and bounds), read by the registry.
    """

    kind: str = "agent"
    #: The parameters a spec may set for this block (defaults and bounds), read by the agent registry.
    params_model: ClassVar[type[Params]] = Params

    async def arun(self, task: str) -> AgentResult:
        """Solve a (sub-)task.

        Args:
            task: The (sub-)task text.

        Returns:
            The result: reasoning, answer and usage.

        Raises:
            SubAgentError: The model failed or never wrote a parsable reply.
        """
        raise NotImplementedError

    async def __call__(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Run as a LangGraph node: the state's ``task`` (or ``question``) in, ``result`` and ``answer`` out."""
        task = state.get("task") or state.get("question")
        if not isinstance(task, str):
            raise TypeError(f"{type(self).__name__} node needs a 'task' or 'question' string in the state")
        result = await self.arun(task)
        return {"result": result, "answer": result.answer}
