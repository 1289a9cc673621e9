"""The search block (original ``WebSearchAgent``): a bounded loop of model turns with a search tool.

The first search is made from the task text itself before the model's first turn, so even a weak model
starts from evidence. Models that support ``bind_tools`` get ``web_search`` and ``think`` tools; other
models follow a text protocol (``<search>query</search>`` or ``<answer>…</answer>``). The last turn
always asks for the final answer. Search failures are shown to the model as observations.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
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
from agents.search.backends import Hit, SearchBackend, asearch, make_backend

__all__ = ["THINK_TOOL", "WEB_SEARCH_TOOL", "SearchParams", "WebSearchAgent", "parse_search_request"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 5
DEFAULT_K = 5
#: The most model turns and hits per search a spec may ask for.
MAX_TURNS = 10
MAX_K = 10


class SearchParams(Params):
    """What a spec may set for a search node."""

    max_turns: int = Field(
        DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS, description="Maximum model turns of the tool loop."
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="Search results per query.")
    temperature: Temperature = DEFAULT_TEMPERATURE

WEB_SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search for documents about a query. Returns the top results, each with a number, "
        "a title and a passage.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "a short, specific search query"}},
            "required": ["query"],
        },
    },
}
THINK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "think",
        "description": "Write down a thought (a plan, a deduction, what is still missing). It changes "
        "nothing and returns nothing new; use it to reason before searching again or answering.",
        "parameters": {
            "type": "object",
            "properties": {"thought": {"type": "string", "description": "your thought"}},
            "required": ["thought"],
        },
    },
}

_SEARCH_TAG_RE = re.compile(
    r"<\s*(?:search|web_search|query)\s*>(.*?)"
    r"(?:<\s*/\s*(?:search|web_search|query)\s*>|(?=<)|$)",
    re.I | re.S,
)
_SEARCH_CALL_RE = re.compile(r"\bweb_search\s*\(\s*(?:query\s*=\s*)?([\"'])(.+?)\1\s*\)", re.I | re.S)
_ANSWER_TAG_RE = re.compile(r"<\s*answer\s*>", re.I)
_CITATION_RE = re.compile(r"\[(\d{1,3})\]")


def parse_search_request(text: str) -> tuple[str, int] | None:
    """Find a search request in a text-protocol reply: ``(query, end offset)`` or ``None``.

    Accepts ``<search>q</search>`` (also ``<web_search>``/``<query>``, unclosed tags) and a written-out
    ``web_search("q")`` call. A request that comes after an ``<answer>`` tag does not count: the model
    has decided to answer.

    Args:
        text: The model's reply.

    Returns:
        The query (whitespace collapsed, quotes stripped) and the offset where the request ends; ``None`` when
        there is no non-empty request.
    """
    found: list[tuple[int, str, int]] = []
    m = _SEARCH_TAG_RE.search(text)
    if m and m.group(1).strip():
        found.append((m.start(), m.group(1), m.end()))
    c = _SEARCH_CALL_RE.search(text)
    if c and c.group(2).strip():
        found.append((c.start(), c.group(2), c.end()))
    if not found:
        return None
    start, query, end = min(found)
    answer = _ANSWER_TAG_RE.search(text)
    if answer is not None and answer.start() < start:
        return None
    query = " ".join(query.split()).strip("\"' ")
    return (query, end) if query else None


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if limit <= 0 or len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.8:  # end on a word when that loses little
        cut = cut[:space]
    return cut.rstrip() + " …"


class _Run:
    """State of one ``arun``: usage, numbered sources, the search log."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.numbers: dict[str, int] = {}
        self.sources: list[dict[str, str]] = []
        self.searches: list[dict[str, Any]] = []
        self.thoughts: list[str] = []
        self.turns = 0


class WebSearchAgent(Agent):
    """Answer a task by searching: up to ``max_turns`` model turns, ``k`` hits per search.

    Args:
        model: a LangChain chat model (or any Runnable taking messages).
        backend: any :class:`~agents.search.backends.SearchBackend`, or a spec for
            :func:`~agents.search.backends.make_backend` (``"bm25:<path>"``, ``"ddg"``, ``"tavily"``).
        max_turns: model turns, the final answer included (original: 5).
        k: hits per search (original: 5).
        temperature: sampling temperature of every call (original: 0.5).
        max_result_chars: each passage is cut to this many characters before the model sees it.
        settings: format repairs, time-out and concurrency limit of the calls.
        summarize: condense each search's results with an extra model call instead of showing passages.
        mode: ``"auto"`` (tools when ``bind_tools`` works, else text), ``"tools"`` or ``"text"``.
        max_query_chars: the task text used as the first query is cut to this length.

    ``details`` of the result: ``sources`` (``[{id, title, url}]`` of every result shown, in order,
    numbered from 1 as the model saw them), ``cited`` (the sources whose ``[n]`` the reply mentions),
    ``searches`` (query, hit count, error), ``turns``, ``mode`` and ``thoughts`` (think-tool calls).
    """

    kind = "search"
    params_model = SearchParams

    def __init__(
        self,
        model: Runnable,
        backend: SearchBackend | str,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        k: int = DEFAULT_K,
        temperature: float | None = DEFAULT_TEMPERATURE,
        max_result_chars: int = 1500,
        settings: CallSettings | None = None,
        summarize: bool = False,
        mode: Literal["auto", "tools", "text"] = "auto",
        max_query_chars: int = 400,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if k < 1:
            raise ValueError("k must be >= 1")
        if mode not in ("auto", "tools", "text"):
            raise ValueError(f"mode must be 'auto', 'tools' or 'text', not {mode!r}")
        self.model = model
        self.backend: SearchBackend = make_backend(backend) if isinstance(backend, str) else backend
        self.max_turns = max_turns
        self.k = k
        self.temperature = temperature
        self.max_result_chars = max_result_chars
        self.settings = settings or CallSettings()
        self.summarize = summarize
        self.mode = mode
        self.max_query_chars = max_query_chars
        self._tool_model: Runnable | None = None
        self._tools_checked = False

    # -- model plumbing ------------------------------------------------------------------------------

    def _tools_model(self) -> Runnable | None:
        """The model with the tools bound, or ``None`` when it cannot take tools."""
        if self.mode == "text":
            return None
        if not self._tools_checked:
            self._tools_checked = True
            try:
                self._tool_model = bind_tools(self.model, [WEB_SEARCH_TOOL, THINK_TOOL])
            except (NotImplementedError, TypeError, ValueError) as exc:
                logger.debug("model cannot bind tools (%s); using the text protocol", exc)
            if self._tool_model is None and self.mode == "tools":
                name = model_name_of(self.model)
                raise ValueError(f"mode='tools' but model {name!r} does not support bind_tools")
        return self._tool_model

    async def _call(self, model: Runnable, messages: Sequence[BaseMessage], run: _Run) -> BaseMessage:
        """One model turn whose reply may be a search request: same time-out and limiter as ``ask``."""
        reply = await _invoke(model, messages, call_kwargs(self.temperature, self.settings), self.settings)
        run.usage.record(model_name_of(self.model), reply)
        return reply

    async def _ask(self, model: Runnable, messages: Sequence[BaseMessage], run: _Run) -> ParsedReply:
        return await ask(model, list(messages), usage=run.usage, temperature=self.temperature,
                         settings=self.settings)

    # -- searching -----------------------------------------------------------------------------------

    def _format_hits(self, hits: Sequence[Hit], run: _Run) -> str:
        if not hits:
            return "No results."
        blocks = []
        for hit in hits:
            key = hit.id or hit.url or hit.title
            seen = key in run.numbers
            if not seen:
                run.numbers[key] = len(run.numbers) + 1
                run.sources.append(hit.source())
            number = run.numbers[key]
            head = f"[{number}] {hit.title or '(untitled)'}" + (f" — {hit.url}" if hit.url else "")
            if seen:
                blocks.append(f"{head} (shown above)")
            else:
                blocks.append(f"{head}\n{_clip(hit.text, self.max_result_chars)}")
        return "\n\n".join(blocks)

    async def _search(self, query: str, task: str, run: _Run) -> str:
        """Run one search and return what the model is shown: passages, a summary or the failure."""
        entry: dict[str, Any] = {"query": query, "hits": 0, "error": None}
        run.searches.append(entry)
        try:
            hits = await asearch(self.backend, query, self.k)
        except Exception as exc:  # any backend failure is an observation, never a crash
            logger.info("search %r failed: %s", query, exc)
            entry["error"] = f"{type(exc).__name__}: {exc}"
            return f"search failed: {exc}"
        hits = hits[: self.k]
        entry["hits"] = len(hits)
        text = self._format_hits(hits, run)
        if self.summarize and hits:
            prompt = render("search_summarize", task=task, query=query, results=text)
            try:
                summary = await self._ask(self.model, [HumanMessage(content=prompt)], run)
            except Exception as exc:  # fall back to the passages themselves
                logger.info("summarising results of %r failed: %s", query, exc)
            else:
                text = summary.answer
        return text

    # -- the loop ------------------------------------------------------------------------------------

    async def arun(self, task: str) -> AgentResult:
        """Search (the first query is the task itself), read the hits and answer with sources.

        Args:
            task: The (sub-)task text.

        Returns:
            The result: reasoning, answer, usage and ``details`` (sources, searches, turns).

        Raises:
            SubAgentError: The model failed or never wrote a parsable reply.
        """
        run = _Run()
        first_query = " ".join(task.split())[: self.max_query_chars]
        first = render("search_first", task=task, results=await self._search(first_query, task, run))
        tool_model = self._tools_model()
        if tool_model is not None:
            reply, mode = await self._tool_loop(tool_model, first, task, run), "tools"
        else:
            reply, mode = await self._text_loop(first, task, run), "text"
        thinking = reply.thinking
        # Results are numbered [n] in the prompts and the model is asked to cite them; the cited ones are
        # named in the reasoning so that a downstream agent sees where the answer came from.
        numbers = {int(n) for n in _CITATION_RE.findall(f"{reply.thinking} {reply.answer}")}
        cited = [s for i, s in enumerate(run.sources, 1) if i in numbers]
        if cited or run.sources:
            named = "; ".join(s["title"] or s["url"] or s["id"] for s in (cited or run.sources)[:8])
            thinking = f"{thinking}\nSources: {named}".strip()
        return AgentResult(
            agent=self.kind,
            thinking=thinking,
            answer=reply.answer,
            usage=run.usage,
            details={
                "sources": run.sources,
                "cited": cited,
                "searches": run.searches,
                "turns": run.turns,
                "mode": mode,
                "thoughts": run.thoughts,
            },
        )

    def _instructions(self, protocol: str, turns_left: int) -> str:
        if turns_left <= 1:
            return render("search_final")
        return render(protocol, turns_left=str(turns_left))

    async def _text_loop(self, first: str, task: str, run: _Run) -> ParsedReply:
        messages: list[BaseMessage] = [
            HumanMessage(content=f"{first}\n\n{self._instructions('search_text_protocol', self.max_turns)}")
        ]
        for turn in range(1, self.max_turns + 1):
            run.turns = turn
            if turn == self.max_turns:
                return await self._ask(self.model, messages, run)
            reply = await self._call(self.model, messages, run)
            text = message_text(reply)
            turns_left = self.max_turns - turn
            request = parse_search_request(text)
            if request is not None:
                query, end = request
                # Keep the reply only up to the request: anything after it would be invented results.
                observation = render(
                    "search_observation", query=query, results=await self._search(query, task, run)
                )
                follow_up = self._instructions("search_text_protocol", turns_left)
                messages += [
                    AIMessage(content=text[:end]),
                    HumanMessage(content=f"{observation}\n\n{follow_up}"),
                ]
                continue
            parsed = parse_reply(text)
            if parsed is not None:
                return parsed
            follow_up = self._instructions("search_text_protocol", turns_left)
            messages += [
                AIMessage(content=text),
                HumanMessage(content=f"{render('search_reminder')}\n\n{follow_up}"),
            ]
        raise AssertionError("unreachable: the last turn returns")  # pragma: no cover

    async def _tool_loop(self, tool_model: Runnable, first: str, task: str, run: _Run) -> ParsedReply:
        messages: list[BaseMessage] = [
            HumanMessage(content=f"{first}\n\n{self._instructions('search_tool_protocol', self.max_turns)}")
        ]
        for turn in range(1, self.max_turns + 1):
            run.turns = turn
            if turn == self.max_turns:
                if turn > 1:
                    messages.append(HumanMessage(content=render("search_final")))
                return await self._ask(tool_model, messages, run)
            reply = await self._call(tool_model, messages, run)
            calls = list(getattr(reply, "tool_calls", None) or [])
            if not calls:
                text = message_text(reply)
                parsed = parse_reply(text)
                if parsed is not None:
                    return parsed
                # No tool call and no answer: the usual format repair, with the tools still bound.
                repair = [AIMessage(content=text), HumanMessage(content=render("format_reminder"))]
                return await self._ask(tool_model, [*messages, *repair], run)
            messages.append(reply)
            tool_messages = [await self._run_tool(call, i, turn, task, run) for i, call in enumerate(calls)]
            turns_left = self.max_turns - turn
            if turns_left > 1:  # the model should know its budget; the last turn gets its own message
                last = tool_messages[-1]
                last.content = f"{last.content}\n\n({turns_left} replies left, the final answer included.)"
            messages.extend(tool_messages)
        raise AssertionError("unreachable: the last turn returns")  # pragma: no cover

    async def _run_tool(
        self, call: Mapping[str, Any], index: int, turn: int, task: str, run: _Run
    ) -> ToolMessage:
        name = str(call.get("name") or "")
        args = call.get("args") or {}
        call_id = str(call.get("id") or f"call_{turn}_{index}")
        if not isinstance(args, Mapping):
            args = {}
        if name == "web_search":
            query = args.get("query")
            if not isinstance(query, str) or not query.strip():
                content = "error: web_search needs a non-empty 'query' string"
            else:
                query = " ".join(query.split())
                results = await self._search(query, task, run)
                content = render("search_observation", query=query, results=results)
        elif name == "think":
            thought = str(args.get("thought") or "")
            run.thoughts.append(thought)
            content = "Thought noted."
        else:
            content = f"error: unknown tool {name!r}; the tools are web_search(query) and think(thought)"
        return ToolMessage(content=content, tool_call_id=call_id, name=name or "unknown")
