"""The end-to-end graph served by ``langgraph.json``: orchestrate → validate → execute.

Models come from ``MAS_ORCHESTRATOR`` / ``MAS_SUBAGENT`` (model strings, default ``embedded``) and
the DoM from ``MAS_DOM``; ``MAS_SEARCH`` (e.g. ``bm25:corpus.jsonl``) enables search nodes.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from mas_orchestra.errors import SpecError
from mas_orchestra.runtime import Orchestra, Status, execute_spec
from mas_orchestra.xml_format import parse_orchestration

__all__ = ["build_graph", "graph"]


class EndToEndState(TypedDict, total=False):
    question: str
    orchestration: str
    spec: dict[str, Any] | None
    status: str
    answer: str | None
    error: str | None
    usage: dict[str, Any]


def build_graph(orchestra: Orchestra | None = None) -> CompiledStateGraph:
    """Build the orchestrate-and-run graph around an :class:`Orchestra` (default: from env vars)."""
    holder: dict[str, Orchestra] = {}

    def get() -> Orchestra:
        if "o" not in holder:
            if orchestra is not None:
                holder["o"] = orchestra
            else:
                search = None
                if os.environ.get("MAS_SEARCH"):
                    from agents.search import make_backend

                    search = make_backend(os.environ["MAS_SEARCH"])
                holder["o"] = Orchestra(
                    os.environ.get("MAS_ORCHESTRATOR", "embedded"),
                    os.environ.get("MAS_SUBAGENT", "embedded"),
                    dom=os.environ.get("MAS_DOM", "high"),  # type: ignore[arg-type]
                    search=search,
                )
        return holder["o"]

    async def orchestrate(state: EndToEndState) -> dict[str, Any]:
        try:
            text = await get().aorchestrate(state["question"])
        except Exception as exc:
            return {"status": Status.EXEC_ERROR.value, "error": f"orchestrator failed: {exc}", "orchestration": ""}
        return {"orchestration": text}

    def validate(state: EndToEndState) -> dict[str, Any]:
        if state.get("status"):
            return {}
        try:
            spec = parse_orchestration(state["orchestration"], dom=get().dom, registry=get().registry)
        except SpecError as exc:
            return {"status": Status.INVALID_SPEC.value, "error": str(exc), "spec": None}
        return {"spec": spec.model_dump()}

    async def execute(state: EndToEndState) -> dict[str, Any]:
        from mas_orchestra.spec import GraphSpec

        o = get()
        spec = GraphSpec.model_validate(state["spec"], context={"registry": o.registry})
        outcome = await execute_spec(
            spec, state["question"], model=o.subagent, search=o.search, registry=o.registry, timeout=o.timeout,
            max_retries=o.max_retries, max_concurrency=o.max_concurrency, orchestration=state["orchestration"],
        )
        return {
            "status": outcome.status.value, "answer": outcome.answer, "error": outcome.error,
            "usage": outcome.usage.model_dump(),
        }

    def route(state: EndToEndState) -> str:
        return END if state.get("status") else "execute"

    builder = StateGraph(EndToEndState)
    builder.add_node("orchestrate", orchestrate)
    builder.add_node("validate", validate)
    builder.add_node("execute", execute)
    builder.add_edge(START, "orchestrate")
    builder.add_edge("orchestrate", "validate")
    builder.add_conditional_edges("validate", route, ["execute", END])
    builder.add_edge("execute", END)
    return builder.compile(name="mas-orchestra")


graph = build_graph()
