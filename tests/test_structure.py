"""Structure metrics of specs (depth along edges and references, width, wiring) and the causal controls."""

from __future__ import annotations

import json
import random

import pytest

from mas_orchestra import OrchestraConfig, parse_orchestration
from mas_orchestra.bench.evaluation.controls import random_graph_like
from mas_orchestra.bench.evaluation.summary import format_summary, summarize
from mas_orchestra.errors import SpecError
from mas_orchestra.registry import offered_registry
from mas_orchestra.spec import spec_from_data
from mas_orchestra.spec.grammar import GrammarLimits
from mas_orchestra.spec.structure import ablate_wiring, structure_of, structure_of_data, summarize_structures


def spec(nodes, edges=(), dom="high"):
    return spec_from_data({
        "dom": dom,
        "nodes": [{"id": i, "agent": kind, "input": text} for i, kind, text in nodes],
        "edges": [{"source": a, "target": b} for a, b in edges],
    })


CHAIN3 = spec([("A1", "cot", ""), ("A2", "cot", "Given ${A1}, go on."), ("A3", "sc", "Given ${A2}, finish.")],
              [("A1", "A2"), ("A2", "A3")])
# Edges form a 3-chain but only the last agent reads anything: results flow over one link.
UNWIRED = spec([("A1", "cot", "Solve part one."), ("A2", "cot", "Solve part two."), ("A3", "cot", "Use ${A2}.")],
               [("A1", "A2"), ("A2", "A3")])
# The old prompt example's shape: two independent agents combined by a third.
FAN_IN = spec([("A1", "cot", "one"), ("A2", "sc", "two"), ("A3", "cot", "Combine ${A1} and ${A2}.")],
              [("A1", "A3"), ("A2", "A3")])


def test_chain_depths_width_and_wiring():
    s = structure_of(CHAIN3)
    assert (s.agents, s.edges, s.depth, s.ref_depth, s.width) == (3, 2, 3, 3, 1)
    assert (s.wired, s.non_source) == (2, 2) and s.kinds == {"cot": 2, "sc": 1}


def test_edges_without_references_carry_nothing():
    s = structure_of(UNWIRED)
    assert s.depth == 3 and s.ref_depth == 2 and s.wired == 1 and s.non_source == 2


def test_fan_in_is_wide_and_shallow():
    s = structure_of(FAN_IN)
    assert (s.depth, s.ref_depth, s.width, s.wired) == (2, 2, 2, 1)


def test_width_is_the_largest_antichain_not_a_layer_count():
    # A1 -> A2 -> A4 and A1 -> A3 -> A4, plus B -> A4: {A2, A3, B} run at once.
    s = structure_of(spec([("A1", "cot", ""), ("A2", "cot", "${A1}"), ("A3", "cot", "${A1}"), ("B", "cot", ""),
                           ("A4", "cot", "${A2} ${A3} ${B}")],
                          [("A1", "A2"), ("A1", "A3"), ("A2", "A4"), ("A3", "A4"), ("B", "A4")]))
    assert s.width == 3 and s.depth == 3 and s.ref_depth == 3
    # B before A1 in a chain B -> A1 -> A2 -> A3: no two agents run at once.
    line = structure_of(spec([("B", "cot", ""), ("A1", "cot", ""), ("A2", "cot", ""), ("A3", "cot", "")],
                             [("B", "A1"), ("A1", "A2"), ("A2", "A3")]))
    assert line.width == 1 and line.ref_depth == 1 and line.wired == 0


def test_direct_answer_and_single_agent():
    assert structure_of(spec_from_data({"direct_answer": "4", "nodes": []})).agents == 0
    one = structure_of(spec([("A1", "cot", "")]))
    assert (one.agents, one.depth, one.ref_depth, one.width, one.non_source) == (1, 1, 1, 1, 0)


def test_plain_data_matches_the_model_and_refuses_a_cycle():
    for s in (CHAIN3, UNWIRED, FAN_IN):
        assert structure_of_data(json.loads(s.model_dump_json())) == structure_of(s)
    with pytest.raises(SpecError, match="cycle"):
        structure_of_data({"nodes": [{"id": "a", "agent": "cot"}, {"id": "b", "agent": "cot"}],
                           "edges": [{"source": "a", "target": "b"}, {"source": "b", "target": "a"}]})
    with pytest.raises(SpecError, match="does not declare"):
        structure_of_data({"nodes": [{"id": "a", "agent": "cot"}], "edges": [{"source": "a", "target": "z"}]})


def test_summary_means_and_pooled_wired_share():
    out = summarize_structures([structure_of(CHAIN3), structure_of(UNWIRED)], kinds=["cot", "sc", "debate"])
    assert out["agents_mean"] == 3 and out["depth_mean"] == 3 and out["ref_depth_mean"] == 2.5
    assert out["wired_share"] == pytest.approx(3 / 4)
    assert out["kind_share/sc"] == pytest.approx(1 / 6) and out["kind_share/debate"] == 0.0
    empty = summarize_structures([])
    assert empty["depth_mean"] == 0.0 and empty["wired_share"] == 0.0


def test_ablate_wiring_removes_references_and_keeps_edges():
    ablated = ablate_wiring(CHAIN3)
    assert [n.input for n in ablated.nodes] == ["", "Given , go on.", "Given , finish."]
    assert ablated.edges == CHAIN3.edges and CHAIN3.nodes[1].input == "Given ${A1}, go on."
    assert structure_of(ablated).ref_depth == 1 and structure_of(ablated).depth == 3
    with pytest.raises(SpecError, match="high-DoM"):
        ablate_wiring(spec([("A1", "cot", "")], dom="low"))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_random_graph_is_valid_same_size_and_fully_referenced(n):
    registry = offered_registry(None, agents=["cot", "sc", "debate"])  # debate needs roles: never drawn
    plan = spec([(f"A{i}", "cot", "") for i in range(1, n + 1)], [(f"A{i}", f"A{i + 1}") for i in range(1, n)])
    seen_shapes = set()
    for seed in range(20):
        out = random_graph_like(plan, registry, random.Random(seed))
        shape = structure_of(out)
        assert shape.agents == n and shape.ref_depth == shape.depth and shape.wired == shape.non_source
        assert {node.agent for node in out.nodes} <= {"cot", "sc"}
        seen_shapes.add((shape.depth, shape.width, shape.edges))
    assert n < 3 or len(seen_shapes) > 1  # random, not one fixed graph
    assert random_graph_like(plan, registry, random.Random(7)) == random_graph_like(plan, registry, random.Random(7))


def test_eval_summary_has_a_structure_block():
    records = [
        {"id": "q1", "sample": 0, "status": "ok", "valid": True, "correct": True,
         "spec": json.loads(CHAIN3.model_dump_json()), "usage": {}},
        {"id": "q2", "sample": 0, "status": "ok", "valid": True, "correct": False,
         "spec": json.loads(UNWIRED.model_dump_json()), "usage": {}},
        {"id": "q3", "sample": 0, "status": "invalid_spec", "valid": False, "correct": False, "spec": None,
         "usage": {}},
    ]
    summary = summarize(records, config={"control": "ablate-wiring"})
    assert summary["structure"]["ref_depth_mean"] == 2.5 and summary["structure"]["wired_share"] == 0.75
    text = format_summary({**summary, "label": "x", "out_dir": "d", "data": "d", "grader": "math"})
    assert "ref depth 2.50" in text and "wired 75%" in text and "\ncontrol        ablate-wiring\n" in text


def test_the_new_example_is_a_wired_chain_the_parser_reads():
    from mas_orchestra.prompts import orchestrator_messages

    registry = offered_registry(None, agents=["cot", "sc"])
    text = orchestrator_messages("q", "high", registry=registry)[-1]["content"]
    example = text.split("# Format example", 1)[1].split("# Task", 1)[0]
    chain = example.split("For a one-step task", 1)[0].split("earlier result:", 1)[1]
    shape = structure_of(parse_orchestration(chain, registry=registry))
    assert shape.ref_depth == shape.depth == 2 and shape.wired == 1
    single = example.split("one agent gets the whole task:", 1)[1]
    assert structure_of(parse_orchestration(single, registry=registry)).agents == 1


def test_example_placeholders_pick_one_shape(tmp_path):
    from mas_orchestra.prompts import orchestrator_messages

    registry = offered_registry(None, agents=["cot", "sc"])
    (tmp_path / "user.txt").write_text("A {example_chain} B {example_single} C {question}")
    (tmp_path / "system.txt").write_text("")
    (tmp_path / "second_user.txt").write_text("")
    high = orchestrator_messages("q", "high", registry=registry, prompt=str(tmp_path))[-1]["content"]
    assert "Given ${A1}" in high.split(" B ")[0] and "one agent gets the whole task" in high.split(" B ")[1]
    low = orchestrator_messages("q", "low", registry=registry, prompt=str(tmp_path))[-1]["content"]
    assert low.startswith("A  B <thinking>") and "<agent_output_id>" in low
    wiring = orchestrator_messages("q", "high", registry=registry, prompt="recipes/prompts/wiring")[-1]["content"]
    assert "Given ${A1}" in wiring and "one agent gets the whole task" not in wiring


def test_three_agent_chain_example_is_wired_end_to_end(tmp_path):
    """{example_chain_3} is a chain of three whose references carry every result (depth 3 along ${} too); the
    chains prompt shows it after the two-agent one; low DoM has no such example."""
    from mas_orchestra.prompts import orchestrator_messages

    registry = offered_registry(None, agents=["cot", "sc"])
    (tmp_path / "user.txt").write_text("A {example_chain_3} B {question}")
    (tmp_path / "system.txt").write_text("")
    (tmp_path / "second_user.txt").write_text("")
    high = orchestrator_messages("q", "high", registry=registry, prompt=str(tmp_path))[-1]["content"]
    example = high.split("one built on the other:", 1)[1].split(" B ", 1)[0]
    shape = structure_of(parse_orchestration(example, registry=registry))
    assert (shape.agents, shape.depth, shape.ref_depth, shape.wired, shape.width) == (3, 3, 3, 2, 1)
    low = orchestrator_messages("q", "low", registry=registry, prompt=str(tmp_path))[-1]["content"]
    assert low.startswith("A  B ")
    chains = orchestrator_messages("q", "high", registry=registry, prompt="recipes/prompts/chains")[-1]["content"]
    assert chains.index("Given ${A1}, work out the final") < chains.index("Given ${A2}, work out the final")


def test_eval_refuses_controls_it_cannot_apply(tmp_path):
    from mas_orchestra.bench.evaluation import evaluate
    from mas_orchestra.bench.evaluation.common import EvalInputError

    rows = [{"id": "q", "question": "What is 2 + 2?", "answer": "4"}]
    for kwargs, message in (({"config": OrchestraConfig(dom="low"), "control": "ablate-wiring"}, "needs --dom high"),
                            ({"baseline": "cot", "control": "random-graph"}, "a --baseline run has none"),
                            ({"control": "shuffle"}, "unknown control 'shuffle'; valid: ablate-wiring, random-graph")):
        with pytest.raises(EvalInputError, match=message):
            evaluate(rows, subagent="scripted:4", out_dir=tmp_path / "x", progress=False, plot=False, **kwargs)


def test_eval_ablate_wiring_runs_the_plan_without_its_references(tmp_path):
    from mas_orchestra.bench.evaluation import evaluate
    from mas_orchestra.testing import ScriptedChatModel

    plan = CHAIN3.to_xml()
    summary = evaluate([{"id": "q", "question": "What is 2 + 2?", "answer": "4"}],
                       orchestrator=ScriptedChatModel(replies=[plan]), subagent="scripted:4", control="ablate-wiring",
                       out_dir=tmp_path / "run", progress=False, plot=False, samples=2)
    assert summary["control"] == "ablate-wiring" and "control[ablate-wiring]" in summary["label"]
    assert summary["structure"]["ref_depth_mean"] == 1.0 and summary["structure"]["depth_mean"] == 3.0
    assert summary["avg_at_k"] == 1.0  # the scripted sub-agent answers 4 whatever it is given


def test_training_curve_reads_tables_and_plots_structure(tmp_path):
    from mas_orchestra.bench.training_curve import curve_from_history, format_curve, plot_training

    history = [{"step": s, "reward": r, "valid_spec_rate": 1.0, "agents_per_spec": a, "delegation_share": 0.0,
                "correct_rate": r, "structure/depth_mean": a, "structure/ref_depth_mean": d,
                "structure/width_mean": 1.0, "structure/wired_share": w}
               for s, r, a, d, w in ((1, 0.0, 2.0, 1.25, 0.25), (2, 0.5, 2.5, 2.0, 0.75), (3, 1.0, 3.0, 3.0, 1.0))]
    curve = curve_from_history(history)
    assert [p.structure["ref_depth_mean"] for p in curve] == [1.25, 2.0, 3.0]
    table = format_curve(curve).splitlines()
    assert table[0].split()[-4:] == ["depth", "refdepth", "width", "wired"]
    assert table[3].split()[-4:] == ["3.00", "3.00", "1.00", "1.00"]
    old = format_curve(curve_from_history([{k: v for k, v in e.items() if not k.startswith("structure/")}
                                           for e in history]))
    assert "refdepth" not in old  # runs logged before the structure metrics keep their table
    png = plot_training(curve, tmp_path / "curve.png")
    assert png.stat().st_size > 1000


def test_eval_without_direct_answers_is_its_own_run_and_the_grammar_refuses_them(tmp_path):
    from mas_orchestra.models.constraints import OrchestrationConstraint

    registry = offered_registry(None, agents=["cot", "sc"])
    on = OrchestrationConstraint(dom="high", registry=registry, limits=GrammarLimits(), direct_answers=True)
    off = OrchestrationConstraint(dom="high", registry=registry, limits=GrammarLimits(direct_answer=False))
    assert "<answer>" in on.grammar() and "<answer>" not in off.grammar()
    from mas_orchestra.bench.evaluation import evaluate
    from mas_orchestra.testing import ScriptedChatModel

    rows = [{"id": "q", "question": "What is 2 + 2?", "answer": "4"}]
    summary = evaluate(rows, orchestrator=ScriptedChatModel(replies=[CHAIN3.to_xml()]), subagent="scripted:4",
                       out_dir=tmp_path / "run", progress=False, plot=False,
                       config=OrchestraConfig(grammar_limits=GrammarLimits(direct_answer=False)))
    assert summary["avg_at_k"] == 1.0 and summary.get("direct_answer") is False
