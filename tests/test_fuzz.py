"""Property-based fuzzing: any text parses to a valid spec or raises SpecError; accepted specs compile."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mas_orchestra import GraphSpec, SpecError, compile_spec, parse_orchestration, parse_spec
from mas_orchestra.registry import default_registry
from mas_orchestra.spec import check_spec, spec_from_data
from mas_orchestra.testing import ScriptedChatModel

TAGS = [
    "thinking", "agent", "agent_id", "agent_name", "agent_description", "required_arguments",
    "agent_input", "debate_roles", "edge", "from", "to", "agent_output_id", "answer", "samples", "rounds",
]
NAMES = ["CoTAgent", "SCAgent", "DebateAgent", "ReflexionAgent", "WebSearchAgent", "cot", "Oracle", ""]
IDS = ["A", "B", "C", "FINAL", "x y", "", "A", "${A}"]

fragment = st.one_of(
    st.sampled_from(TAGS).map(lambda t: f"<{t}>"),
    st.sampled_from(TAGS).map(lambda t: f"</{t}>"),
    st.sampled_from(NAMES + IDS),
    st.sampled_from(["['a','b']", '["p", "q"]', "[", "3", "0.7", "${B}", "assistantfinal", "\n", " "]),
    st.text(max_size=8),
)
orchestration_text = st.lists(fragment, max_size=60).map("".join)


def _check_invariants(spec: GraphSpec) -> None:
    assert isinstance(spec, GraphSpec)
    assert check_spec(spec.model_copy(deep=True), default_registry) == []
    ids = [n.id for n in spec.nodes]
    assert len(ids) == len(set(ids))
    if spec.nodes:
        assert spec.sink in ids
        assert spec.topological_order()  # acyclic


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(orchestration_text, st.sampled_from(["high", "low"]))
def test_any_text_parses_or_raises_spec_error(text, dom):
    try:
        spec = parse_orchestration(text, dom=dom)
    except SpecError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        return
    _check_invariants(spec)
    again = parse_orchestration(spec.to_xml(), dom=spec.dom)
    # the canonical text reads back to the same graph; the warnings of a messy text are not written into it
    assert again.model_dump(exclude={"warnings"}) == spec.model_dump(exclude={"warnings"})
    assert again.spec_hash() == spec.spec_hash()
    assert parse_spec(spec.model_dump_json()).model_dump() == spec.model_dump()  # JSON keeps the warnings


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_unicode_never_escapes_as_another_exception(text):
    for dom in ("high", "low"):
        with contextlib.suppress(SpecError):
            parse_orchestration(text, dom=dom)
    with contextlib.suppress(SpecError):
        parse_spec(text)


@st.composite
def dag_specs(draw):
    n = draw(st.integers(1, 7))
    ids = [f"N{i}" for i in range(n)]
    edges = []
    for j in range(1, n):  # every node feeds a later one: one sink, the last node
        for i in range(j):
            if draw(st.booleans()) or i == j - 1:
                edges.append({"source": ids[i], "target": ids[j]})
    edges = [e for e in edges if e["target"] == ids[-1] or draw(st.booleans()) or int(e["target"][1:]) == int(e["source"][1:]) + 1]
    kinds = draw(st.lists(st.sampled_from(["cot", "sc", "reflexion", "debate"]), min_size=n, max_size=n))
    nodes = []
    for node_id, kind in zip(ids, kinds):
        params = {"roles": ["a", "b"], "rounds": 1} if kind == "debate" else {}
        if kind == "sc":
            params = {"samples": draw(st.integers(1, 3))}
        if kind == "reflexion":
            params = {"rounds": 1}
        preds = [e["source"] for e in edges if e["target"] == node_id]
        inp = " ".join(f"${{{p}}}" for p in preds) + draw(st.text(alphabet="abc xyz?", max_size=10))
        nodes.append({"id": node_id, "agent": kind, "input": inp, "params": params})
    return {"nodes": nodes, "edges": edges, "thinking": draw(st.text(alphabet="abc ", max_size=10))}


@settings(max_examples=60, deadline=None)
@given(dag_specs())
def test_any_accepted_spec_compiles_runs_and_round_trips(data):
    try:
        spec = spec_from_data(data)
    except SpecError:
        return  # e.g. a generated graph with two sinks
    _check_invariants(spec)
    assert parse_orchestration(spec.to_xml()).model_dump() == spec.model_dump()
    graph = compile_spec(spec, ScriptedChatModel())
    out = graph.invoke({"question": "q"})
    assert out["final_answer"] == "42"
    assert set(out["results"]) == {n.id for n in spec.nodes}


# -- degenerate repetition: the first plan is read, the rest recorded, in linear time -------------------

_LOOP_BLOCK = (
    "<agent><agent_name>CoTAgent</agent_name><agent_description>solve</agent_description><required_arguments>"
    "<agent_input></agent_input></required_arguments><agent_output_id>x</agent_output_id></agent>\n"
)
_HIGH_BLOCK = "<agent><agent_id>A</agent_id><agent_name>CoTAgent</agent_name></agent>\n"


def repeated_text(blocks: int, dom: str = "low") -> str:
    """``blocks`` copies of one agent block: what a degenerate generation loop writes."""
    return "<thinking>loop</thinking>\n" + (_LOOP_BLOCK if dom == "low" else _HIGH_BLOCK) * blocks


@pytest.mark.parametrize("blocks", [45, 10_000])
def test_repeated_blocks_read_the_first_and_record_the_rest(blocks):
    text = repeated_text(blocks, "low")
    spec = parse_orchestration(text, dom="low")
    assert len(spec.nodes) == 1 and spec.nodes[0].agent == "cot"
    assert [w.kind for w in spec.warnings] == ["ignored_after_plan"]
    assert f"{blocks - 1} more <agent> block(s)" in spec.warnings[0].message
    with pytest.raises(SpecError, match="ignored_after_plan"):
        parse_orchestration(text, dom="low", strict=True)


@pytest.mark.parametrize("blocks", [2, 45, 10_000])
def test_repeated_high_dom_blocks_without_edges_are_refused(blocks):
    # The original counts every <agent> block and refuses several without an <edge> block; so do we (high DoM).
    with pytest.raises(SpecError, match=f"{blocks} <agent> blocks but no <edge> block"):
        parse_orchestration(repeated_text(blocks, "high"), dom="high")
    spec = parse_orchestration(repeated_text(1, "high"), dom="high")  # one agent needs no edges
    assert [n.id for n in spec.nodes] == ["A"] and spec.warnings == []


def test_truncated_first_block_and_markup_inside_inputs_are_named():
    spec = parse_orchestration("<thinking>t</thinking><agent><agent_name>ReflexionAgent</agent_name><required_arg",
                               dom="low")
    assert spec.nodes[0].agent == "reflexion" and [w.kind for w in spec.warnings] == ["unclosed_block", "missing_output_id"]
    with pytest.raises(SpecError, match=r"agent #1: missing <agent_name>"):
        parse_orchestration("<agent><agent_id>A</agent_id><agent_na", dom="high")
    with pytest.raises(SpecError, match=r"agent #1: <agent_input> contains orchestration markup '<answer>' \(line 1\)"):
        parse_orchestration("<agent><agent_id>A</agent_id><agent_name>cot</agent_name><required_arguments>"
                            "<agent_input>Put it in <answer> tags</agent_input></required_arguments></agent>")
