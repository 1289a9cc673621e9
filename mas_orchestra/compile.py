"""Compile a :class:`GraphSpec` into a LangGraph ``StateGraph``.

One graph node per spec node (node name = spec id); a node with several predecessors is joined with
``add_edge([preds], node)`` so it runs once, after all of them; independent branches share supersteps
and so run concurrently. The state holds the question, every node's :class:`AgentResult` and the
sink's answer in ``final_answer``.
"""

from __future__ import annotations

import asyncio
import inspect
import operator
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import patch_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.base import AgentResult, CallLimiter, CallSettings, ReplyConstrainer
from mas_orchestra.errors import CompileError, NodeExecutionError, ThreadMismatchError
from mas_orchestra.models import resolve_model, with_transient_retry
from mas_orchestra.offers import POOL_PARAM, with_tools
from mas_orchestra.registry import AgentKind, AgentRegistry, BuildContext, default_registry
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import PLACEHOLDER_RE, AgentNode, GraphSpec

__all__ = ["SINGLE_AGENT_INSTRUCTION", "MASState", "NodeExecutionError", "compile_spec", "render_task"]

ModelLike = Any  # BaseChatModel, any Runnable taking messages, or a model string
# A graph compiled without settings: no retries and no bound on calls in flight (what compile_spec always did).
_UNBOUNDED = RunSettings(max_retries=0, max_concurrency=None)


def _merge(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    return {**(left or {}), **(right or {})}


def _last(left: str | None, right: str | None) -> str:
    # Parallel nodes of one superstep all write the same hash; a reducer keeps that from being a conflict.
    return right or left or ""


class MASState(TypedDict, total=False):
    """State of a compiled multi-agent system."""

    question: str
    results: Annotated[dict[str, AgentResult], _merge]
    final_answer: str
    trace: Annotated[list[str], operator.add]
    # Which spec wrote this state: a checkpointed thread resumed by a graph of another spec is refused.
    spec_hash: Annotated[str, _last]


#: What a lone agent (high DoM with one agent, or low DoM) is told after its sub-task: its answer is the
#: system's answer, so it must end with the answer to the original task (the original system's instruction,
#: in our words).
SINGLE_AGENT_INSTRUCTION = (
    "Solve the sub-task first. If its result already answers the original task, give that as your final "
    "answer; otherwise use it to solve the original task and give the original task's final answer."
)


def render_task(
    node: AgentNode, question: str, results: Mapping[str, AgentResult], *, single: bool = False
) -> str:
    """The prompt task of a node: the question, or the question plus its sub-task with ``${id}`` filled.

    Upstream outputs are inserted as their readable text, by a function (not a template), so any ``$``,
    ``\\`` or markup inside them stays data.

    Args:
        node: The agent node; without an ``input`` its task is the bare question.
        question: The original question.
        results: Upstream results by agent id; a reference with no result is left as written.
        single: The node is the spec's only agent, so its answer is the system's: the sub-task then ends
            with :data:`SINGLE_AGENT_INSTRUCTION` (as the original did).

    Returns:
        The task text given to the node's agent.
    """
    if not node.input:
        return question

    def fill(match: Any) -> str:
        ref = match.group(1)
        result = results.get(ref)
        return result.text() if result is not None else match.group(0)

    sub_task = PLACEHOLDER_RE.sub(fill, node.input)
    task = f"Original task: {question}\nCurrent sub-task: {sub_task}"
    return f"{task}\n{SINGLE_AGENT_INSTRUCTION}" if single else task


def _resolve(model: ModelLike) -> Runnable:
    if isinstance(model, str):
        return resolve_model(model)
    if not isinstance(model, Runnable):
        raise TypeError(f"model must be a BaseChatModel, a Runnable or a model string, got {type(model).__name__}")
    return model


def _as_coroutine_fn(built: Any, node_id: str, kind: AgentKind):
    """Adapt what a factory returned to ``async (task) -> AgentResult``."""

    def wrap(value: Any) -> AgentResult:
        if isinstance(value, AgentResult):
            return value
        if isinstance(value, Mapping) and "answer" in value:
            return AgentResult(agent=kind.name, answer=str(value["answer"]), thinking=str(value.get("thinking", "")))
        if isinstance(value, str):
            return AgentResult(agent=kind.name, answer=value)
        raise CompileError(
            f"agent {node_id!r} ({kind.block}) returned {type(value).__name__}; expected AgentResult or str"
        )

    if hasattr(built, "arun"):
        async def run(task: str) -> AgentResult:
            return wrap(await built.arun(task))
    elif isinstance(built, Runnable):
        async def run(task: str) -> AgentResult:
            return wrap(await built.ainvoke({"task": task}))
    elif callable(built) and (
        inspect.iscoroutinefunction(built) or inspect.iscoroutinefunction(getattr(built, "__call__", None))  # noqa: B004
    ):
        async def run(task: str) -> AgentResult:
            return wrap(await built(task))
    else:
        raise CompileError(
            f"factory of {kind.block} returned {type(built).__name__}; it must return an object with "
            "async arun(task), an async callable, or a Runnable"
        )
    return run


def _node_function(
    node: AgentNode, kind: AgentKind, run_agent: Any, *, is_sink: bool, spec_hash: str, single: bool = False,
    plain: bool = False,
):
    name = f"{node.id} · {kind.block}"
    traced = RunnableLambda(run_agent, name=name)
    metadata = {"node_id": node.id, "agent_kind": kind.name, "agent_block": kind.block, "spec_hash": spec_hash}

    async def run_node(state: MASState, config: RunnableConfig) -> dict[str, Any]:
        stored = state.get("spec_hash")
        if stored and stored != spec_hash:
            thread = str((config.get("configurable") or {}).get("thread_id", "?"))
            raise ThreadMismatchError(thread, {"spec": (stored, spec_hash)})
        # Asked plainly, a lone agent gets the question itself, as a plain call would: a small model answers the
        # framed sub-task ("Original task: … Current sub-task: … Solve the sub-task first …") by repeating it.
        task = (state["question"] if plain and single
                else render_task(node, state["question"], state.get("results") or {}, single=single))
        child = patch_config(config, run_name=name)
        child["metadata"] = {**(child.get("metadata") or {}), **metadata}
        child["tags"] = [*(child.get("tags") or []), f"agent:{kind.name}"]
        try:
            result = await traced.ainvoke(task, child)
        except (CompileError, NodeExecutionError, ThreadMismatchError):
            raise
        except Exception as exc:  # name the node; the runtime turns this into an exec_error outcome
            raise NodeExecutionError(node.id, kind.block, exc) from exc
        update: dict[str, Any] = {"results": {node.id: result}, "trace": [node.id], "spec_hash": spec_hash}
        if is_sink:
            update["final_answer"] = result.answer
        return update

    def run_node_sync(state: MASState, config: RunnableConfig) -> dict[str, Any]:
        # graph.invoke() runs sync nodes in worker threads without an event loop: give the agent one.
        return asyncio.run(run_node(state, config))

    return RunnableLambda(run_node_sync, afunc=run_node, name=node.id)


def compile_spec(
    spec: GraphSpec,
    model: ModelLike,
    *,
    models: Mapping[str, ModelLike] | None = None,
    search: Any = None,
    registry: AgentRegistry | None = None,
    settings: RunSettings | None = None,
    constrain_reply: ReplyConstrainer | None = None,
    checkpointer: Any = None,
    tools: Iterable[Any] | None = None,
    plain_replies: bool = False,
) -> CompiledStateGraph:
    """Build the LangGraph graph of a spec. Invoke it with ``{"question": "…"}``.

    With a ``checkpointer``, invoke with ``config={"configurable": {"thread_id": …}}``: every superstep's node
    results are checkpointed, so ``graph.invoke(None, config)`` after a crash or error re-runs only the nodes
    that had not finished, and ``graph.get_state(config)`` / ``get_state_history`` show each node's result.
    ``timeout`` (the whole run) is enforced by whoever runs the graph
    (:func:`~mas_orchestra.runtime.execute_spec`, :class:`~mas_orchestra.runtime.Orchestra`).

    Args:
        spec: The validated spec.
        model: The model every node runs on (a chat model or a model string), unless ``models`` says otherwise.
        models: Another model for a node id or an agent kind (``{"S1": big_model, "search": tool_model}``).
        search: The search backend handed to every search node.
        registry: The agent registry the spec was parsed with (default: the default registry). A registry built
            by :func:`~mas_orchestra.offers.with_pool` runs each node on the pool model it names.
        settings: A :class:`~mas_orchestra.settings.RunSettings`, passed whole: ``max_concurrency`` bounds the
            model calls in flight across the whole graph, ``call_timeout`` each sub-agent call, and
            ``max_retries`` wraps every model in LangChain's ``with_retry`` for transient errors (time-outs,
            connection errors, rate limits, 5xx). Without ``settings`` the graph has no bounds and no retries.
        constrain_reply: Binds the reply grammar to each model (see :mod:`mas_orchestra.models.constraints`).
        checkpointer: Any LangGraph checkpointer (``InMemorySaver``, ``SqliteSaver``/``AsyncSqliteSaver``,
            ``PostgresSaver``…; :mod:`mas_orchestra.runtime.checkpoint` builds ones with a serializer that
            allows our types).
        tools: LangChain tools (and MCP tools, see :func:`agents.tools.load_mcp_tools`) for ``ToolAgent``
            nodes; the registry is then :func:`~mas_orchestra.offers.with_tools` of ``registry`` (parse the
            spec with the same).
        plain_replies: Ask step-by-step attempts (CoT, SC samples, Reflexion's first attempt) as plain calls and
            read their reply as the answer (:attr:`agents.base.CallSettings.plain_replies`; what
            :func:`mas_orchestra.caps.asks_plainly` says for small models); a spec's only agent then gets the
            question itself rather than its framed sub-task.

    Returns:
        The compiled graph; its state's ``final_answer`` is the sink's answer and ``results`` each node's
        :class:`~agents.base.AgentResult`.

    Raises:
        TypeError: ``spec`` is not a :class:`~mas_orchestra.spec.GraphSpec`.
        CompileError: A search node without a search backend, or a node that cannot be built.
        ThreadMismatchError: When invoked: resuming a thread written by another spec.

    Example:
        ```python
        spec = parse_orchestration(open("graphs/specs/diamond.xml").read())
        graph = compile_spec(spec, model=ScriptedChatModel())
        print(graph.invoke({"question": "What is 17 * 23?"})["final_answer"])
        ```
    """
    if not isinstance(spec, GraphSpec):
        raise TypeError(f"compile_spec expects a GraphSpec, got {type(spec).__name__}")
    registry = registry or default_registry
    if tools:
        registry = with_tools(registry, tools)
    settings = settings or _UNBOUNDED
    calls = CallSettings(
        call_timeout=settings.call_timeout,
        limiter=None if settings.max_concurrency is None else CallLimiter(settings.max_concurrency),
        constrain_reply=constrain_reply,
        plain_replies=plain_replies,
    )

    cache: dict[int, Runnable] = {}

    def prepared(raw: ModelLike) -> Runnable:
        key = id(raw)
        if key not in cache:
            runnable = _resolve(raw)
            if settings.max_retries > 0:
                runnable = with_transient_retry(
                    runnable, settings.max_retries, initial_delay=settings.retry_initial_delay
                )
            cache[key] = runnable
        return cache[key]

    builder = StateGraph(MASState)
    spec_hash = spec.spec_hash()
    if not spec.nodes:
        answer = spec.direct_answer or ""

        def direct(state: MASState) -> dict[str, Any]:
            return {"final_answer": answer, "results": {}, "trace": []}

        async def adirect(state: MASState) -> dict[str, Any]:
            return direct(state)

        builder.add_node("direct_answer", RunnableLambda(direct, afunc=adirect, name="direct_answer"))
        builder.add_edge(START, "direct_answer")
        builder.add_edge("direct_answer", END)
        return builder.compile(checkpointer=checkpointer, name="mas-direct-answer").with_config(recursion_limit=10)

    problems = []
    for node in spec.nodes:
        kind = registry.get(node.agent)
        if kind.needs_search and search is None:
            problems.append(
                f"agent {node.id!r} ({kind.block}) needs a search backend: pass "
                "compile_spec(..., search=make_backend('bm25:corpus.jsonl')) or Orchestra(search=...)"
            )
    if problems:
        raise CompileError("; ".join(problems))

    for node in spec.nodes:
        kind = registry.get(node.agent)
        params = kind.params.model_validate(node.params)
        chosen = (models or {}).get(node.id) or (models or {}).get(kind.name)
        if chosen is None and kind.models:  # a pool: the node's `model` parameter names its model
            chosen = dict(kind.models)[getattr(params, POOL_PARAM)]
        chosen = chosen or model
        ctx = BuildContext(node_id=node.id, settings=calls, search=search)
        try:
            built = kind.factory(prepared(chosen), params, ctx)
        except (CompileError, TypeError, ImportError):
            raise
        except Exception as exc:
            raise CompileError(f"agent {node.id!r} ({kind.block}): could not build: {exc}") from exc
        run_agent = _as_coroutine_fn(built, node.id, kind)
        builder.add_node(
            node.id,
            _node_function(node, kind, run_agent, is_sink=node.id == spec.sink, spec_hash=spec_hash,
                           single=len(spec.nodes) == 1, plain=plain_replies),
            metadata={"agent_kind": kind.name, "agent_block": kind.block},
        )
    for node in spec.nodes:
        preds = spec.predecessors(node.id)
        if not preds:
            builder.add_edge(START, node.id)
        elif len(preds) == 1:
            builder.add_edge(preds[0], node.id)
        else:
            builder.add_edge(preds, node.id)
    assert spec.sink is not None  # a validated spec with nodes always has its sink set
    builder.add_edge(spec.sink, END)
    config: dict[str, Any] = {"recursion_limit": len(spec.nodes) + 10}
    if settings.max_concurrency is not None:
        config["max_concurrency"] = settings.max_concurrency
    return builder.compile(checkpointer=checkpointer, name=f"mas-{spec_hash}").with_config(**config)

