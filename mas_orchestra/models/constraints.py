"""Constrained decoding: what an orchestrator or sub-agent call must produce, and how each backend is told.

An :class:`OutputConstraint` describes the output (an orchestration of a DoM over a set of agent kinds, or
the sub-agent reply contract). :func:`bind_constraint` attaches it to a chat model in the way its backend
understands:

* local transformers models (``embedded``, ``hf:``; :class:`~mas_orchestra.models.hf_chat.HFChatModel`): the
  constraint itself, applied token by token with xgrammar (staged for orchestrations, so even the
  "``${X}`` needs an edge X -> Y" rule holds; see :mod:`mas_orchestra.spec.grammar`);
* ``vllm:`` servers: the one-piece EBNF grammar in the request's ``structured_outputs`` field;
* OpenAI-style APIs (``openai:``, ``together:``): ``response_format`` with a strict JSON schema of the JSON
  form (orchestrations come back as our JSON spec; replies as ``{"thinking", "answer"}``);
* providers whose structured output is a tool-use schema (``anthropic:``, ``google_genai:``, ``mistralai:`` …;
  :mod:`mas_orchestra.models.providers`): a forced call of one tool whose input schema is that JSON schema,
  its arguments read back as the reply's JSON text.

Any other model cannot be constrained: :func:`bind_constraint` raises :class:`ConstrainedDecodingError`
naming the backend and the switch (``constrained=False`` / ``--no-constrained``), unless falling back was
asked for explicitly (``fallback=True``), which logs a warning. Nothing here imports torch or xgrammar.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableLambda

from agents.base import bind_tools
from mas_orchestra.errors import ConstrainedDecodingError, GrammarError
from mas_orchestra.registry import AgentRegistry, default_registry
from mas_orchestra.spec import Dom
from mas_orchestra.spec.grammar import (
    EDGE_MARKER,
    REPLY_CLOSE,
    REPLY_END,
    GrammarLimits,
    OpenInput,
    agent_markup_chars,
    agent_stage_grammar,
    agent_text_chars,
    edge_grammar,
    edges_chars,
    input_rest_grammar,
    open_input,
    orchestration_grammar,
    orchestration_json_schema,
    reply_closing_grammar,
    reply_grammar,
    reply_json_schema,
    thinking_grammar,
)
from mas_orchestra.spec.grammar.budget import fit_agent, fit_rest_of_input, markup_tokens
from mas_orchestra.spec.grammar.tool_calls import ToolSignature, tool_call_grammar

__all__ = [
    "BACKEND_METADATA_KEY",
    "PROVIDER_METADATA_KEY",
    "Backend",
    "ConstrainedSetting",
    "OrchestrationConstraint",
    "OutputConstraint",
    "ReplyConstrainerHook",
    "ReplyConstraint",
    "ToolTurnConstraint",
    "bind_constraint",
    "constraint_mode",
    "reply_constrainer",
    "structured_output_backend",
    "tool_signatures",
]

log = logging.getLogger(__name__)

#: ``model.metadata[BACKEND_METADATA_KEY]`` says how a chat model takes structured-output requests;
#: ``resolve_model`` sets it for the model strings it builds (``vllm``, ``openai``, ``tools``).
BACKEND_METADATA_KEY = "mas_orchestra_backend"
#: ``model.metadata[PROVIDER_METADATA_KEY]``: the LangChain provider a model string named (for error messages).
PROVIDER_METADATA_KEY = "mas_orchestra_provider"

Backend = Literal["local", "vllm", "openai", "tools"]


@dataclass(frozen=True, eq=False)
class OutputConstraint:
    """Base of constraints: a grammar per token budget, optional stages, and a JSON schema."""

    name: str = "output"

    def grammar(self, max_tokens: int | None = None, *, staged: bool = False) -> str:
        """The EBNF grammar (``root`` rule) for a call that may generate ``max_tokens`` tokens.

        Args:
            max_tokens: The call's token budget (``None``: unbounded).
            staged: Return the first stage's grammar (staged local decoding) instead of the whole one.
        """
        raise NotImplementedError

    def next_stage(self, text: str, remaining: int | None = None, *,
                   stage_starts: Sequence[int] = ()) -> str | None:
        """Grammar to continue with once the current one completed on ``text`` with ``remaining`` tokens
        left (staged decoding), or None when the output is complete.

        Args:
            text: The output so far.
            remaining: Tokens left (``None``: unbounded).
            stage_starts: Tokens left when each stage so far began, oldest first (the current stage's last);
                a stage that continues an earlier one's text is fitted to the budget that one had.
        """
        return None

    def reserve_tokens(self, max_tokens: int | None) -> int:
        """When this many tokens are left, :meth:`closing_grammar` may take over (0 = never).

        Args:
            max_tokens: The call's token budget.
        """
        return 0

    def closing_grammar(self, text: str, remaining: int) -> str | None:
        """A grammar that finishes ``text`` within ``remaining`` tokens, or None to keep the current one.

        Args:
            text: The output so far.
            remaining: Tokens left.
        """
        return None

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema an API model's structured output is constrained by."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class OrchestrationConstraint(OutputConstraint):
    """Orchestrations of one DoM over a registry's kinds, within :class:`GrammarLimits`.

    Local decoding runs in stages — the thinking; then, agent by agent, "write agent k" or (when allowed)
    "stop" / "go to the edges"; then the edges, built from the references the agents wrote — and fits every
    stage to the tokens left: an agent is offered only if it and the largest edge block still fit, with its
    text bounds scaled down as the budget shrinks. So a staged orchestration is complete and valid within
    ``max_new_tokens``.

    Attributes:
        name: The constraint's name.
        dom: The degree of MAS of the orchestrations.
        registry: The agent kinds offered.
        limits: Bounds on agents and text lengths.
        direct_answers: High DoM: the orchestrator may answer right after the thinking, with no agents (low DoM
            always may). Off unless asked for (training rollouts keep their grammar); the Orchestra turns it on.
    """

    name: str = "orchestration"
    dom: Dom = "high"
    registry: AgentRegistry = field(default_factory=lambda: default_registry)
    limits: GrammarLimits = field(default_factory=GrammarLimits)
    direct_answers: bool = False

    def grammar(self, max_tokens: int | None = None, *, staged: bool = False) -> str:
        """The orchestration grammar: one piece, or with ``staged`` the first stage fitted to ``max_tokens``.

        Args:
            max_tokens: The call's token budget (``None``: unbounded).
            staged: Return the first stage (the thinking) instead of the whole grammar.
        """
        if not staged:
            return orchestration_grammar(self.dom, self.registry, self.limits, direct_answer=self.direct_answers)
        chars = self.limits.thinking_chars
        if max_tokens is not None:
            chars = min(chars, max(0, max_tokens // 4))
        return thinking_grammar(chars)

    def next_stage(self, text: str, remaining: int | None = None, *,
                   stage_starts: Sequence[int] = ()) -> str | None:
        """The grammar of the next stage after ``text`` (``None`` when the orchestration is complete).

        Args:
            text: The orchestration so far.
            remaining: Tokens left (``None``: unbounded).
            stage_starts: Tokens left when each stage so far began, oldest first: an agent input that stopped
                at a reference goes on within the bound its agent was given when it began.
        """
        if text.endswith(EDGE_MARKER):
            return edge_grammar(text)
        opened = open_input(text)
        if opened is not None:  # an agent's input stopped at a reference (see _input_to_stage_end): go on with it
            return self._rest_of_input(opened, remaining, stage_starts)
        if text.endswith("</thinking>"):
            k = 1
        elif text.endswith("</agent>") and self.dom == "high":
            k = text.count("</agent>") + 1
        else:
            return None  # the orchestration is complete
        done = k - 1
        limits, fits = fit_agent(k, remaining, dom=self.dom, registry=self.registry, limits=self.limits)
        agent = k <= self.limits.max_agents and fits
        # Right after the thinking the orchestrator may answer directly instead of writing agents (a question it
        # can answer needs no system; as the original's prompts allow); when not even one agent fits the tokens
        # left, that is the only choice. Low DoM's stage grammar has its own direct answer.
        direct = done == 0 and (self.direct_answers or not agent)
        return agent_stage_grammar(k, self.dom, self.registry, limits, agent=agent, stop=done == 1, edges=done >= 2,
                                   direct_answer=direct and self.dom == "high")

    def _rest_of_input(self, opened: OpenInput, remaining: int | None, stage_starts: Sequence[int]) -> str:
        """The stage after a reference in an agent's input (bounds: :func:`fit_rest_of_input`)."""
        kind = self.registry.resolve(opened.block)
        if kind is None:  # only text written under this constraint's grammar reaches here
            raise GrammarError(f"agent A{opened.agent} is a {opened.block!r}, which the orchestration grammar "
                               "does not offer")
        limits, items = fit_rest_of_input(opened, kind, remaining, stage_starts, dom=self.dom,
                                          registry=self.registry, limits=self.limits)
        return input_rest_grammar(opened.agent, kind, limits, dom=self.dom, items=items)

    def max_tokens_hint(self) -> int:
        """Tokens within which the unscaled limits always fit (a generous ``max_new_tokens``)."""
        n = 1 if self.dom == "low" else self.limits.max_agents
        markup = sum(agent_markup_chars(k, self.dom, self.registry) for k in range(1, n + 1)) + edges_chars(n)
        return (self.limits.thinking_chars + n * agent_text_chars(self.registry, self.limits)
                + markup_tokens(markup + 30) + 8)

    def json_schema(self) -> dict[str, Any]:
        """Our JSON spec form as a schema (ids, kinds, parameters) for API models."""
        return orchestration_json_schema(self.dom, self.registry, self.limits)


@dataclass(frozen=True, eq=False)
class ReplyConstraint(OutputConstraint):
    """The sub-agent reply contract ``<thinking>…</thinking><answer>…</answer>``, fitted to the token budget.

    With a budget of ``max_tokens``, the answer may take ``min(answer_chars, max_tokens // 4)`` characters
    and that many tokens plus the closing markup (counted at one token per character) are reserved for it:
    when only the reserve is left and the thinking is still open, decoding is switched to a grammar that
    closes it and writes the answer — so a reply is complete even when the model would have reasoned past
    its budget.

    Attributes:
        name: The constraint's name.
        thinking_chars: Most characters of the thinking.
        answer_chars: Most characters of the answer (before fitting to the budget).
    """

    name: str = "reply"
    thinking_chars: int = 4000
    answer_chars: int = 200

    def _answer_chars(self, max_tokens: int | None) -> int:
        return self.answer_chars if max_tokens is None else max(4, min(self.answer_chars, max_tokens // 4))

    def grammar(self, max_tokens: int | None = None, *, staged: bool = False) -> str:
        """The reply grammar, its answer part fitted to ``max_tokens``.

        Args:
            max_tokens: The call's token budget (``None``: unbounded).
            staged: Unused (a reply has one stage; the closing grammar takes over at the reserve).
        """
        return reply_grammar(self.thinking_chars, self._answer_chars(max_tokens))

    def reserve_tokens(self, max_tokens: int | None) -> int:
        """Tokens kept back for closing the reasoning and writing the answer."""
        # Counted at one token per character, markup included: the closing fits however it is tokenized.
        return 0 if max_tokens is None else self._answer_chars(max_tokens) + len(REPLY_CLOSE) + len(REPLY_END) + 2

    def closing_grammar(self, text: str, remaining: int) -> str | None:
        """The grammar that closes the reasoning and writes the answer within ``remaining`` tokens.

        ``None`` when no closing is needed (already answering, or not started).

        Args:
            text: The reply so far.
            remaining: Tokens left.
        """
        if "</thinking>" in text or not text.startswith("<thinking>"):
            return None  # already answering (its length is bounded), or not started: nothing to cut
        # The text may end inside the closing tag ("…</thin"): continue the tag rather than restart it.
        keep = next((n for n in range(len(REPLY_CLOSE), 0, -1) if text.endswith(REPLY_CLOSE[:n])), 0)
        chars = max(1, min(self.answer_chars, remaining - (len(REPLY_CLOSE) - keep) - len(REPLY_END) - 1))
        return f"root ::= {reply_closing_grammar(REPLY_CLOSE[keep:], chars)}\n"

    def json_schema(self) -> dict[str, Any]:
        """The ``{thinking, answer}`` schema of a reply for API models."""
        return reply_json_schema()




def _innermost(model: Any) -> Any:
    inner = model
    for _ in range(5):  # unwrap RunnableRetry / RunnableBinding layers
        bound = getattr(inner, "bound", None)
        if bound is None:
            break
        inner = bound
    return inner


def structured_output_backend(model: Any) -> Backend | None:
    """How ``model`` takes constraints: ``local``, ``vllm``, ``openai``, ``tools``, or None (it cannot).

    Args:
        model: The chat model (retry and binding wrappers are looked through).
    """
    inner = _innermost(model)
    if getattr(inner, "supports_grammar_constraints", False):
        return "local"
    metadata = getattr(inner, "metadata", None) or {}
    backend = metadata.get(BACKEND_METADATA_KEY)
    if backend in ("vllm", "openai", "tools"):
        return backend  # type: ignore[no-any-return]
    return None


def _backend_name(model: Any) -> str:
    inner = _innermost(model)
    provider = (getattr(inner, "metadata", None) or {}).get(PROVIDER_METADATA_KEY)
    return f"provider {provider!r} ({type(inner).__name__})" if provider else type(inner).__name__


def _tool_reply_as_text(message: Any) -> Any:
    """The forced tool call's arguments as the reply's text (JSON), so that the parsers read it as they read
    a JSON-schema reply; usage and metadata are kept."""
    calls = getattr(message, "tool_calls", None) or []
    if not calls:
        return message
    return AIMessage(
        content=json.dumps(calls[0].get("args") or {}), usage_metadata=message.usage_metadata,
        response_metadata=message.response_metadata, id=message.id,
    )


def _bind_schema_tool(model: Runnable, constraint: OutputConstraint) -> Runnable:
    name = f"mas_orchestra_{constraint.name}"
    tool = {"type": "function", "function": {
        "name": name, "description": f"Write the {constraint.name} in this exact structure.",
        "parameters": constraint.json_schema(),
    }}
    return bind_tools(model, [tool], tool_choice=name) | RunnableLambda(_tool_reply_as_text)


def bind_constraint(
    model: Runnable, constraint: OutputConstraint, *, max_tokens: int | None = None, fallback: bool = False
) -> Runnable:
    """``model`` bound so that its replies follow ``constraint``.

    Args:
        model: The chat model.
        constraint: The constraint.
        max_tokens: The call's token budget.
        fallback: Where the backend cannot take it, log a warning and return ``model`` unconstrained (else
            raise :class:`ConstrainedDecodingError`).
    """
    backend = structured_output_backend(model)
    if backend == "local":
        return model.bind(constraint=constraint)
    if backend == "vllm":
        # vLLM's structured-output request field; the whole grammar in one piece (no staging over HTTP).
        return model.bind(extra_body={"structured_outputs": {"grammar": constraint.grammar(max_tokens)}})
    if backend == "openai":
        schema = constraint.json_schema()
        return model.bind(response_format={
            "type": "json_schema",
            "json_schema": {"name": f"mas_orchestra_{constraint.name}", "schema": schema, "strict": True},
        })
    if backend == "tools":  # providers whose structured output is a tool-use schema (Anthropic, Google …)
        return _bind_schema_tool(model, constraint)
    message = (
        f"{_backend_name(model)} cannot decode under a grammar or JSON schema ({constraint.name}); constrained "
        "decoding works with embedded / hf: models, vllm: servers and providers with structured output (openai:, "
        "anthropic:, google_genai:, together: …; see mas_orchestra.models.providers). Turn it off with "
        "constrained=False (CLI: --no-constrained), or pass constrained='auto' to fall back with a warning"
    )
    if fallback:
        log.warning("%s; running unconstrained", message)
        return model
    raise ConstrainedDecodingError(message)


ConstrainedSetting = Literal["auto"] | bool | None


def constraint_mode(setting: ConstrainedSetting, model: Any) -> Literal["on", "off", "fallback"]:
    """What a ``constrained=`` setting means for ``model``.

    Args:
        setting: ``None`` (the default): on for local models (embedded, hf:), off for the rest; ``True``: on, and
            a backend that cannot do it is an error; ``False``: off; ``"auto"``: on where the backend can,
            elsewhere off with a logged warning (``fallback``).
        model: The chat model.
    """
    if setting is None:
        return "on" if structured_output_backend(model) == "local" else "off"
    if setting is False:
        return "off"
    if setting is True:
        return "on"
    if setting == "auto":
        return "fallback"
    raise ValueError(f"constrained must be True, False, 'auto' or None, got {setting!r}")


def tool_signatures(tools: Sequence[Any]) -> list[ToolSignature]:
    """Name and (argument, JSON type) pairs of LangChain tools, required arguments first, in schema order.

    Args:
        tools: The tools (one whose schema cannot be read is left out).
    """
    signatures = []
    for tool in tools:
        schema: Any = tool.tool_call_schema
        try:
            data = schema.model_json_schema() if hasattr(schema, "model_json_schema") else dict(schema)
        except Exception:  # a schema we cannot read: the tool cannot be written under the grammar
            continue
        props = data.get("properties") or {}
        required = [a for a in data.get("required") or [] if a in props]
        arguments = tuple((arg, str(props[arg].get("type", "object"))) for arg in required or list(props))
        signatures.append((str(tool.name), arguments))
    return signatures


@dataclass(frozen=True, eq=False)
class ToolTurnConstraint(ReplyConstraint):
    """A tool agent's turn on a local model: the reply contract, or one call of an offered tool (text protocol)."""

    name: str = "tool_turn"
    tools: tuple[ToolSignature, ...] = ()

    def grammar(self, max_tokens: int | None = None, *, staged: bool = False) -> str:
        """The reply grammar, or a ``<tool_call>`` of one of the offered tools.

        Args:
            max_tokens: The call's token budget (``None``: unbounded).
            staged: Unused (one stage).
        """
        reply = super().grammar(max_tokens).split("::=", 1)[1].strip()
        calls = tool_call_grammar(self.tools)
        return f"root ::= ({reply})" + (f" | {calls}" if calls else "") + "\n"


class ReplyConstrainerHook:
    """``CallSettings.constrain_reply``: ``hook(model, max_tokens)`` binds the reply contract; ``hook.tool_turn(
    model, tools, max_tokens)`` binds a tool agent's turn (reply or tool call) on local models.

    Args:
        fallback: Decode freely, with a logged warning, where the backend cannot take the constraint.
    """

    def __init__(self, fallback: bool) -> None:
        self.fallback = fallback

    def __call__(self, target: Runnable, max_tokens: int | None) -> Runnable:
        """``target`` bound to the reply grammar (the fallback mode decodes freely where it cannot)."""
        return bind_constraint(target, ReplyConstraint(), max_tokens=max_tokens, fallback=self.fallback)

    def tool_turn(self, target: Runnable, tools: Sequence[Any], max_tokens: int | None) -> Runnable:
        """``target`` bound to the tool-turn grammar for local models; API models call tools natively.

        Args:
            target: The chat model.
            tools: The tools offered.
            max_tokens: The turn's token budget.
        """
        if structured_output_backend(target) != "local":
            return target  # API models call tools natively; their text turns stay free
        constraint = ToolTurnConstraint(tools=tuple(tool_signatures(tools)))
        return bind_constraint(target, constraint, max_tokens=max_tokens, fallback=self.fallback)


def reply_constrainer(mode: Literal["on", "off", "fallback"], model: Any = None) -> Any:
    """The ``CallSettings.constrain_reply`` hook for a mode (None when off).

    Args:
        mode: What :func:`constraint_mode` said.
        model: If given, checks now that its backend can take the reply constraint (raising
            :class:`ConstrainedDecodingError` in mode ``on``), rather than at the first sub-agent call.
    """
    if mode == "off":
        return None
    fallback = mode == "fallback"
    if model is not None:
        bind_constraint(model, ReplyConstraint(), fallback=fallback)

    return ReplyConstrainerHook(fallback)
