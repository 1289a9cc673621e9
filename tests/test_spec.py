"""Validation rules of GraphSpec, JSON parsing, schema, round trips."""

from __future__ import annotations

import json

import pytest

from agents.self_consistency import MAX_SAMPLES
from mas_orchestra import GraphSpec, SpecError, parse_orchestration, parse_spec
from mas_orchestra.spec import MAX_INPUT_CHARS, spec_from_data


def node(node_id: str, agent: str = "cot", inp: str = "", **params):
    return {"id": node_id, "agent": agent, "input": inp, "params": params}


def edges(*pairs: str):
    return [{"source": p.split(">")[0], "target": p.split(">")[1]} for p in pairs]


def problems_of(data) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_data(data)
    assert isinstance(info.value, ValueError)
    return info.value.problems


def test_valid_diamond_sets_sink_and_canonical_kinds():
    spec = spec_from_data({
        "nodes": [node("A", "CoTAgent"), node("B", "COT_SC"), node("C", "LLM_debate", "${A} ${B}", roles=["x", "y"])],
        "edges": edges("A>C", "B>C"),
    })
    assert spec.sink == "C"
    assert [n.agent for n in spec.nodes] == ["cot", "sc", "debate"]
    assert spec.layers() == [["A", "B"], ["C"]]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"nodes": [node("A", "OracleAgent")]}, "agent 'A': unknown agent 'OracleAgent'; valid: CoTAgent, SCAgent"),
        ({"nodes": [node("A"), node("A"), node("B")], "edges": edges("A>B")}, "agent 'A': duplicate id"),
        ({"nodes": [node("bad id")]}, "agent 'bad id': bad id"),
        ({"nodes": [node("question")]}, "id is reserved"),
        ({"nodes": [node("A"), node("B")], "edges": edges("A>Z")}, "edge 1 (A -> Z): <to> names undeclared agent 'Z'"),
        ({"nodes": [node("A"), node("B")], "edges": edges("A>A", "A>B")}, "edge 1 (A -> A): self-loop"),
        ({"nodes": [node("A"), node("B"), node("C")], "edges": edges("A>B", "B>C", "C>A")}, "cycle: A -> B -> C -> A"),
        ({"nodes": [node("A"), node("B"), node("C")], "edges": edges("A>B", "A>C")}, "exactly one sink"),
        ({"nodes": [node("A"), node("B")]}, "2 agents but no edges"),
        ({"nodes": [node("A", "debate", roles=["only"])]}, "parameter 'roles' (<debate_roles>)"),
        ({"nodes": [node("A", "debate")]}, "parameter 'roles'"),
        ({"nodes": [node("A", "sc", samples=10_000)]}, f"less than or equal to {MAX_SAMPLES}"),
        ({"nodes": [node("A", "cot", colour="red")]}, "parameter 'colour'"),
        ({"nodes": [node("A"), node("B", inp="${Z}")], "edges": edges("A>B")}, "references ${Z}, which is not a declared agent"),
        ({"nodes": [node("A", inp="${B}"), node("B")], "edges": edges("A>B")}, "no edge path B -> A"),
        ({"nodes": [node("A", inp="${A}")]}, "its own output"),
        ({}, "no agents and no direct answer"),
        ({"nodes": [node("A")], "direct_answer": "5"}, "direct answer cannot be combined"),
        ({"nodes": [node("A"), node("B")], "edges": edges("A>B"), "sink": "A"}, "sink 'A' is not the graph's sink 'B'"),
        ({"nodes": [node("A"), node("B")], "edges": edges("A>B"), "dom": "low"}, "low DoM allows exactly one agent"),
        ({"nodes": [node("A", inp="x <edge> y")]}, "input contains orchestration markup"),
    ],
)
def test_each_rule_reports_what_and_where(data, expected):
    problems = problems_of(data)
    assert any(expected in p for p in problems), problems


def test_duplicate_edge_is_kept_once_with_a_warning():
    from mas_orchestra.spec import parse_spec, spec_from_data

    data = {"nodes": [node("A"), node("B")], "edges": edges("A>B", "A>B")}
    spec = spec_from_data(data)
    assert [(e.source, e.target) for e in spec.edges] == [("A", "B")]
    assert [(w.kind, w.location) for w in spec.warnings] == [("duplicate_edge", "edge 2")]
    # warnings travel with the JSON form; the spec's identity (hash) is the graph alone
    again = parse_spec(spec.model_dump_json())
    assert again.warnings == spec.warnings and again.spec_hash() == spec_from_data({**data, "edges": edges("A>B")}).spec_hash()
    with pytest.raises(SpecError, match="duplicate_edge"):
        parse_spec(json.dumps(data), strict=True)


def test_all_problems_reported_not_just_the_first():
    problems = problems_of({
        "nodes": [node("A", "Oracle"), node("A"), node("C", "debate", roles=["x"])],
        "edges": edges("A>C", "C>Q"),
    })
    joined = " | ".join(problems)
    assert "unknown agent 'Oracle'" in joined
    assert "duplicate id" in joined
    assert "<debate_roles>" in joined
    assert "undeclared agent 'Q'" in joined
    assert len(problems) >= 4


def test_ancestor_reference_through_other_nodes_is_fine():
    spec = spec_from_data({
        "nodes": [node("A"), node("B", inp="${A}"), node("C", inp="${A} and ${B}")],
        "edges": edges("A>B", "B>C"),
    })
    assert spec.sink == "C"


def test_input_size_is_capped():
    problems = problems_of({"nodes": [node("A", inp="x" * (MAX_INPUT_CHARS + 1))]})
    assert any("agent #1 field 'input'" in p for p in problems)


def test_too_many_nodes_is_a_spec_error():
    nodes = [node(f"N{i}") for i in range(300)]
    chain = edges(*(f"N{i}>N{i + 1}" for i in range(299)))
    assert problems_of({"nodes": nodes, "edges": chain})


def test_parse_spec_json_errors_are_spec_errors():
    with pytest.raises(SpecError, match="invalid JSON at line 1"):
        parse_spec("{nope")
    with pytest.raises(SpecError, match="must be a JSON object"):
        parse_spec("[1, 2]")
    with pytest.raises(SpecError, match="nested too deeply"):
        parse_spec("[" * 100_000 + "]" * 100_000)


def test_json_round_trip_is_lossless(tmp_path):
    spec = GraphSpec.from_file("graphs/specs/diamond.xml")
    again = parse_spec(spec.model_dump_json())
    assert again.model_dump() == spec.model_dump()
    path = spec.to_file(tmp_path / "s.json")
    assert GraphSpec.from_file(path).model_dump() == spec.model_dump()
    path = spec.to_file(tmp_path / "s.xml")
    assert GraphSpec.from_file(path).model_dump() == spec.model_dump()


def test_text_round_trip_is_lossless_for_every_example():
    for name in ("diamond.xml", "low_reflexion.xml", "search_chain.json"):
        spec = GraphSpec.from_file(f"graphs/specs/{name}")
        again = parse_orchestration(spec.to_xml(), dom=spec.dom)
        assert again.model_dump() == spec.model_dump(), name
        assert parse_orchestration(again.to_xml(), dom=spec.dom).to_xml() == spec.to_xml()


def test_json_schema_is_a_function_calling_schema():
    schema = GraphSpec.model_json_schema()
    assert schema["type"] == "object"
    assert {"nodes", "edges", "sink"} <= set(schema["properties"])
    json.dumps(schema)  # serialisable
    node_schema = schema["$defs"]["AgentNode"]
    assert node_schema["required"] == ["id", "agent"]


def test_mermaid_names_nodes_and_edges():
    spec = GraphSpec.from_file("graphs/specs/diamond.xml")
    mermaid = spec.to_mermaid()
    assert mermaid.startswith("flowchart TD")
    assert 'P1["P1 · CoTAgent"]' in mermaid
    assert "P2 --> FINAL" in mermaid
    assert 'FINAL(["FINAL · DebateAgent"])' in mermaid


def test_direct_answer_spec():
    spec = spec_from_data({"direct_answer": "42", "dom": "low"})
    assert spec.nodes == [] and spec.sink is None
    assert parse_orchestration(spec.to_xml(), dom="low").model_dump() == spec.model_dump()


def test_spec_hash_ignores_thinking_but_not_structure():
    a = spec_from_data({"nodes": [node("A")], "thinking": "x"})
    b = spec_from_data({"nodes": [node("A")], "thinking": "y"})
    c = spec_from_data({"nodes": [node("A", "sc")]})
    assert a.spec_hash() == b.spec_hash() != c.spec_hash()


def test_from_text_and_from_file_take_the_registry_of_a_user_kind(tmp_path):
    """A spec naming a user-registered kind (with a renamed parameter tag) loads through from_text/from_file."""
    from pydantic import Field

    from mas_orchestra.registry import AgentRegistry, Params, default_registry, register_agent

    class PlanParams(Params):
        depth: int = Field(2, ge=1, le=3)

    registry = AgentRegistry(default_registry.kinds())
    register_agent("planner", lambda m, p, c: None, description="plans", params=PlanParams,
                   xml_tags={"depth": "plan_depth"}, registry=registry)
    data = {"nodes": [node("P", "planner", depth=3), node("F", "cot", "use ${P}")], "edges": edges("P>F")}
    spec = spec_from_data(data, registry=registry)
    xml = spec.to_xml(registry=registry)
    assert "<plan_depth>3</plan_depth>" in xml

    for text in (xml, spec.model_dump_json()):
        with pytest.raises(SpecError, match=r"unknown agent '(planner|PlannerAgent)'"):
            GraphSpec.from_text(text)  # the default registry does not know the kind
        loaded = GraphSpec.from_text(text, registry=registry)
        assert loaded.model_dump() == spec.model_dump()
        assert loaded.nodes[0].agent == "planner" and loaded.nodes[0].params == {"depth": 3}

    for name in ("s.xml", "s.json"):
        path = spec.to_file(tmp_path / name, registry=registry)
        assert GraphSpec.from_file(path, registry=registry).model_dump() == spec.model_dump()
        with pytest.raises(SpecError):
            GraphSpec.from_file(path)
    with pytest.raises(SpecError, match=r"depth"):  # out of the kind's bounds: still validated
        GraphSpec.from_text(xml.replace("<plan_depth>3<", "<plan_depth>9<"), registry=registry)
    assert "planner" not in default_registry
