"""The tool block (``ToolAgent``): a bounded loop of model turns over the tools an orchestrator gave it.

Models that support ``bind_tools`` get the tools natively; other models (scripted, embedded) follow a text
protocol: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (read with ``json.loads``, never executed)
or ``<thinking>…</thinking><answer>…</answer>``. The last turn always asks for the final answer. A tool that
raises, times out (``CallSettings.call_timeout``, else ``tool_timeout``), returns something unreadable, or a
tool name the model invents: each becomes the observation the model sees next, never a crashed run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool
from pydantic import Field

from agents.base import (
    DEFAULT_TEMPERATURE,
    Agent,
    AgentResult,
    CallSettings,
    Params,
    ParsedReply,
    Temperature,
    Usage,
    _invoke,
    ask,
    bind_tools,
    call_kwargs,
    message_text,
    model_name_of,
    parse_reply,
)
from agents.prompts import render

__all__ = ["DEFAULT_TOOL_TIMEOUT", "MAX_TOOLS", "ToolAgent", "ToolParams", "describe_tool", "parse_tool_request"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 5
MAX_TURNS = 10
#: The most tools one agent may be given.
MAX_TOOLS = 32
#: Seconds one tool call may take when the run sets no ``call_timeout``.
DEFAULT_TOOL_TIMEOUT = 60.0


class ToolParams(Params):
    """What a spec may set for a tool node (the offered tool names narrow ``tools`` to a ``Literal``)."""

    tools: list[str] = Field(
        default_factory=list, max_length=MAX_TOOLS,
        description="The tools this agent may call, by name (default: all offered tools).",
    )
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS, description="Maximum model turns of the tool loop.")
    temperature: Temperature = DEFAULT_TEMPERATURE


_CALL_RE = re.compile(r"<\s*tool_call\s*>(.*?)(?:<\s*/\s*tool_call\s*>|$)", re.I | re.S)
_ANSWER_TAG_RE = re.compile(r"<\s*answer\s*>", re.I)


def parse_tool_request(text: str) -> tuple[str, dict[str, Any], int] | None:
    """A text-protocol tool call: ``(name, arguments, end offset)``, or None when the reply makes none.

    Reads ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (``"args"`` is accepted for ``"arguments"``,
    an unclosed tag too). A call after an ``<answer>`` tag does not count: the model has decided to answer. A
    call whose JSON cannot be read comes back with the name ``""`` so the model is told what was wrong.

    Args:
        text: A model reply.

    Returns:
        ``(name, arguments, end offset)``, or ``None``.
    """
    match = _CALL_RE.search(text)
    if match is None:
        return None
    answer = _ANSWER_TAG_RE.search(text)
    if answer is not None and answer.start() < match.start():
        return None
    body = match.group(1).strip()
    start = body.find("{")
    try:
        data, _ = json.JSONDecoder().raw_decode(body[start:]) if start >= 0 else (None, 0)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return "", {"_unreadable": body[:200]}, match.end()
    args = data.get("arguments", data.get("args", {}))
    return data["name"].strip(), args if isinstance(args, dict) else {"_unreadable": args}, match.end()


def describe_tool(tool: BaseTool, *, with_arguments: bool = False) -> str:
    """``name: description`` (first paragraph), optionally followed by the arguments' JSON schema.

    Args:
        tool: A LangChain tool.
        with_arguments: Append its arguments' JSON schema (the text protocol needs it).

    Returns:
        The description line(s).
    """
    description = " ".join((tool.description or "").strip().split("\n\n")[0].split()) or "(no description)"
    line = f"- {tool.name}: {description}"
    if with_arguments:
        call_schema: Any = tool.tool_call_schema
        try:
            schema = call_schema.model_json_schema() if hasattr(call_schema, "model_json_schema") else dict(call_schema)
        except Exception:  # a schema we cannot render: the name and description still help
            schema = {}
        props = {k: {kk: vv for kk, vv in v.items() if kk in ("type", "description", "enum")}
                 for k, v in (schema.get("properties") or {}).items()}
        line += f"\n  arguments: {json.dumps(props)}"
    return line


def _result_text(result: Any) -> str:
    """What a tool returned, as the text the model sees (MCP content blocks, dicts, strings …)."""
    if isinstance(result, ToolMessage):
        result = result.content
    if isinstance(result, tuple) and len(result) == 2:  # content_and_artifact
        result = result[0]
    if isinstance(result, str):
        return result
    if isinstance(result, list) and all(isinstance(b, (str, Mapping)) for b in result):
        parts = [b if isinstance(b, str) else str(b.get("text", "")) if b.get("type") == "text" else json.dumps(b)
                 for b in result]
        return "\n".join(p for p in parts if p)
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):
        return repr(result)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " …(cut)"


class ToolAgent(Agent):
    """Answer a task with tools: up to ``max_turns`` model turns, any number of tool calls per turn.

    Args:
        model: a LangChain chat model (or any Runnable taking messages).
        tools: the LangChain tools (``@tool`` functions, ``BaseTool``s, MCP tools) it may call.
        max_turns: model turns, the final answer included.
        temperature: sampling temperature of every call.
        settings: format repairs, time-out and concurrency limit of the calls; ``call_timeout`` also bounds
            each tool call.
        tool_timeout: seconds per tool call when ``settings.call_timeout`` is None.
        mode: ``"auto"`` (native tool calls when ``bind_tools`` works, else text), ``"tools"`` or ``"text"``.
        max_result_chars: each tool result is cut to this many characters before the model sees it.

    ``details`` of the result: ``tool_calls`` (``[{tool, args, ok, error, seconds}]`` in order), ``turns``,
    ``mode``; ``usage.tool_calls`` counts the calls made.
    """

    kind = "tools"
    params_model = ToolParams

    def __init__(
        self,
        model: Runnable,
        tools: Sequence[BaseTool],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        temperature: float | None = DEFAULT_TEMPERATURE,
        settings: CallSettings | None = None,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        mode: Literal["auto", "tools", "text"] = "auto",
        max_result_chars: int = 2000,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if mode not in ("auto", "tools", "text"):
            raise ValueError(f"mode must be 'auto', 'tools' or 'text', not {mode!r}")
        if not tools:
            raise ValueError("a ToolAgent needs at least one tool")
        self.model = model
        self.tools = {tool.name: tool for tool in tools}
        self.max_turns = max_turns
        self.temperature = temperature
        self.settings = settings or CallSettings()
        self.tool_timeout = self.settings.call_timeout or tool_timeout
        self.mode = mode
        self.max_result_chars = max_result_chars

    def _tools_model(self) -> Runnable | None:
        if self.mode == "text":
            return None
        try:
            return bind_tools(self.model, list(self.tools.values()))
        except (NotImplementedError, TypeError, ValueError) as exc:
            if self.mode == "tools":
                raise ValueError(f"mode='tools' but model {model_name_of(self.model)!r} cannot bind tools") from exc
            logger.debug("model cannot bind tools (%s); using the text protocol", exc)
            return None

    async def _turn(self, model: Runnable, messages: Sequence[BaseMessage], usage: Usage) -> BaseMessage:
        reply = await _invoke(model, messages, call_kwargs(self.temperature, self.settings), self.settings)
        usage.record(model_name_of(self.model), reply)
        return reply

    async def _final(self, model: Runnable, messages: Sequence[BaseMessage], usage: Usage) -> ParsedReply:
        return await ask(model, list(messages), usage=usage, temperature=self.temperature, settings=self.settings)

    async def run_tool(self, name: str, args: Any, usage: Usage, log: list[dict[str, Any]]) -> str:
        """Call one tool and return what the model is shown: its result, or what went wrong.

        A tool that raises, times out or is not offered never fails the run: the model reads the problem.

        Args:
            name: The tool's name, as the model wrote it.
            args: Its arguments, as the model wrote them.
            usage: Counts the call (``tool_calls``).
            log: Gets one ``{tool, args, ok, error, seconds}`` entry.

        Returns:
            The observation text.
        """
        tool = self.tools.get(name)
        if tool is None:
            listed = ", ".join(self.tools)
            return f"error: there is no tool {name!r}; the tools are: {listed}" if name else (
                f"error: the tool call could not be read ({args.get('_unreadable', '')!r}); write "
                '<tool_call>{"name": "...", "arguments": {...}}</tool_call>'
            )
        entry: dict[str, Any] = {"tool": name, "args": args, "ok": False, "error": None, "seconds": 0.0}
        log.append(entry)
        usage.tool_calls += 1
        started = time.perf_counter()
        try:
            if not isinstance(args, Mapping) or "_unreadable" in args:
                raise ValueError(f"arguments must be a JSON object, got {args!r}")
            result = await asyncio.wait_for(tool.ainvoke(dict(args), ensure_config()), self.tool_timeout)
            text = _clip(_result_text(result), self.max_result_chars)
            entry["ok"] = True
        except Exception as exc:  # any tool failure is an observation, never a crash
            # A tool cancelled at its time-out may raise its own teardown error (an MCP session's task group)
            # instead of TimeoutError: past the bound, it is the time-out all the same.
            if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or (
                time.perf_counter() - started >= self.tool_timeout
            ):
                entry["error"] = f"timed out after {self.tool_timeout:g} s"
                text = f"error: tool {name!r} did not answer within {self.tool_timeout:g} s"
            else:
                while getattr(exc, "exceptions", None):  # an exception group: its first cause says what failed
                    exc = exc.exceptions[0]  # type: ignore[attr-defined]
                detail = _clip(" ".join(str(exc).split()), 400) or type(exc).__name__
                entry["error"] = f"{type(exc).__name__}: {detail}"
                text = f"error: tool {name!r} failed: {detail}"
        entry["seconds"] = round(time.perf_counter() - started, 4)
        return text

    async def arun(self, task: str) -> AgentResult:
        """Run the bounded tool-calling loop on the task.

        Args:
            task: The (sub-)task text.

        Returns:
            The result: reasoning, answer, usage and ``details`` (``tool_calls`` lists the calls).

        Raises:
            SubAgentError: The model failed or never wrote a parsable reply.
        """
        usage, log = Usage(), []  # type: Usage, list[dict[str, Any]]
        tool_model = self._tools_model()
        native = tool_model is not None
        listing = "\n".join(describe_tool(t, with_arguments=not native) for t in self.tools.values())
        first = render("tools_first", task=task, tools=listing)
        if tool_model is not None:
            reply, turns = await self._tool_loop(tool_model, first, usage, log)
        else:
            reply, turns = await self._text_loop(first, usage, log)
        return AgentResult(
            agent=self.kind, thinking=reply.thinking, answer=reply.answer, usage=usage,
            details={"tool_calls": log, "turns": turns, "mode": "tools" if native else "text"},
        )

    def _instructions(self, protocol: str, turns_left: int) -> str:
        return render("tools_final") if turns_left <= 1 else render(protocol, turns_left=str(turns_left))

    async def _text_loop(self, first: str, usage: Usage, log: list[dict[str, Any]]) -> tuple[ParsedReply, int]:
        # Under constrained decoding a local model's turns are bound to "a reply or a call of an offered tool".
        hook = getattr(self.settings.constrain_reply, "tool_turn", None)
        tools = list(self.tools.values())
        turn_model = self.model if hook is None else hook(self.model, tools, self.settings.max_tokens)
        messages: list[BaseMessage] = [
            HumanMessage(content=f"{first}\n\n{self._instructions('tools_text_protocol', self.max_turns)}")
        ]
        for turn in range(1, self.max_turns + 1):
            if turn == self.max_turns:
                return await self._final(self.model, messages, usage), turn
            text = message_text(await self._turn(turn_model, messages, usage))
            follow_up = self._instructions("tools_text_protocol", self.max_turns - turn)
            request = parse_tool_request(text)
            if request is not None:
                name, args, end = request
                result = await self.run_tool(name, args, usage, log)
                observation = render("tools_observation", tool=name or "the tool call", result=result)
                # Keep the reply only up to the call: anything after it would be an invented result.
                messages += [AIMessage(content=text[:end]), HumanMessage(content=f"{observation}\n\n{follow_up}")]
                continue
            parsed = parse_reply(text)
            if parsed is not None:
                return parsed, turn
            messages += [AIMessage(content=text), HumanMessage(content=f"{render('tools_reminder')}\n\n{follow_up}")]
        raise AssertionError("unreachable: the last turn returns")  # pragma: no cover

    async def _tool_loop(
        self, tool_model: Runnable, first: str, usage: Usage, log: list[dict[str, Any]]
    ) -> tuple[ParsedReply, int]:
        messages: list[BaseMessage] = [
            HumanMessage(content=f"{first}\n\n{self._instructions('tools_tool_protocol', self.max_turns)}")
        ]
        for turn in range(1, self.max_turns + 1):
            if turn == self.max_turns:
                if turn > 1:
                    messages.append(HumanMessage(content=render("tools_final")))
                return await self._final(tool_model, messages, usage), turn
            reply = await self._turn(tool_model, messages, usage)
            calls = list(getattr(reply, "tool_calls", None) or [])
            if not calls:
                text = message_text(reply)
                parsed = parse_reply(text)
                if parsed is not None:
                    return parsed, turn
                repair = [AIMessage(content=text), HumanMessage(content=render("format_reminder"))]
                return await self._final(tool_model, [*messages, *repair], usage), turn
            messages.append(reply)
            for index, call in enumerate(calls):
                name = str(call.get("name") or "")
                result = await self.run_tool(name, call.get("args") or {}, usage, log)
                messages.append(ToolMessage(content=result, tool_call_id=str(call.get("id") or f"call_{turn}_{index}"),
                                            name=name or "unknown"))
            turns_left = self.max_turns - turn
            if turns_left > 1:
                last = messages[-1]
                last.content = f"{last.content}\n\n({turns_left} replies left, the final answer included.)"
        raise AssertionError("unreachable: the last turn returns")  # pragma: no cover
