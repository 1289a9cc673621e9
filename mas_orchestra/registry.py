"""The registry of agent kinds: the single source the prompts, the validator and the compiler read.

Each kind has a canonical name (``cot``), the block name the orchestrator writes (``CoTAgent``),
aliases (including the original training configuration's archive names such as ``COT_SC``), a
description, a pydantic parameter model whose bounds are the caps a spec may ask for (a built-in kind's is
its block's ``params_model``, declared in :mod:`agents`), and a factory that builds the runnable agent.
Users add their own kinds with :func:`register_agent`, with a model derived from :class:`Params`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.base import Agent, AgentResult, CallSettings, Params
from agents.cot import CoTAgent, CoTParams
from agents.debate import DebateAgent, DebateParams
from agents.reflexion import ReflexionAgent, ReflexionParams
from agents.search import WebSearchAgent
from agents.search.agent import SearchParams
from agents.self_consistency import SCAgent, SCParams

__all__ = [
    "BASELINE_DEBATE_ROLES",
    "AgentKind",
    "AgentRegistry",
    "BuildContext",
    "CoTParams",
    "DebateParams",
    "Params",
    "ReflexionParams",
    "SCParams",
    "SearchParams",
    "default_registry",
    "normalize_agent_name",
    "offered_registry",
    "register_agent",
]


@dataclass
class BuildContext:
    """What a factory gets besides model and parameters.

    Attributes:
        node_id: The id of the node being built.
        settings: The per-call settings (time-out, concurrency limiter, reply grammar).
        search: The search backend, if any.
    """

    node_id: str
    settings: CallSettings = field(default_factory=CallSettings)
    search: Any = None


class RunnableAgent(Protocol):
    """What a factory may return: an object whose ``arun(task)`` answers a (sub-)task."""

    async def arun(self, task: str) -> AgentResult | str:
        """Answer a (sub-)task.

        Args:
            task: The prompt task (see :func:`~mas_orchestra.compile.render_task`).

        Returns:
            The agent's result, or its answer as plain text.
        """
        ...


AgentFactory = Callable[[Any, Any, BuildContext], "RunnableAgent | Callable[[str], Awaitable[Any]]"]


@dataclass(frozen=True)
class AgentKind:
    """One registered agent kind (see :func:`register_agent`).

    Attributes:
        name: The canonical name (lower case), used in JSON specs.
        block: The block name written in orchestration text (e.g. ``CoTAgent``).
        description: What the orchestrator's prompt says about it.
        params: Its parameter model: the defaults and the caps a spec may ask for.
        factory: ``factory(model, params, ctx)`` builds the runnable agent of a node.
        aliases: More names it is found by (case- and punctuation-insensitive).
        xml_tags: Parameter name → the tag it is written with in orchestration text, where they differ.
        needs_search: Offered and compiled only with a search backend.
        models: A pool of sub-agent models by name (``(name, model)`` pairs): the node's ``model`` parameter
            picks one (see :func:`mas_orchestra.offers.with_pool`); empty: the node runs on the model it is
            compiled with.
    """

    name: str
    block: str
    description: str
    params: type[Params]
    factory: AgentFactory
    aliases: tuple[str, ...] = ()
    xml_tags: dict[str, str] = field(default_factory=dict)
    needs_search: bool = False
    #: A pool of sub-agent models by name (``(name, model)`` pairs): the node's ``model`` parameter picks one
    #: (see :func:`mas_orchestra.offers.with_pool`); empty: the node runs on the model it is compiled with.
    models: tuple[tuple[str, Any], ...] = ()

    def xml_tag(self, param: str) -> str:
        """The tag this parameter is written with in the orchestration text.

        Args:
            param: A field name of :attr:`params`.

        Returns:
            The tag (the name itself unless :attr:`xml_tags` renames it).
        """
        return self.xml_tags.get(param, param)

    def param_for_tag(self, tag: str) -> str:
        """The parameter an orchestration-text tag holds (the inverse of :meth:`xml_tag`).

        Args:
            tag: A tag inside ``<required_arguments>``.

        Returns:
            The parameter name.
        """
        for param, written in self.xml_tags.items():
            if written == tag:
                return param
        return tag

    def required_params(self) -> list[str]:
        """The parameters a spec must give (those without a default).

        Returns:
            Field names of :attr:`params`.
        """
        return [name for name, info in self.params.model_fields.items() if info.is_required()]


def normalize_agent_name(name: str) -> str:
    """Lower-case and drop everything but letters and digits: ``COT_SC`` and ``cot-sc`` both ``cotsc``.

    Args:
        name: An agent name or alias.

    Returns:
        The key names are compared by.
    """
    return re.sub(r"[^a-z0-9]", "", name.lower())


class AgentRegistry:
    """Agent kinds by canonical name, resolvable by any alias (case- and punctuation-insensitive).

    Args:
        kinds: The kinds to start with.

    Raises:
        ValueError: Two kinds share a name or alias.
    """

    def __init__(self, kinds: Iterable[AgentKind] = ()) -> None:
        self._kinds: dict[str, AgentKind] = {}
        self._alias: dict[str, str] = {}
        self._lock = threading.Lock()
        for kind in kinds:
            self.add(kind)

    def add(self, kind: AgentKind, *, replace: bool = False) -> AgentKind:
        """Register a kind under its name, block name and aliases.

        Args:
            kind: The kind.
            replace: Replace a kind registered under the same name or aliases instead of refusing it.

        Returns:
            ``kind``.

        Raises:
            ValueError: A name or alias is taken by another kind and ``replace`` is false.
        """
        keys = {normalize_agent_name(a) for a in (kind.name, kind.block, *kind.aliases)}
        keys.discard("")
        with self._lock:
            if not replace:
                taken = sorted(k for k in keys if k in self._alias and self._alias[k] != kind.name)
                if kind.name in self._kinds or taken:
                    raise ValueError(
                        f"agent kind {kind.name!r} clashes with registered names {taken or [kind.name]}; "
                        "pass replace=True to override"
                    )
            self._kinds[kind.name] = kind
            for key in keys:
                self._alias[key] = kind.name
        return kind

    def resolve(self, name: str) -> AgentKind | None:
        """The kind for any of its names, or ``None``.

        Args:
            name: A canonical name, block name or alias, in any case.

        Returns:
            The kind, or ``None`` when no kind has that name.
        """
        canonical = self._alias.get(normalize_agent_name(str(name)))
        return self._kinds.get(canonical) if canonical else None

    def get(self, name: str) -> AgentKind:
        """The kind for a name.

        Args:
            name: A canonical name, block name or alias, in any case.

        Returns:
            The kind.

        Raises:
            KeyError: An unknown name (the message lists the valid ones).
        """
        kind = self.resolve(name)
        if kind is None:
            raise KeyError(f"unknown agent {name!r}; valid: {', '.join(self.block_names())}")
        return kind

    def block_names(self) -> list[str]:
        """The block names of the registered kinds, in registration order.

        Returns:
            E.g. ``["CoTAgent", "SCAgent", …]``.
        """
        return [k.block for k in self._kinds.values()]

    def kinds(self) -> list[AgentKind]:
        """The registered kinds, in registration order.

        Returns:
            A new list.
        """
        return list(self._kinds.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve(name) is not None

    def copy(self) -> AgentRegistry:
        """A registry with the same kinds; adding to it leaves this one unchanged.

        Returns:
            The copy.
        """
        return AgentRegistry(self._kinds.values())

    def subset(self, names: Iterable[str]) -> AgentRegistry:
        """A registry holding only the named kinds.

        Args:
            names: Any of each kind's names.

        Returns:
            The new registry.

        Raises:
            KeyError: An unknown name (the message lists the valid ones).
        """
        return AgentRegistry(self.get(n) for n in names)

    def without_search(self) -> AgentRegistry:
        """The kinds that need no search backend (what an orchestrator is offered without one).

        Returns:
            The new registry.
        """
        return AgentRegistry(k for k in self._kinds.values() if not k.needs_search)


def _block(block: Callable[..., Agent]) -> AgentFactory:
    """The factory of a built-in block: its parameters, as its ``params_model`` validated them, are its
    keyword arguments (so a default or bound is declared once, in the block)."""

    def build(model: Any, params: Params, ctx: BuildContext) -> Agent:
        return block(model, **dict(params), settings=ctx.settings)

    return build


def _search(model: Any, params: Params, ctx: BuildContext) -> Agent:
    return WebSearchAgent(model, ctx.search, **dict(params), settings=ctx.settings)


BUILTIN_KINDS = (
    AgentKind(
        name="cot",
        block="CoTAgent",
        description="Chain-of-thought: solves the (sub-)task with one step-by-step reasoning call. "
        "Cheapest; good for simple, well-defined steps.",
        params=CoTAgent.params_model,
        factory=_block(CoTAgent),
        aliases=("COT", "chain_of_thought", "chainofthoughtagent"),
    ),
    AgentKind(
        name="sc",
        block="SCAgent",
        description="Self-consistency: samples several chain-of-thought solutions and returns the "
        "majority answer. More reliable than CoT on tasks with one checkable answer; costs `samples` calls.",
        params=SCAgent.params_model,
        factory=_block(SCAgent),
        aliases=("COT_SC", "self_consistency", "selfconsistencyagent"),
    ),
    AgentKind(
        name="reflexion",
        block="ReflexionAgent",
        description="Reflexion: answers, has a critic check the answer, and refines it until the critic "
        "accepts or the rounds run out. Good for error-prone multi-step problems.",
        params=ReflexionAgent.params_model,
        factory=_block(ReflexionAgent),
        aliases=("Reflexion", "reflection", "self_refine"),
    ),
    AgentKind(
        name="debate",
        block="DebateAgent",
        description="Debate: several agents with the given roles argue over rounds, seeing each other's "
        "reasoning, and a judge decides. Strong on hard reasoning; the most expensive block.",
        params=DebateAgent.params_model,
        factory=_block(DebateAgent),
        aliases=("LLM_debate", "llmdebateagent", "multi_agent_debate"),
        xml_tags={"roles": "debate_roles"},
    ),
    AgentKind(
        name="search",
        block="WebSearchAgent",
        description="Web search: searches for evidence (web or a local corpus) over several turns and "
        "answers with sources. Use it for facts the model may not know, e.g. multi-hop questions.",
        params=WebSearchAgent.params_model,
        factory=_search,
        aliases=("WebSearch", "SearchAgent", "web_search"),
        needs_search=True,
    ),
)

default_registry = AgentRegistry(BUILTIN_KINDS)
# Their names are also listed in mas_orchestra.builtin_kinds (for the command line, without loading the agents).

#: The roles of the debate baseline's debaters.
BASELINE_DEBATE_ROLES: tuple[str, ...] = ("Careful solver", "Critical reviewer")


def offered_registry(
    registry: AgentRegistry | None = None, *, search: Any = None, agents: Iterable[str] | None = None
) -> AgentRegistry:
    """The kinds an orchestrator is offered.

    Args:
        registry: All kinds (default: the default registry).
        search: The search backend; without one, no kind that needs it is offered (it could not run).
        agents: Only these kinds (names or aliases), if given.

    Returns:
        The offered kinds.

    Raises:
        KeyError: An unknown name in ``agents``.
    """
    base = registry or default_registry
    if agents is not None:
        base = base.subset(agents)
    return base if search is not None else base.without_search()


def register_agent(
    name: str,
    factory: AgentFactory,
    *,
    block: str | None = None,
    description: str,
    params: type[Params] = Params,
    aliases: Iterable[str] = (),
    xml_tags: dict[str, str] | None = None,
    needs_search: bool = False,
    replace: bool = False,
    registry: AgentRegistry | None = None,
) -> AgentKind:
    """Register a user agent kind so that specs, prompts, grammars and the compiler know it.

    Args:
        name: The canonical name: lower-case letters, digits and ``_``.
        factory: ``factory(model, params, ctx)`` returns an object with ``async arun(task)`` (returning an
            ``AgentResult`` or a plain answer string), or an async callable taking the task string, or a
            LangChain ``Runnable``/compiled LangGraph graph invoked with ``{"task": …}``.
        block: The name written in orchestration text (default: ``name`` in title case + ``Agent``).
        description: What the orchestrator's prompt says about the kind.
        params: Its parameter model (derived from :class:`agents.Params`): defaults and caps.
        aliases: More names it is found by.
        xml_tags: Parameter name → tag in orchestration text, where they differ.
        needs_search: Offered and compiled only with a search backend.
        replace: Replace a kind registered under the same names.
        registry: Where to register it (default: the default registry).

    Returns:
        The registered kind.

    Raises:
        ValueError: A malformed name, or a name or alias already taken (without ``replace``).

    Example:
        ```python
        class EchoParams(Params):
            times: int = Field(1, ge=1, le=3)

        async def echo(task: str) -> str:
            return task

        register_agent("echo", lambda model, params, ctx: echo, description="Repeats the task.",
                       params=EchoParams)
        ```
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"agent kind name {name!r} must be lower-case letters, digits and '_'")
    kind = AgentKind(
        name=name,
        block=block or f"{name.title().replace('_', '')}Agent",
        description=description,
        params=params,
        factory=factory,
        aliases=tuple(aliases),
        xml_tags=dict(xml_tags or {}),
        needs_search=needs_search,
    )
    return (registry or default_registry).add(kind, replace=replace)
