"""Orchestrator prompts, generated from the agent registry so that user-registered agents appear.

The templates (``prompts/orchestrator_high.txt`` and ``orchestrator_low.txt``) keep the original
prompt's content: the output format, one sink, ``${id}`` references, edges matching references.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from string import Template

from mas_orchestra.registry import AgentKind, AgentRegistry, default_registry
from mas_orchestra.spec import Dom, GraphSpec, check_dom, spec_from_data

__all__ = ["describe_agents", "orchestrator_messages", "orchestrator_prompt"]


@cache
def _template(name: str) -> Template:
    return Template(resources.files("mas_orchestra").joinpath(f"prompts/{name}.txt").read_text("utf-8"))


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


def _example(dom: str, registry: AgentRegistry) -> str:
    if dom == "low":
        spec: GraphSpec = spec_from_data(
            {
                "thinking": "The task needs careful multi-step reasoning, so I delegate it whole.",
                "dom": "low",
                "nodes": [{"id": "A1", "agent": "reflexion", "description": "Solve and self-check", "input": ""}],
            },
            registry=registry,
        )
    else:
        spec = spec_from_data(
            {
                "thinking": "Two independent parts; solve them separately, then combine.",
                "nodes": [
                    {"id": "A1", "agent": "cot", "description": "First part", "input": "Solve the first part."},
                    {"id": "A2", "agent": "sc", "description": "Second part", "input": "Solve the second part.",
                     "params": {"samples": 3}},
                    {"id": "A3", "agent": "cot", "description": "Combine",
                     "input": "Combine ${A1} and ${A2} into the final answer."},
                ],
                "edges": [{"source": "A1", "target": "A3"}, {"source": "A2", "target": "A3"}],
            },
            registry=registry,
        )
    return spec.to_xml(registry=registry)


def orchestrator_prompt(
    question: str, dom: Dom = "high", *, registry: AgentRegistry | None = None
) -> str:
    """The orchestrator's user prompt for one task."""
    check_dom(dom)
    registry = registry or default_registry
    return _template(f"orchestrator_{dom}").substitute(
        agents=describe_agents(registry),
        agent_names=", ".join(registry.block_names()),
        example=_example(dom, registry),
        question=question,
    )


def orchestrator_messages(
    question: str, dom: Dom = "high", *, registry: AgentRegistry | None = None
) -> list[dict[str, str]]:
    """The prompt as chat messages (the question in the first and only user message), as TRL expects."""
    return [{"role": "user", "content": orchestrator_prompt(question, dom, registry=registry)}]
