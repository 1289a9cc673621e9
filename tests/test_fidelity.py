"""Reading real orchestrator text as the original system did: one test per row of the fidelity table (docs/concepts/fidelity.md).

The fixtures (tests/fixtures/fidelity/<name>.<dom>.txt) are our own texts, each reproducing one thing
released orchestrators write; ``scripts/fidelity_count.py`` holds a model of the original's reading (from its
public code) that the agreement test compares against.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mas_orchestra import SpecError, parse_orchestration
from mas_orchestra.spec import WARNING_KINDS

FIXTURES = Path(__file__).parent / "fixtures" / "fidelity"
_spec = importlib.util.spec_from_file_location("fidelity_count", Path(__file__).parents[1] / "scripts" / "fidelity_count.py")
assert _spec is not None and _spec.loader is not None
fidelity_count = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fidelity_count)


def read(name: str, *, strict: bool = False):
    dom = "low" if name.endswith(".low") else "high"
    return parse_orchestration((FIXTURES / f"{name}.txt").read_text(encoding="utf-8"), dom=dom, strict=strict)


def kinds(spec) -> list[str]:
    return [w.kind for w in spec.warnings]


def test_low_commentary_and_second_copy_are_ignored():
    spec = read("low_commentary_second_copy.low")
    assert [(n.agent, n.input) for n in spec.nodes] == [("reflexion", "")] and spec.sink == "sol"
    assert kinds(spec) == ["ignored_after_plan"]
    assert "1 more <agent> block(s)" in spec.warnings[0].message and spec.warnings[0].location.startswith("line ")


def test_degenerate_loop_reads_the_first_block():
    spec = read("low_degenerate_loop.low")
    assert [n.agent for n in spec.nodes] == ["cot"]
    assert kinds(spec) == ["ignored_after_plan"] and "44 more <agent> block(s)" in spec.warnings[0].message


def test_low_answer_value_is_ignored_when_an_agent_exists():
    spec = read("low_answer_value.low")
    assert spec.sink == "rem" and spec.nodes[0].input == "Find the remainder first."
    assert kinds(spec) == ["answer_ignored"] and "'(3, -1)'" in spec.warnings[0].message


@pytest.mark.parametrize("name", ["low_thinking_mentions_tags.low", "high_thinking_mentions_agent.high"])
def test_tags_mentioned_in_thinking_are_prose(name):
    spec = read(name)
    assert len(spec.nodes) == 1 and "<agent" in spec.thinking
    assert kinds(spec) == ["markup_in_thinking"]
    again = parse_orchestration(spec.to_xml(), dom=spec.dom)  # the thinking round-trips as prose
    assert again.thinking == spec.thinking and again.nodes == spec.nodes


def test_quoted_empty_input_is_the_whole_question():
    spec = read("low_quoted_empty_input.low")
    assert spec.nodes[0].input == "" and kinds(spec) == ["quoted_empty_input"]
    spec = parse_orchestration("<agent><agent_id>A</agent_id><agent_name>cot</agent_name>"
                               "<required_arguments><agent_input>''</agent_input></required_arguments></agent>")
    assert spec.nodes[0].input == ""


@pytest.mark.parametrize("name", ["low_harmony_space.low", "low_harmony_token.low"])
def test_harmony_final_channel_spellings(name):
    spec = read(name)
    assert len(spec.nodes) == 1 and spec.warnings == []  # the analysis channel's <agent> mention is dropped
    assert parse_orchestration("analysis…assistantfinal<answer>4</answer>", dom="low").direct_answer == "4"


def test_agent_names_any_case():
    spec = read("high_case_names.high")
    assert [n.agent for n in spec.nodes] == ["cot", "debate"] and spec.warnings == []


def test_only_the_first_edge_block_is_read():
    spec = read("high_two_edge_blocks.high")
    assert sorted((e.source, e.target) for e in spec.edges) == [("P1", "J"), ("P2", "J")]
    assert kinds(spec) == ["ignored_after_plan"] and "1 <edge> block(s)" in spec.warnings[0].message


def test_unpaired_from_is_dropped():
    spec = read("high_unpaired_from.high")
    assert [(e.source, e.target) for e in spec.edges] == [("A", "B")] and kinds(spec) == ["unpaired_edge"]


def test_duplicate_edge_is_tolerated():
    spec = read("high_duplicate_edge.high")
    assert len(spec.edges) == 1 and kinds(spec) == ["duplicate_edge"]


def test_answer_next_to_agents_is_ignored():
    spec = read("high_answer_with_agents.high")
    assert spec.direct_answer is None and spec.sink == "A"
    assert kinds(spec) == ["ignored_after_plan"]
    inside = parse_orchestration(
        "<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent><answer>3</answer>"
        "<agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent><edge><from>A</from><to>B</to></edge>"
    )
    assert kinds(inside) == ["answer_ignored"]


def test_repeated_plan_after_commentary_is_ignored():
    spec = read("high_commentary_after.high")
    assert [n.id for n in spec.nodes] == ["F", "R"] and spec.nodes[0].input == "Recall the relevant fact."
    assert kinds(spec) == ["ignored_after_plan"]


def test_no_orchestration_is_an_error_and_the_whole_response_fallback_is_opt_in():
    from mas_orchestra.runtime import Status, whole_response_answer

    text = (FIXTURES / "low_no_orchestration.low.txt").read_text(encoding="utf-8")
    with pytest.raises(SpecError) as info:
        parse_orchestration(text, dom="low")
    assert whole_response_answer(Status.INVALID_SPEC, str(info.value), text) == text
    assert whole_response_answer(Status.INVALID_SPEC, "agent #1: missing <agent_name>", text) is None
    assert whole_response_answer(Status.OK, None, text) is None


def test_agent_block_without_id_is_an_error_not_dropped():
    with pytest.raises(SpecError, match=r"agent #2 \(CoTAgent\): missing <agent_id>"):
        read("high_missing_id.high")


def test_truncated_block_is_read_and_recorded():
    spec = read("high_truncated_block.high")
    assert [n.id for n in spec.nodes] == ["A", "B"] and kinds(spec) == ["unclosed_block"]
    with pytest.raises(SpecError, match="unclosed_block"):
        read("high_truncated_block.high", strict=True)


def test_unknown_agent_is_refused_before_anything_runs():
    with pytest.raises(SpecError, match="unknown agent 'OracleAgent'"):
        read("high_unknown_agent.high")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<agent><agent_id>A</agent_id><agent_name>cot</agent_name><required_arguments><agent_input>use ${B}"
         "</agent_input></required_arguments></agent><agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent>"
         "<edge><from>A</from><to>B</to></edge>", "no edge path B -> A"),
        ("<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent>"
         "<agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent><edge><from>A</from><to>C</to></edge>",
         "undeclared agent 'C'"),
        ("<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent>"
         "<agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent>"
         "<agent><agent_id>C</agent_id><agent_name>cot</agent_name></agent><edge><from>A</from><to>B</to>"
         "<from>A</from><to>C</to></edge>", "exactly one sink"),
        ("<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent>"
         "<agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent><edge><from>A</from><to>B</to>"
         "<from>B</from><to>A</to></edge>", "cycle"),
    ],
)
def test_meaning_changing_problems_stay_errors(text, problem):
    with pytest.raises(SpecError, match=problem):
        parse_orchestration(text)


def test_low_dom_missing_output_id_is_named():
    spec = parse_orchestration("<agent><agent_name>cot</agent_name></agent><answer>r7</answer>", dom="low")
    assert spec.sink == "r7" and kinds(spec) == ["missing_output_id"]


def test_every_warning_kind_has_a_row_in_the_fidelity_table():
    table = (Path(__file__).parents[1] / "docs" / "concepts" / "fidelity.md").read_text(encoding="utf-8")
    for kind in WARNING_KINDS:
        assert f"`{kind}`" in table, kind


def test_strict_turns_each_leniency_into_an_error():
    for path in sorted(FIXTURES.glob("*.txt")):
        name = path.name.removesuffix(".txt")
        try:
            lenient = read(name)
        except SpecError:
            continue
        if lenient.warnings:
            with pytest.raises(SpecError, match="strict reading"):
                read(name, strict=True)


def test_agreement_with_the_original_reading():
    rows = {r["file"]: r for r in fidelity_count.compare(sorted(FIXTURES.glob("*.txt")))}
    differs = sorted(name for name, r in rows.items() if not r["same"])
    # exactly the documented differences (the fidelity table, docs/concepts/fidelity.md): a block without an id, a truncated block,
    # and the whole-response fallback, which is opt-in
    assert differs == ["high_missing_id.high.txt", "high_truncated_block.high.txt", "low_no_orchestration.low.txt"]
    with_fallback = fidelity_count.compare([FIXTURES / "low_no_orchestration.low.txt"], whole_response_fallback=True)
    assert with_fallback[0]["same"]
