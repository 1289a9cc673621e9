"""The first run on a small model: replies without copyable placeholders, sampling caps per model, plans sized
to the question, and the quality-floor benchmark's grading (issue 34). Fast tests use scripted models; the
embedded-model test is marked slow."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from pathlib import Path

import pytest

from agents import CallSettings, CoTAgent, ReflexionAgent, SubAgentFormatError, parse_reply
from agents.base import Usage, ask, ask_plain
from agents.echo import FORMAT_PLACEHOLDERS, is_format_echo
from agents.prompts import render, worked_examples
from mas_orchestra import OrchestraConfig
from mas_orchestra.caps import (
    EMBEDDED_CAPS,
    NO_CAPS,
    SamplingCaps,
    SamplingCapsError,
    apply_caps,
    capped_registry,
    caps_for_model,
    tightest_caps,
)
from mas_orchestra.errors import SpecError
from mas_orchestra.models.constraints import OrchestrationConstraint
from mas_orchestra.prompts import orchestrator_prompt
from mas_orchestra.registry import default_registry
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.spec import parse_orchestration, spec_from_data
from mas_orchestra.spec.grammar import GrammarLimits, orchestration_grammar, reply_json_schema
from mas_orchestra.spec.grammar.replies import REPLY_EXAMPLE
from mas_orchestra.testing import ScriptedChatModel, cot_reply

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "agents" / "prompts"
REGISTRY = default_registry.without_search()


def hot_plan(temperature: str = "2.0", samples: str = "12") -> str:
    """A text plan asking for more than the embedded model's caps (what the issue's runs got)."""
    return f"""<thinking>Two agents.</thinking>
<agent>
  <agent_id>A1</agent_id>
  <agent_name>SCAgent</agent_name>
  <agent_description>vote</agent_description>
  <required_arguments>
    <agent_input></agent_input>
    <samples>{samples}</samples>
    <temperature>{temperature}</temperature>
  </required_arguments>
</agent>
<agent>
  <agent_id>A2</agent_id>
  <agent_name>ReflexionAgent</agent_name>
  <agent_description>check</agent_description>
  <required_arguments>
    <agent_input>Check ${{A1}}</agent_input>
    <rounds>7</rounds>
  </required_arguments>
</agent>
<edge>
  <from>A1</from><to>A2</to>
</edge>"""


# -- replies without copyable placeholders ---------------------------------------------------------


def test_no_shipped_reply_instruction_carries_placeholder_text():
    for path in PROMPTS.glob("*.txt"):
        text = path.read_text(encoding="utf-8")
        for inner in re.findall(r"<answer>([^<]*)</answer>", text):
            assert " ".join(re.sub(r"\W+", " ", inner.lower()).split()) not in FORMAT_PLACEHOLDERS, (path.name, inner)
        assert "your final answer only" not in text.lower(), path.name


def test_each_format_block_is_a_worked_example_that_parses_but_counts_as_an_echo():
    examples = worked_examples()
    assert ("Each spider has 8 legs, so 3 spiders have 3 × 8 = 24 legs.", "24") in examples
    assert (REPLY_EXAMPLE["thinking"], REPLY_EXAMPLE["answer"]) in examples  # the grammar module's example agrees
    for thinking, answer in examples:
        reply = f"<thinking>{thinking}</thinking>\n<answer>{answer}</answer>"
        assert parse_reply(reply) is None, reply  # a verbatim copy has not answered its own task
        assert is_format_echo(thinking, answer)


@pytest.mark.parametrize("answer", ["your final answer only", "Your final answer only.", "THE CORRECT FINAL ANSWER ONLY",
                                    "  ", "\n\t", "True if the attempt's answer is correct, otherwise False"])
def test_placeholder_or_blank_answers_are_no_answer(answer):
    assert parse_reply(f"<thinking>I thought.</thinking><answer>{answer}</answer>") is None
    assert is_format_echo("I thought.", answer)


def test_an_answer_that_only_equals_an_examples_answer_is_kept():
    """24 may be right: only the example copied whole (reasoning and answer) is an echo."""
    parsed = parse_reply("<thinking>4 boxes of 6 eggs: 4 × 6 = 24.</thinking><answer>24</answer>")
    assert parsed is not None and parsed.answer == "24"
    assert parse_reply('{"thinking": "x", "answer": "Your final answer only"}') is None


def test_the_formats_wording_in_front_of_an_answer_is_dropped():
    assert parse_reply("<thinking>x</thinking><answer>Your final answer is 24.</answer>").answer == "24."
    assert parse_reply("<answer>The final answer is: Paris</answer>").answer == "Paris"
    assert parse_reply("<answer>Your final answer is</answer>") is None
    assert parse_reply("<answer>The answer depends on the season.</answer>").answer.startswith("The answer depends")


def test_placeholder_echo_is_re_asked_with_a_reminder_that_says_so():
    model = ScriptedChatModel(replies=[cot_reply("your final answer only"), cot_reply("Jane Austen", "She wrote it.")],
                              cycle=False)
    usage = Usage()
    parsed = asyncio.run(ask(model, "Who wrote Pride and Prejudice?", usage=usage))
    assert parsed.answer == "Jane Austen"
    assert model.calls == 2 and usage.format_retries == 1
    assert render("echo_reminder") in model.prompts[1]
    assert "format's wording or the example's answer" in render("echo_reminder")


def test_whitespace_only_reply_is_re_asked_with_the_format_reminder():
    model = ScriptedChatModel(replies=["   \n ", cot_reply("84")], cycle=False)
    usage = Usage()
    assert asyncio.run(ask(model, "12 times 7?", usage=usage)).answer == "84"
    assert usage.format_retries == 1 and render("format_reminder") in model.prompts[1]


def test_a_model_that_only_echoes_fails_like_any_format_failure():
    example_thinking, example_answer = worked_examples()[0]
    model = ScriptedChatModel(replies=[cot_reply(example_answer, example_thinking)])
    with pytest.raises(SubAgentFormatError, match="of its own after 3 tries"):
        asyncio.run(CoTAgent(model, settings=CallSettings(format_retries=2)).arun("Q?"))
    assert model.calls == 3


def test_reply_json_schema_describes_a_worked_example_not_a_placeholder():
    schema = json.dumps(reply_json_schema(), ensure_ascii=False)
    assert REPLY_EXAMPLE["thinking"] in schema and "your final answer only" not in schema.lower()


# -- sampling caps ---------------------------------------------------------------------------------


def test_caps_for_models():
    assert caps_for_model("embedded") == EMBEDDED_CAPS
    assert caps_for_model(ScriptedChatModel(model_name="smollm2-135m-instruct")) == EMBEDDED_CAPS
    assert caps_for_model("hf:/models/HuggingFaceTB/SmolLM2-135M-Instruct") == EMBEDDED_CAPS
    assert caps_for_model("openai:gpt-4o-mini") == NO_CAPS
    assert caps_for_model(ScriptedChatModel()) == NO_CAPS
    assert EMBEDDED_CAPS.max_temperature is not None and EMBEDDED_CAPS.max_temperature <= 1.0
    tight = tightest_caps([NO_CAPS, SamplingCaps(max_samples=4), SamplingCaps(max_samples=2, max_temperature=0.7)])
    assert tight == SamplingCaps(max_samples=2, max_temperature=0.7)


@pytest.mark.parametrize("bad", [{"max_temperature": -0.1}, {"max_temperature": float("nan")}, {"max_samples": 0},
                                 {"max_debate_rounds": 1.5}, {"max_reflexion_rounds": True},
                                 {"default_temperature": -1}, {"default_temperature": 0.9, "max_temperature": 0.5}])
def test_bad_caps_are_a_typed_error(bad):
    with pytest.raises(SamplingCapsError, match=next(iter(bad)).replace("max_", "(max_)?")):
        SamplingCaps(**bad)


def test_a_model_without_caps_keeps_the_original_defaults_and_bounds():
    assert capped_registry(REGISTRY, NO_CAPS) is REGISTRY
    orchestra = Orchestra(ScriptedChatModel(replies=[hot_plan()]), ScriptedChatModel(replies=[cot_reply("7")]))
    assert orchestra.caps == NO_CAPS
    assert orchestra.registry.get("sc").params().samples == 5
    spec = orchestra.parse(hot_plan())
    assert spec.node("A1").params == {"samples": 12, "temperature": 2.0} and not spec.warnings


def test_capped_registry_lowers_bounds_and_defaults():
    capped = capped_registry(REGISTRY, EMBEDDED_CAPS)
    sc = capped.get("sc").params()
    assert (sc.samples, sc.temperature) == (3, 0.0)  # the embedded model is greedy unless a plan asks otherwise
    assert capped.get("debate").params(roles=["a", "b"]).rounds == 2
    assert capped.get("reflexion").params().rounds == 2
    with pytest.raises(ValueError, match="less than or equal to 1"):
        capped.get("cot").params(temperature=1.5)
    assert REGISTRY.get("sc").params().samples == 5  # the registry given is not changed
    prompt = orchestrator_prompt("Q?", registry=capped)
    assert "default 3, >= 1, <= 3" in prompt and "<= 2.0" not in prompt


def test_grammar_of_a_capped_registry_cannot_ask_for_more():
    grammar = orchestration_grammar("high", capped_registry(REGISTRY, EMBEDDED_CAPS))
    temperatures = set(re.findall(r'"\\n    <temperature>" \(([^)]*)\)', grammar))
    assert temperatures and all('"1.0"' in t and '"1.1"' not in t and '"2.0"' not in t for t in temperatures)
    assert all(t.strip() == '"1" | "2" | "3"' for t in re.findall(r'"\\n    <samples>" \(([^)]*)\)', grammar))
    assert all(t.strip() == '"1" | "2"' for t in re.findall(r'"\\n    <rounds>" \(([^)]*)\)', grammar))
    uncapped = orchestration_grammar("high", REGISTRY)
    assert '"2.0"' in uncapped and '"20"' in uncapped


def test_grammar_of_a_capped_registry_accepts_the_cap_and_refuses_above_it():
    xgr = pytest.importorskip("xgrammar")
    capped = capped_registry(REGISTRY, EMBEDDED_CAPS)
    grammar = xgr.Grammar.from_ebnf(orchestration_grammar("high", capped, GrammarLimits(max_agents=2)))
    within = spec_from_data({"nodes": [{"id": "A1", "agent": "sc", "params": {"samples": 3, "temperature": 1.0}}]})
    above = spec_from_data({"nodes": [{"id": "A1", "agent": "sc", "params": {"samples": 3, "temperature": 1.5}}]})
    accepts = xgr.testing._is_grammar_accept_string
    assert accepts(grammar, within.to_xml().replace("<agent_description></agent_description>",
                                                    "<agent_description>v</agent_description>"))
    assert not accepts(grammar, above.to_xml().replace("<agent_description></agent_description>",
                                                       "<agent_description>v</agent_description>"))


def test_a_text_plan_above_a_cap_runs_at_the_cap_with_a_warning():
    sub = ScriptedChatModel(replies=[cot_reply("7")], model_name="smollm2-135m-instruct")
    orchestra = Orchestra(ScriptedChatModel(replies=[hot_plan()]), sub, config=OrchestraConfig(constrained=False))
    assert orchestra.caps == EMBEDDED_CAPS
    outcome = orchestra.run("What is 3 + 4?")
    assert outcome.status is Status.OK and outcome.answer == "7"
    spec = outcome.spec
    assert spec.node("A1").params == {"samples": 3, "temperature": 1.0}
    assert spec.node("A2").params == {"rounds": 2}
    capped = [w for w in spec.warnings if w.kind == "capped_param"]
    assert [(w.location, re.search(r"'(\w+)'", w.message).group(1)) for w in capped] == [
        ("agent A1", "samples"), ("agent A1", "temperature"), ("agent A2", "rounds")]
    assert "2.0" in capped[1].message and "cap 1.0" in capped[1].message
    assert {kw.get("temperature") for kw in sub.call_kwargs} == {1.0, 0.0}  # SC at the cap, Reflexion greedy
    # 3 samples; Reflexion's critic never says True, so 1 attempt + 2 capped rounds of critic and refine (7 asked)
    assert sub.calls == 3 + 1 + 2 * 2


def test_strict_mode_makes_a_capped_parameter_an_error_naming_node_and_parameter():
    sub = ScriptedChatModel(replies=[cot_reply("7")], model_name="smollm2-135m-instruct")
    orchestra = Orchestra(ScriptedChatModel(replies=[hot_plan()]), sub,
                          config=OrchestraConfig(constrained=False, strict=True))
    with pytest.raises(SpecError) as info:
        orchestra.parse(hot_plan())
    message = str(info.value)
    assert "agent 'A1' (SCAgent): parameter 'temperature' = 2.0" in message
    assert "agent 'A2' (ReflexionAgent): parameter 'rounds' = 7" in message
    outcome = orchestra.run("What is 3 + 4?")
    assert outcome.status is Status.INVALID_SPEC and "'temperature'" in outcome.error
    assert sub.calls == 0


def test_apply_caps_leaves_a_plan_within_the_caps_alone():
    spec = parse_orchestration(hot_plan("0.7", "2").replace("<rounds>7</rounds>", "<rounds>1</rounds>"))
    assert apply_caps(spec, REGISTRY, EMBEDDED_CAPS, strict=True) is spec


def test_explicit_caps_override_the_models():
    orchestra = Orchestra(ScriptedChatModel(replies=[hot_plan()]), ScriptedChatModel(),
                          config=OrchestraConfig(caps=SamplingCaps(max_samples=1)))
    assert orchestra.parse(hot_plan()).node("A1").params == {"samples": 1, "temperature": 2.0}


# -- plans sized to the question -------------------------------------------------------------------


def test_high_prompt_shows_a_one_agent_plan_and_allows_a_direct_answer():
    prompt = orchestrator_prompt("What is 12 times 7?")
    examples = prompt[prompt.index("# Format example"):prompt.index("# Task")]
    single = examples[examples.index("For a one-step task"):]
    assert single.count("<agent>") == 1 and "<agent_input></agent_input>" in single and "<edge>" not in single
    assert "skip the agents" in prompt
    assert parse_orchestration(single[single.index("<thinking>"):]).nodes[0].input == ""


def test_orchestra_grammar_lets_the_orchestrator_answer_directly():
    direct = OrchestrationConstraint(dom="high", registry=REGISTRY, direct_answers=True)
    first_stage = direct.next_stage("<thinking>Easy.</thinking>", remaining=400)
    assert first_stage is not None and "<answer>" in first_stage and "agent_1" in first_stage
    training = OrchestrationConstraint(dom="high", registry=REGISTRY)  # training rollouts keep their grammar
    assert "<answer>" not in (training.next_stage("<thinking>Easy.</thinking>", remaining=400) or "")
    spec = parse_orchestration("<thinking>I know this.</thinking>\n<answer>Paris</answer>")
    assert not spec.nodes and spec.direct_answer == "Paris"


def test_a_direct_answer_plan_runs_without_sub_agent_calls():
    sub = ScriptedChatModel(replies=[cot_reply("x")])
    orchestrator = ScriptedChatModel(replies=["<thinking>Known.</thinking>\n<answer>Paris</answer>"])
    outcome = Orchestra(orchestrator, sub,
                        config=OrchestraConfig(constrained=False)).run("What is the capital of France?")
    assert outcome.status is Status.OK and outcome.answer == "Paris" and sub.calls == 0


# -- the quality-floor benchmark -------------------------------------------------------------------


def _benchmark():
    spec = importlib.util.spec_from_file_location("first_run_bench", REPO / "benchmarks" / "first_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_questions_and_grading():
    bench = _benchmark()
    rows = bench.load_questions(bench.DATA, None)
    assert len(rows) == 20 and all(r["answers"] for r in rows)
    assert bench.grade("12 times 7 is 84.", ["84"]) and not bench.grade("84 or maybe 48", ["84"])
    assert bench.grade("The novel was written by Jane Austen.", ["Jane Austen", "Austen"])
    assert not bench.grade("Your final answer only", ["Jane Austen"])
    assert not bench.grade("Venusian", ["Venus"]) and bench.grade("1,000 apples", ["1000"])
    assert bench.is_placeholder_echo("<thinking>x</thinking><answer>Your final answer only</answer>")
    assert not bench.is_placeholder_echo("<thinking>x</thinking><answer>84</answer>")
    assert bench.is_token_soup("Introdu Injury PrestonSQL bridgeGetasso uri Stand fuel mission stone faceenson")
    assert not bench.is_token_soup("Each spider has 8 legs, so 3 spiders have 24 legs in all of the boxes.")


@pytest.mark.slow
def test_embedded_first_run_answers_a_one_fact_question():
    """The README's first command on the embedded model: a valid plan within the caps, and no placeholder answer."""
    pytest.importorskip("torch")
    orchestra = Orchestra("embedded", "embedded")
    assert orchestra.caps == EMBEDDED_CAPS
    outcome = orchestra.run("What is the capital of France?")
    assert outcome.status is Status.OK, outcome.error
    assert not is_format_echo("", outcome.answer or "")
    for node in outcome.spec.nodes:
        assert float(node.params.get("temperature", 0.5)) <= 1.0
        assert int(node.params.get("samples", 1)) <= 3


# -- plain replies for small models ----------------------------------------------------------------


def test_ask_plain_sends_the_task_alone_and_reads_the_reply_as_the_answer():
    model = ScriptedChatModel(replies=["The capital of France is Paris."])
    usage = Usage()
    parsed = asyncio.run(ask_plain(model, "What is the capital of France?", usage=usage, temperature=0.0))
    assert parsed.answer == "The capital of France is Paris." and parsed.thinking == ""
    assert model.prompts == ["What is the capital of France?"] and model.call_kwargs[0]["temperature"] == 0.0
    tagged = ScriptedChatModel(replies=[cot_reply("Paris", "It is the capital.")])
    assert asyncio.run(ask_plain(tagged, "Q?", usage=usage)).answer == "Paris"


def test_ask_plain_re_asks_blank_and_echoed_replies_then_fails():
    model = ScriptedChatModel(replies=["  \n", "<answer>your final answer only</answer>", "Paris."], cycle=False)
    usage = Usage()
    assert asyncio.run(ask_plain(model, "Q?", usage=usage)).answer == "Paris."
    assert usage.calls == 3 and usage.format_retries == 2
    blank = ScriptedChatModel(replies=[" "])
    with pytest.raises(SubAgentFormatError, match="no answer of its own after 2 plain tries"):
        asyncio.run(ask_plain(blank, "Q?", usage=Usage(), settings=CallSettings(format_retries=1)))


def test_plain_replies_follow_the_model_and_reach_every_step_by_step_attempt():
    plan = spec_from_data({"thinking": "One agent.", "nodes": [{"id": "A1", "agent": "sc", "description": "vote",
                                                               "params": {"samples": 2}}]}).to_xml()
    small = ScriptedChatModel(replies=["Seven."], model_name="smollm2-135m-instruct")
    orchestra = Orchestra(ScriptedChatModel(replies=[plan]), small, config=OrchestraConfig(constrained=False))
    assert orchestra.plain_replies and orchestra.caps == EMBEDDED_CAPS
    outcome = orchestra.run("What is 3 + 4?")
    assert outcome.status is Status.OK, outcome.error
    assert outcome.answer == "Seven." and small.calls == 2  # two SC samples, each the question alone
    assert all(prompt == "What is 3 + 4?" for prompt in small.prompts)
    api = Orchestra(ScriptedChatModel(replies=[plan]), ScriptedChatModel(replies=[cot_reply("7")]))
    assert not api.plain_replies
    assert not Orchestra(ScriptedChatModel(replies=[plan]), small,
                         config=OrchestraConfig(plain_replies=False)).plain_replies


def test_plain_replies_drop_the_format_block_from_critic_and_judge_prompts():
    """Reflexion's critic and refine calls are asked without the format (a small model copies its example)."""
    small = ScriptedChatModel(replies=["Seven.", "The attempt is right.", "It is seven."], cycle=False)
    agent = ReflexionAgent(small, rounds=1, settings=CallSettings(plain_replies=True))
    result = asyncio.run(agent.arun("What is 3 + 4?"))
    assert result.answer == "It is seven." and small.calls == 3
    assert small.prompts[0] == "What is 3 + 4?"
    assert "Review the attempt" in small.prompts[1]
    assert all("Reply in exactly this format" not in p and "<answer>" not in p for p in small.prompts)


class _LocalScripted(ScriptedChatModel):
    """A scripted model that says it decodes under grammars, as the embedded model does."""

    supports_grammar_constraints: bool = True


def test_embedded_caps_bound_a_constrained_plan_to_one_agent():
    small = ScriptedChatModel(replies=["Paris."], model_name="smollm2-135m-instruct")
    orchestra = Orchestra(_LocalScripted(replies=["x"]), small)
    constraint = orchestra.orchestration_constraint
    assert constraint is not None and constraint.limits.max_agents == 1 and constraint.direct_answers
    after_one = "<thinking>t</thinking>" + spec_from_data(
        {"nodes": [{"id": "A1", "agent": "cot", "description": "d"}]}).to_xml().split("</thinking>", 1)[1]
    assert constraint.next_stage(after_one, remaining=400) == 'root ::= ("")\n'  # only stopping: no second agent
    uncapped = Orchestra(_LocalScripted(replies=["x"]), ScriptedChatModel(replies=["x"]))
    assert uncapped.orchestration_constraint is not None
    assert uncapped.orchestration_constraint.limits.max_agents == GrammarLimits().max_agents
    given = Orchestra(_LocalScripted(replies=["x"]), small,
                      config=OrchestraConfig(grammar_limits=GrammarLimits(max_agents=3, input_chars=50)))
    assert given.orchestration_constraint.limits == GrammarLimits(max_agents=1, input_chars=50)


def test_asked_plainly_a_lone_agent_gets_the_question_itself():
    plan = spec_from_data({"thinking": "One agent.", "nodes": [{"id": "A1", "agent": "cot", "description": "d",
                                                               "input": "Find the author."}]}).to_xml()
    small = ScriptedChatModel(replies=["Jane Austen wrote it."], model_name="smollm2-135m-instruct")
    outcome = Orchestra(ScriptedChatModel(replies=[plan]), small,
                        config=OrchestraConfig(constrained=False)).run("Who wrote Emma?")
    assert outcome.answer == "Jane Austen wrote it." and small.prompts == ["Who wrote Emma?"]
    framed = ScriptedChatModel(replies=[cot_reply("Jane Austen")])
    Orchestra(ScriptedChatModel(replies=[plan]), framed,
              config=OrchestraConfig(constrained=False)).run("Who wrote Emma?")
    assert "Current sub-task: Find the author." in framed.prompts[0]  # structured replies keep the framing
