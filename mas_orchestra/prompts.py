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
    """One section per registered agent kind: block name, description and parameters with bounds.

    Args:
        registry: The offered kinds (default: the default registry).

    Returns:
        The sections, blank-line separated (what ``{agents}`` is filled with).
    """
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
    else:
        return f"{_chain_example(registry)}\n\n{_single_example(registry)}"
    return spec.to_xml(registry=registry)


# Per chain length: the header line, the thinking, then each agent's (description, input). Each agent after the
# first reads the previous one's result through ${A<k>}.
_CHAINS: dict[int, tuple[str, str, tuple[tuple[str, str], ...]]] = {
    2: ("For a task whose answer needs an earlier result:",
        "The final answer depends on an intermediate result, so the second agent reads the first agent's output "
        "through ${A1}.",
        (("First step", "Work out the intermediate result the task needs first."),
         ("Final step", "Given ${A1}, work out the final answer to the task."))),
    3: ("For a task whose answer needs two earlier results, one built on the other:",
        "The final answer depends on two intermediate results, the second built on the first, so each agent reads "
        "the previous agent's output: ${A1}, then ${A2}.",
        (("Step 1", "Work out the intermediate result the task needs first."),
         ("Step 2", "Given ${A1}, work out the next intermediate result the task needs."),
         ("Final step", "Given ${A2}, work out the final answer to the task."))),
}


def _chain_example(registry: AgentRegistry, length: int = 2) -> str:
    """A chain of ``length`` agents in which each agent reads the previous one's result through ``${A<k>}``: the one
    thing an edge alone does not do (it orders agents, it passes nothing). Small on purpose: a model copies the
    example's size."""
    kind = _example_kind(registry, "cot")
    header, thinking, steps = _CHAINS[length]
    nodes: list[dict[str, object]] = [
        {"id": f"A{k}", "agent": kind.name, "description": description, "input": text}
        for k, (description, text) in enumerate(steps, start=1)
    ]
    for item in nodes:
        if item["agent"] in _EXAMPLE_PARAMS:
            item["params"] = _EXAMPLE_PARAMS[str(item["agent"])]
    edges = [{"source": f"A{k}", "target": f"A{k + 1}"} for k in range(1, length)]
    spec = spec_from_data({"thinking": thinking, "nodes": nodes, "edges": edges}, registry=registry)
    return header + "\n" + spec.to_xml(registry=registry)


def _single_example(registry: AgentRegistry) -> str:
    """One agent with an empty input (the whole task): the plan a one-fact or one-step question needs."""
    solver = _example_kind(registry, "cot")
    node: dict[str, object] = {"id": "A1", "agent": solver.name, "description": "Answer the task", "input": ""}
    if solver.name in _EXAMPLE_PARAMS:
        node["params"] = _EXAMPLE_PARAMS[solver.name]
    spec = spec_from_data({"thinking": "One step; a single agent solves the whole task.", "nodes": [node]},
                          registry=registry)
    return "For a one-step task (one fact or one calculation), one agent gets the whole task:\n" + spec.to_xml(
        registry=registry)



def _archive_entry(kind: AgentKind) -> dict[str, Any]:
    """One agent as the original's second user message lists it: description, name, required arguments."""
    arguments = {"agent_input": "The sub-task for this agent; empty (\"\") gives it the whole question."}
    for name, info in kind.params.model_fields.items():
        arguments[kind.xml_tag(name)] = info.description or name
    return {"description": kind.description, "name": kind.block, "required_arguments": arguments}


def archive_kinds(registry: AgentRegistry) -> list[AgentKind]:
    """The offered kinds in the original's archive order (COT, COT_SC, Reflexion, LLM_debate, WebSearch),
    then any user-registered kinds.

    Args:
        registry: The offered kinds.

    Returns:
        The kinds, in that order.
    """
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
        if name == "example_chain":
            return _chain_example(registry) if dom == "high" else ""
        if name == "example_chain_3":
            return _chain_example(registry, 3) if dom == "high" else ""
        if name == "example_single":
            return _single_example(registry) if dom == "high" else _example(dom, registry)
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

    Args:
        question: The task.
        dom: ``high`` or ``low``.
        registry: The offered kinds (default: the default registry).
        prompt: A template folder or :class:`PromptTemplate` (``None``: ours).
        model: The sub-agents' model name, for ``{model}``.

    Returns:
        ``{"role", "content"}`` dicts, in order.

    Raises:
        PromptTemplateError: A template folder that cannot be used.
    """
    check_dom(dom)
    registry = registry or default_registry
    return load_template(prompt, dom).render(_values(question, dom, registry, model))


def orchestrator_prompt(
    question: str, dom: Dom = "high", *, registry: AgentRegistry | None = None,
    prompt: str | PromptTemplate | None = None, model: str | None = None,
) -> str:
    """The orchestrator prompt for one task as one text: the messages' contents, blank-line separated (with
    our template, its single user message).

    Args:
        question: The task.
        dom: ``high`` or ``low``.
        registry: The offered kinds (default: the default registry).
        prompt: A template folder or :class:`PromptTemplate` (``None``: ours).
        model: The sub-agents' model name, for ``{model}``.

    Returns:
        The prompt text.
    """
    messages = orchestrator_messages(question, dom, registry=registry, prompt=prompt, model=model)
    return "\n\n".join(m["content"] for m in messages)
