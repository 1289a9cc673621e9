"""The JSON-schema form of an orchestration, for APIs that only take ``response_format``."""

from __future__ import annotations

from typing import Any

from pydantic.fields import FieldInfo

from mas_orchestra.errors import GrammarError
from mas_orchestra.registry import AgentKind, AgentRegistry
from mas_orchestra.spec.grammar.ebnf import GrammarLimits, agent_id, offered_kinds
from mas_orchestra.spec.limits import Dom, check_dom

__all__ = ["orchestration_json_schema"]

def _param_schema(kind: AgentKind, name: str, info: FieldInfo) -> dict[str, Any]:
    schema = dict(kind.params.model_json_schema()["properties"].get(name, {}))
    for key in ("title", "default", "description"):
        schema.pop(key, None)
    if not schema or "$ref" in schema or "allOf" in schema:
        raise GrammarError(
            f"agent kind {kind.block!r}: parameter {name!r} has no plain JSON schema; turn constrained decoding "
            "off (constrained=False, --no-constrained)"
        )
    return schema


def orchestration_json_schema(
    dom: Dom = "high", registry: AgentRegistry | None = None, limits: GrammarLimits | None = None
) -> dict[str, Any]:
    """A strict JSON schema (OpenAI ``response_format`` style) of our JSON spec form.

    Ids are canonical (``A1``…), agent kinds and parameters come from the registry; the graph rules
    (edges, one sink, references) are left to the validator — JSON schema cannot state them.

    Args:
        dom: ``high`` or ``low``.
        registry: The offered kinds and their parameters (default: the default registry).
        limits: Caps on agents and text lengths.

    Returns:
        The schema, as a dict.

    Raises:
        GrammarError: A registered kind has a parameter the schema cannot express.
    """
    check_dom(dom)
    limits = limits or GrammarLimits()
    n = 1 if dom == "low" else limits.max_agents
    ids = [agent_id(k) for k in range(1, n + 1)]
    variants = []
    for kind in offered_kinds(registry):
        props = {p: _param_schema(kind, p, i) for p, i in kind.params.model_fields.items()}
        variants.append({
            "type": "object",
            "properties": {
                "id": {"type": "string", "enum": ids},
                "agent": {"type": "string", "enum": [kind.name]},
                "description": {"type": "string"},
                "input": {"type": "string"},
                "params": {"type": "object", "properties": props, "required": list(props),
                           "additionalProperties": False},
            },
            "required": ["id", "agent", "description", "input", "params"],
            "additionalProperties": False,
        })
    properties: dict[str, Any] = {
        "thinking": {"type": "string"},
        "nodes": {"type": "array", "items": {"anyOf": variants}, "maxItems": n},
    }
    if dom == "high":
        edge = {
            "type": "object",
            "properties": {"source": {"type": "string", "enum": ids}, "target": {"type": "string", "enum": ids}},
            "required": ["source", "target"],
            "additionalProperties": False,
        }
        properties["edges"] = {"type": "array", "items": edge}
    else:
        properties["direct_answer"] = {"type": ["string", "null"]}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
