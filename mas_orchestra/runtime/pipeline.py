"""The end-to-end orchestrated run as one LangGraph graph: orchestrate → validate → approve → execute.

Every step is a node, so with a checkpointer each is checkpointed: a resumed thread does not call the
orchestrator again, and ``execute`` runs the compiled spec as a subgraph whose supersteps are
checkpointed under the same thread, so no finished sub-agent node is called again either. The state is
plain JSON-like data (the spec as a dict, node results as dicts), which any checkpointer and LangGraph's
strict msgpack mode accept and a LangGraph server can return as is.

``approve`` pauses with LangGraph's ``interrupt`` when approval is on: the payload shows the spec; resume
with ``Command(resume=...)`` (see :func:`review_decision`); an edited spec is validated again and, if
invalid, the same interrupt comes back with the problems listed.

:class:`~mas_orchestra.runtime.Orchestra` runs this graph when it has a checkpointer; ``graphs/end_to_end.py``
serves it (models, :class:`~mas_orchestra.config.OrchestraConfig` and settings from each run's LangGraph
context).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agents.base import AgentResult, Usage, model_name_of
from mas_orchestra.compile import compile_spec
from mas_orchestra.errors import CompileError, SpecError
from mas_orchestra.runtime.runner_protocol import PipelineRunner
from mas_orchestra.spec import GraphSpec, spec_from_data

__all__ = ["PipelineState", "build_pipeline", "review_decision", "setup_of"]

APPROVE_WORDS = frozenset({"approve", "approved", "ok", "yes", "y", "run"})
REJECT_WORDS = frozenset({"reject", "rejected", "no", "n", "stop"})


class PipelineState(TypedDict, total=False):
    """State of the end-to-end graph (plain data only)."""

    question: str
    setup: dict[str, str]  # orchestrator, subagent and dom that started the thread
    orchestration: str
    spec: dict[str, Any] | None
    spec_hash: str | None
    approval: bool  # decided when the thread is orchestrated, so a resume cannot skip (or add) it
    review: str  # approved | edited | rejected, when approval was asked
    status: str
    answer: str | None
    error: str | None
    results: dict[str, dict[str, Any]]  # node id -> AgentResult as a dict
    usage: dict[str, Any]  # sub-agent calls and tokens of all node results


def setup_of(orchestra: PipelineRunner) -> dict[str, str]:
    """What a thread must be resumed with: the model names and the DoM (the spec lives in the thread).

    Args:
        orchestra: The runner.
    """
    return {
        "orchestrator": model_name_of(orchestra.orchestrator),
        "subagent": model_name_of(orchestra.subagent),
        "dom": orchestra.dom,
    }


def review_decision(value: Any, orchestra: PipelineRunner) -> tuple[str, GraphSpec | None, str]:
    """Read a resume value given at the approval interrupt.

    Args:
        value: ``None``/``True``/``"approve"`` or ``{"action": "approve"}``; ``False``/``"reject"`` or
            ``{"action": "reject", "reason": …}``; an edited spec as a dict (our JSON schema), JSON text,
            orchestration text, a ``GraphSpec``, or ``{"spec": any of those}``.
        orchestra: The Orchestra whose DoM, registry and strictness read an edited spec.

    Returns:
        ``(decision, spec, reason)`` with decision ``approve`` (run the spec shown), ``edit`` (run ``spec``)
        or ``reject`` (stop; ``reason`` says why).

    Raises:
        SpecError: An invalid edited spec, or a value that is none of these.
    """
    if value is None or value is True:
        return "approve", None, ""
    if value is False:
        return "reject", None, "rejected at approval"
    if isinstance(value, GraphSpec):
        return "edit", value, ""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in APPROVE_WORDS:
            return "approve", None, ""
        if word in REJECT_WORDS:
            return "reject", None, "rejected at approval"
        text = value.strip()
        if text.startswith("{"):
            return "edit", spec_from_data(json.loads(text), registry=orchestra.registry), ""
        return "edit", orchestra.parse(text), ""
    if isinstance(value, dict):
        action = str(value.get("action", "")).lower()
        if "spec" in value:
            return review_decision(value["spec"], orchestra)
        if action in APPROVE_WORDS or value.get("approve") is True:
            return "approve", None, ""
        if action in REJECT_WORDS or "reject" in value:
            reason = value.get("reason") or value.get("reject")
            why = f": {reason}" if isinstance(reason, str) else ""
            return "reject", None, f"rejected at approval{why}"
        if "nodes" in value or "direct_answer" in value:
            return "edit", spec_from_data(value, registry=orchestra.registry), ""
    raise SpecError(
        f"approval: cannot read the resume value {value!r}; resume with 'approve', 'reject', "
        "{'action': 'reject', 'reason': ...} or an edited spec ({'spec': {...}} / JSON / orchestration text)"
    )


def _results_usage(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    total = Usage()
    for result in results.values():
        total.add(Usage.model_validate(result.get("usage") or {}))
    return {**total.model_dump(), "total_tokens": total.total_tokens}


# What a new orchestration clears from the previous run on the same thread.
_CLEAN: dict[str, Any] = {
    "spec": None, "spec_hash": None, "review": None, "status": None, "answer": None, "error": None,
    "results": {}, "usage": {},
}


def build_pipeline(
    resolve: Callable[[Any], PipelineRunner],
    *,
    checkpointer: Any = None,
    approval: Callable[[Any], bool] | bool = False,
    name: str = "mas-orchestra",
    context_schema: type[Any] | None = None,
) -> CompiledStateGraph:
    """Compile the end-to-end graph.

    Args:
        resolve: Gives the runner (an :class:`Orchestra`, any
            :class:`~mas_orchestra.runtime.runner_protocol.PipelineRunner`) of a run from its LangGraph context
            (``graph.ainvoke(input, config, context=...)``; ``None`` when the run has none).
        checkpointer: The LangGraph checkpointer, if any.
        approval: A bool, or a function of the run's context: turns on the interrupt before ``execute``;
            interrupts need a checkpointer (a LangGraph server supplies its own).
        name: The compiled graph's name.
        context_schema: The graph's LangGraph context schema: a dict context is validated into it before the
            run starts.

    Returns:
        The compiled graph.
    """

    def wants_approval(context: Any) -> bool:
        return approval(context) if callable(approval) else bool(approval)

    async def orchestrate(state: PipelineState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        # An orchestrator failure raises: nothing is checkpointed for this step, so a resume retries it.
        orchestra = resolve(runtime.context)
        text = await orchestra.aorchestrate(state["question"], callbacks=config.get("callbacks"))
        return {
            "orchestration": text, "approval": wants_approval(runtime.context),
            "setup": state.get("setup") or setup_of(orchestra),  # a served run records what it ran with
            # A new question on a thread that already ran (a served thread takes several runs) starts clean.
            **_CLEAN,
        }

    def validate(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        try:
            spec = resolve(runtime.context).parse(state["orchestration"])
        except SpecError as exc:  # a final outcome: checkpointed, a resume returns it without re-asking
            return {"status": "invalid_spec", "error": str(exc), "spec": None, "spec_hash": None}
        return {"spec": spec.model_dump(mode="json"), "spec_hash": spec.spec_hash()}

    def approve(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        if state.get("status") or not state.get("approval"):
            return {}
        orchestra = resolve(runtime.context)
        spec = spec_from_data(state["spec"], registry=orchestra.registry)
        payload: dict[str, Any] = {
            "question": state["question"],
            "spec": state["spec"],
            "spec_text": spec.to_xml(),
            "mermaid": spec.to_mermaid(),
            "resume_with": "'approve' | 'reject' | {'action': 'reject', 'reason': ...} | {'spec': edited spec}",
        }
        # Each resume re-runs this node; interrupt() hands back the resume values in order, so an invalid
        # edit loops back here with its problems shown instead of failing the thread.
        while True:
            value = interrupt(payload)
            try:
                decision, edited, reason = review_decision(value, orchestra)
            except (SpecError, ValueError) as exc:
                payload = {**payload, "error": f"the edited spec is invalid: {exc}"}
                continue
            if decision == "approve":
                return {"review": "approved"}
            if decision == "reject":
                return {"review": "rejected", "status": "invalid_spec", "error": reason}
            assert edited is not None
            return {"review": "edited", "spec": edited.model_dump(mode="json"), "spec_hash": edited.spec_hash()}

    async def execute(state: PipelineState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        orchestra = resolve(runtime.context)
        spec = spec_from_data(state["spec"], registry=orchestra.registry)
        try:
            graph = compile_spec(
                spec, orchestra.subagent, search=orchestra.search, registry=orchestra.registry,
                settings=orchestra.settings, constrain_reply=orchestra.constrain_reply,
                plain_replies=orchestra.plain_replies,
            )
        except CompileError as exc:
            return {"status": "compile_error", "error": str(exc)}
        # The spec graph runs as a subgraph: it inherits this thread's checkpointer (its own namespace), and
        # the bounds it was compiled with must win over the parent's (e.g. recursion_limit 25).
        inner = patch_config(
            config, recursion_limit=len(spec.nodes) + 10, max_concurrency=orchestra.settings.max_concurrency
        )
        # A failing node raises (NodeExecutionError): the finished nodes stay checkpointed for a resume.
        out = await graph.ainvoke({"question": state["question"]}, inner)
        results = {
            node_id: (r.model_dump(mode="json") if isinstance(r, AgentResult) else dict(r))
            for node_id, r in (out.get("results") or {}).items()
        }
        update: dict[str, Any] = {"results": results, "usage": _results_usage(results)}
        if out.get("final_answer") is None:
            return {**update, "status": "exec_error", "error": "the graph produced no final answer"}
        return {**update, "status": "ok", "answer": out["final_answer"], "error": None}

    def after_validate(state: PipelineState) -> str:
        return END if state.get("status") else "approve"

    def after_approve(state: PipelineState) -> str:
        return END if state.get("status") else "execute"

    builder = StateGraph(PipelineState, context_schema=context_schema)
    # LangGraph injects both the config and the runtime; its add_node overloads type one or the other.
    builder.add_node("orchestrate", cast(Any, orchestrate))
    builder.add_node("validate", validate)
    builder.add_node("approve", approve)
    builder.add_node("execute", cast(Any, execute))
    builder.add_edge(START, "orchestrate")
    builder.add_edge("orchestrate", "validate")
    builder.add_conditional_edges("validate", after_validate, ["approve", END])
    builder.add_conditional_edges("approve", after_approve, ["execute", END])
    builder.add_edge("execute", END)
    return builder.compile(checkpointer=checkpointer, name=name)
