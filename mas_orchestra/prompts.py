"""Orchestrator prompts, generated from the agent registry so that user-registered agents appear.

The messages come from a template folder (:mod:`mas_orchestra.prompt_templates`): ours by default
(``prompts/high/`` and ``prompts/low/``, our wording of the original prompt's content: the output format, one
sink, ``${id}`` references, edges matching references), or any folder given as ``prompt=``.
"""

from __future__ import annotations

import json
from typing import Any

from mas_orchestra.prompt_templates import ARCHIVE_ORDER, PromptTemplate, load_template
from mas_orchestra.registry import BASELINE_DEBATE_ROLES, AgentKind, AgentRegistry, default_registry
from mas_orchestra.spec import Dom, GraphSpec, check_dom, spec_from_data

__all__ = ["archive_kinds", "describe_agents", "orchestrator_messages", "orchestrator_prompt"]


def _describe(kind: AgentKind) -> str:
    lines = [f"## {kind.block}", kind.description]
    params = []
    for name, info in kind.params.model_fields.items():
        schema = kind.params.model_json_schema()["properties"].get(name, {})
        bounds = []
        for key, word in (("minimum", ">="), ("maximum", "<="), ("minItems", "items >="), ("maxItems", "items <=")):
            if key in schema:
                bounds.append(f"{word} {schema[key]}")
        default = "required" if info.is_required() else f"default {json.dumps(info.default)}"
        detail = ", ".join([default, *bounds])
        params.append(f"  - <{kind.xml_tag(name)}>: {info.description or name} ({detail})")
    if params:
        lines.append("Parameters:")
        lines.extend(params)
    return "\n".join(lines)


def describe_agents(registry: AgentRegistry | None = None) -> str:
    """One section per registered agent kind: block name, description and parameters with bounds."""
    return "\n\n".join(_describe(k) for k in (registry or default_registry).kinds())


#: Values for required parameters of built-in kinds when they appear in the example.
_EXAMPLE_PARAMS: dict[str, dict[str, object]] = {"debate": {"roles": list(BASELINE_DEBATE_ROLES)}}


def _example_kind(registry: AgentRegistry, *preferred: str) -> AgentKind:
    """The first of ``preferred`` that is offered and needs no arguments, else the first offered kind that
    needs none.

    The example must only name offered kinds: a model copies it, and an example agent that is not offered
    makes the copied orchestration invalid.
    """
    def usable(kind: AgentKind) -> bool:
        required = {n for n, f in kind.params.model_fields.items() if f.is_required()}
        return not kind.needs_search and required <= set(_EXAMPLE_PARAMS.get(kind.name, {}))

    for name in preferred:
        if name in registry and usable(registry.get(name)):
            return registry.get(name)
    for kind in registry.kinds():
        if usable(kind):
            return kind
    raise ValueError(
        "no offered agent kind can appear in the prompt's example: every kind needs a search backend or has "
        f"required parameters (offered: {', '.join(registry.block_names())})"
    )


def _example(dom: str, registry: AgentRegistry) -> str:
    if dom == "low":
        solver = _example_kind(registry, "reflexion", "cot")
        node: dict[str, object] = {"id": "A1", "agent": solver.name, "description": "Solve and self-check", "input": ""}
        if solver.name in _EXAMPLE_PARAMS:
            node["params"] = _EXAMPLE_PARAMS[solver.name]
        spec: GraphSpec = spec_from_data(
            {
                "thinking": "The task needs careful multi-step reasoning, so I delegate it whole.",
                "dom": "low",
                "nodes": [node],
            },
            registry=registry,
        )
        return spec.to_xml(registry=registry)
    # Two shapes, the single agent last: a plan is sized to its task, not copied from one fixed example.
    return (f"For a task with independent parts:\n{_parts_example(registry)}\n\n"
            f"For a one-step task (one fact or one calculation), one agent gets the whole task:\n"
            f"{_single_example(registry)}")


def _single_example(registry: AgentRegistry) -> str:
    """One agent with an empty input (the whole task): the plan a one-fact or one-step question needs."""
    solver = _example_kind(registry, "cot")
    node: dict[str, object] = {"id": "A1", "agent": solver.name, "description": "Answer the task", "input": ""}
    if solver.name in _EXAMPLE_PARAMS:
        node["params"] = _EXAMPLE_PARAMS[solver.name]
    spec = spec_from_data({"thinking": "One step; a single agent solves the whole task.", "nodes": [node]},
                          registry=registry)
    return spec.to_xml(registry=registry)


def _parts_example(registry: AgentRegistry) -> str:
    """Two parts solved separately and combined: the shape of a task that is worth splitting."""
    first = _example_kind(registry, "cot")
    second = _example_kind(registry, "sc", "cot")
    combine = _example_kind(registry, "cot")
    second_node: dict[str, object] = {
        "id": "A2", "agent": second.name, "description": "Second part", "input": "Solve the second part.",
    }
    if second.name == "sc":
        second_node["params"] = {"samples": 3}
    nodes: list[dict[str, object]] = [
        {"id": "A1", "agent": first.name, "description": "First part", "input": "Solve the first part."},
        second_node,
        {"id": "A3", "agent": combine.name, "description": "Combine",
         "input": "Combine ${A1} and ${A2} into the final answer."},
    ]
    for item in nodes:
        if item["agent"] in _EXAMPLE_PARAMS and "params" not in item:
            item["params"] = _EXAMPLE_PARAMS[str(item["agent"])]
    spec = spec_from_data(
        {
            "thinking": "Two independent parts; solve them separately, then combine.",
            "nodes": nodes,
            "edges": [{"source": "A1", "target": "A3"}, {"source": "A2", "target": "A3"}],
        },
        registry=registry,
    )
    return spec.to_xml(registry=registry)


def _archive_entry(kind: AgentKind) -> dict[str, Any]:
    """One agent as the original's second user message lists it: description, name, required arguments."""
    arguments = {"agent_input": "The sub-task for this agent; empty (\"\") gives it the whole question."}
    for name, info in kind.params.model_fields.items():
        arguments[kind.xml_tag(name)] = info.description or name
    return {"description": kind.description, "name": kind.block, "required_arguments": arguments}


def archive_kinds(registry: AgentRegistry) -> list[AgentKind]:
    """The offered kinds in the original's archive order (COT, COT_SC, Reflexion, LLM_debate, WebSearch),
    then any user-registered kinds."""
    kinds = registry.kinds()
    rank = {name: i for i, name in enumerate(ARCHIVE_ORDER)}
    return sorted(kinds, key=lambda k: rank.get(k.name, len(rank) + kinds.index(k)))


def _values(question: str, dom: Dom, registry: AgentRegistry, model: str | None) -> Any:
    def value(name: str) -> str:
        if name == "question":
            return question
        if name == "agents":
            return describe_agents(registry)
        if name == "agent_names":
            return ", ".join(registry.block_names())
        if name == "example":
            return _example(dom, registry)
        if name == "archive":
            return "[" + ",\n".join(json.dumps(_archive_entry(k)) for k in archive_kinds(registry)) + "]"
        if name == "model":
            return model or "unknown"
        kind = name.removeprefix("agent_")
        return json.dumps(_archive_entry(registry.get(kind))) if kind in registry else ""

    return value


def orchestrator_messages(
    question: str, dom: Dom = "high", *, registry: AgentRegistry | None = None,
    prompt: str | PromptTemplate | None = None, model: str | None = None,
) -> list[dict[str, str]]:
    """The orchestrator's chat messages for one task (``{"role", "content"}`` each, as TRL expects).

    ``prompt``: a template folder (or :class:`PromptTemplate`); ``None`` is ours, whose one user message ends
    with the question. ``model`` fills ``{model}`` (the sub-agents' model name).
    """
    check_dom(dom)
    registry = registry or default_registry
    return load_template(prompt, dom).render(_values(question, dom, registry, model))


def orchestrator_prompt(
    question: str, dom: Dom = "high", *, registry: AgentRegistry | None = None,
    prompt: str | PromptTemplate | None = None, model: str | None = None,
) -> str:
    """The orchestrator prompt for one task as one text: the messages' contents, blank-line separated (with
    our template, its single user message)."""
    messages = orchestrator_messages(question, dom, registry=registry, prompt=prompt, model=model)
    return "\n\n".join(m["content"] for m in messages)
