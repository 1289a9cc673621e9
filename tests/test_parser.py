"""The original orchestration text format and its quirks."""

from __future__ import annotations

import pytest

from mas_orchestra import SpecError, parse_orchestration

HIGH = """<thinking>Split into two searches, then answer.</thinking>
<agent>
  <agent_id>WS_1</agent_id>
  <agent_name>WebSearchAgent</agent_name>
  <agent_description>find the director</agent_description>
  <required_arguments>
    <agent_input>Who directed the film?</agent_input>
  </required_arguments>
</agent>
<agent>
  <agent_id>WS_2</agent_id>
  <agent_name>WebSearchAgent</agent_name>
  <agent_description>find the birth year</agent_description>
  <required_arguments>
    <agent_input>When was ${WS_1} born?</agent_input>
  </required_arguments>
</agent>
<agent>
  <agent_id>FINAL</agent_id>
  <agent_name>DebateAgent</agent_name>
  <agent_description>decide</agent_description>
  <required_arguments>
    <agent_input>Given ${WS_1} and ${WS_2}, answer.</agent_input>
    <debate_roles>["Historian", "Fact checker"]</debate_roles>
  </required_arguments>
</agent>
<edge>
  <from>WS_1</from><to>WS_2</to>
  <from>WS_2</from><to>FINAL</to>
  <from>WS_1</from><to>FINAL</to>
</edge>"""


def test_high_dom_example_parses():
    spec = parse_orchestration(HIGH)
    assert [n.id for n in spec.nodes] == ["WS_1", "WS_2", "FINAL"]
    assert [n.agent for n in spec.nodes] == ["search", "search", "debate"]
    assert spec.nodes[2].params == {"roles": ["Historian", "Fact checker"]}
    assert spec.sink == "FINAL"
    assert spec.thinking == "Split into two searches, then answer."
    assert len(spec.edges) == 3


def test_case_and_whitespace_tolerant():
    text = HIGH.replace("<agent_id>", "< AGENT_ID >").replace("</agent_id>", "</Agent_Id >")
    text = text.replace("WebSearchAgent", "  websearchagent ").replace("<from>WS_1", "<FROM>  WS_1 ")
    spec = parse_orchestration(text)
    assert [n.id for n in spec.nodes] == ["WS_1", "WS_2", "FINAL"]
    assert spec.nodes[0].agent == "search"


@pytest.mark.parametrize("name", ["CoTAgent", "cotagent", "cot", "COT", " CoT Agent "])
def test_agent_name_aliases(name):
    spec = parse_orchestration(f"<agent><agent_id>A</agent_id><agent_name>{name}</agent_name></agent>")
    assert spec.nodes[0].agent == "cot"


@pytest.mark.parametrize(
    ("archive", "kind"),
    [("COT", "cot"), ("COT_SC", "sc"), ("Reflexion", "reflexion"), ("LLM_debate", "debate"), ("WebSearch", "search")],
)
def test_original_archive_names(archive, kind):
    extra = "<debate_roles>['a','b']</debate_roles>" if kind == "debate" else ""
    text = f"<agent><agent_id>A</agent_id><agent_name>{archive}</agent_name><required_arguments>{extra}</required_arguments></agent>"
    assert parse_orchestration(text).nodes[0].agent == kind


def test_python_style_roles_and_unclosed_trailing_tags():
    text = (
        "<thinking>plan\n<agent><agent_id>A</agent_id><agent_name>cot</agent_name>"
        "<agent><agent_id>B</agent_id><agent_name>DebateAgent<required_arguments>"
        "<agent_input>check ${A}<debate_roles>['Pro', 'Con']"
        "<edge><from>A<to>B"
    )
    spec = parse_orchestration(text)
    assert spec.thinking == "plan"
    assert [n.id for n in spec.nodes] == ["A", "B"]
    assert spec.nodes[1].input == "check ${A}"
    assert spec.nodes[1].params["roles"] == ["Pro", "Con"]
    assert spec.sink == "B"


def test_harmony_prefix_dropped():
    prefix = "analysis<agent><agent_id>X</agent_id><agent_name>Oracle</agent_name></agent>assistantfinal"
    spec = parse_orchestration(prefix + "<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent>")
    assert [n.id for n in spec.nodes] == ["A"]


def test_unknown_tags_inside_text_are_text():
    spec = parse_orchestration(
        "<agent><agent_id>A</agent_id><agent_name>cot</agent_name><required_arguments>"
        "<agent_input>Is 3 <b>less</b> than x<y?</agent_input></required_arguments></agent>"
    )
    assert spec.nodes[0].input == "Is 3 <b>less</b> than x<y?"


def test_extra_parameters_as_tags():
    spec = parse_orchestration(
        "<agent><agent_id>A</agent_id><agent_name>SCAgent</agent_name><required_arguments>"
        "<samples>3</samples><temperature>0.7</temperature></required_arguments></agent>"
    )
    assert spec.nodes[0].params == {"samples": 3, "temperature": 0.7}


def test_unpaired_edge_extra_is_dropped_with_a_warning():
    text = (
        "<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent>"
        "<agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent>"
        "<edge><from>A</from><to>B</to><from>B</from></edge>"
    )
    spec = parse_orchestration(text)
    assert [(e.source, e.target) for e in spec.edges] == [("A", "B")]
    assert [w.kind for w in spec.warnings] == ["unpaired_edge"]
    assert "2 <from> but 1 <to>" in spec.warnings[0].message
    with pytest.raises(SpecError, match="unpaired_edge"):
        parse_orchestration(text, strict=True)


def test_missing_agent_id_and_name():
    with pytest.raises(SpecError) as info:
        parse_orchestration("<agent><agent_name>cot</agent_name></agent><agent><agent_id>B</agent_id></agent>")
    joined = " | ".join(info.value.problems)
    assert "agent #1 (cot): missing <agent_id>" in joined
    assert "agent #2: missing <agent_name>" in joined


def test_no_agents():
    for dom in ("high", "low"):
        with pytest.raises(SpecError, match="no orchestration found: no <agent> block and no <answer>"):
            parse_orchestration("I think the answer is 4.", dom=dom)


def test_low_dom_delegation():
    text = (
        "<thinking>hard</thinking><agent><agent_name>ReflexionAgent</agent_name>"
        "<agent_description>solve</agent_description><required_arguments><agent_input></agent_input>"
        "</required_arguments><agent_output_id>r1</agent_output_id></agent><answer>r1</answer>"
    )
    spec = parse_orchestration(text, dom="low")
    assert spec.dom == "low" and spec.sink == "r1" and spec.nodes[0].agent == "reflexion"
    assert spec.nodes[0].input == ""


def test_low_dom_direct_answer():
    spec = parse_orchestration("<thinking>easy</thinking><answer>\\boxed{12}</answer>", dom="low")
    assert spec.direct_answer == "\\boxed{12}" and spec.nodes == []


def test_low_dom_first_agent_wins_and_a_disagreeing_answer_is_ignored():
    spec = parse_orchestration(
        "<agent><agent_name>cot</agent_name><agent_output_id>r</agent_output_id></agent><answer>x</answer>",
        dom="low",
    )
    assert spec.sink == "r" and [w.kind for w in spec.warnings] == ["answer_ignored"]
    spec = parse_orchestration(
        "<agent><agent_name>ReflexionAgent</agent_name><agent_output_id>a</agent_output_id></agent>"
        "<agent><agent_name>cot</agent_name><agent_output_id>b</agent_output_id></agent>",
        dom="low",
    )
    assert [n.agent for n in spec.nodes] == ["reflexion"] and spec.sink == "a"
    assert [w.kind for w in spec.warnings] == ["ignored_after_plan"]
    assert "1 more <agent> block" in spec.warnings[0].message
    spec = parse_orchestration(
        "<agent><agent_name>cot</agent_name><agent_output_id>a</agent_output_id></agent>"
        "<edge><from>a</from><to>a</to></edge>",
        dom="low",
    )
    assert spec.edges == [] and [w.kind for w in spec.warnings] == ["ignored_after_plan"]
    with pytest.raises(SpecError, match="answer_ignored"):
        parse_orchestration(
            "<agent><agent_name>cot</agent_name><agent_output_id>r</agent_output_id></agent><answer>x</answer>",
            dom="low", strict=True,
        )


def test_huge_inputs_fail_fast_with_spec_error():
    with pytest.raises(SpecError, match="limit"):
        parse_orchestration("x" * 5_000_000)
    blocks = "".join(f"<agent><agent_id>A{i}</agent_id><agent_name>cot</agent_name></agent>" for i in range(300))
    with pytest.raises(SpecError, match="at most 256"):
        parse_orchestration(blocks)


def test_wrong_types_are_caller_errors():
    with pytest.raises(TypeError):
        parse_orchestration(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dom must be"):
        parse_orchestration("<answer>1</answer>", dom="medium")  # type: ignore[arg-type]


def test_edge_block_before_the_agents_still_reads_every_agent():
    spec = parse_orchestration(
        "<edge><from>A</from><to>B</to></edge>"
        "<agent><agent_id>A</agent_id><agent_name>cot</agent_name></agent>"
        "<agent><agent_id>B</agent_id><agent_name>cot</agent_name></agent>"
    )
    assert [n.id for n in spec.nodes] == ["A", "B"] and spec.sink == "B" and spec.warnings == []
