"""The blocks and the sub-agent call contract, on scripted models."""

from __future__ import annotations

import asyncio
import time

import pytest
from langgraph.graph import START, StateGraph

from agents import (
    AgentResult,
    CallLimiter,
    CallSettings,
    CoTAgent,
    DebateAgent,
    ReflexionAgent,
    SCAgent,
    SubAgentFormatError,
    normalize_answer,
    parse_reply,
)
from mas_orchestra.testing import ScriptedChatModel, cot_reply


def test_parse_reply_lenient():
    assert parse_reply("<thinking>a</thinking><answer> 5 </answer>").answer == "5"
    assert parse_reply("<THINKING>a</THINKING>< Answer >7").answer == "7"  # unclosed, odd case
    assert parse_reply("so... Answer: 12").answer == "12"
    assert parse_reply("therefore \\boxed{\\frac{1}{2}}").answer == "\\boxed{\\frac{1}{2}}"
    assert parse_reply("no idea") is None
    assert parse_reply("<answer>  </answer>") is None


@pytest.mark.parametrize(
    ("a", "b"),
    [("\\boxed{1,000}", "1000"), ("$0.5$", "\\frac{1}{2}"), ("42.", "42.0"), ("Paris", " paris ")],
)
def test_normalize_answer_equivalences(a, b):
    assert normalize_answer(a) == normalize_answer(b)


def test_result_text_is_readable_not_a_repr():
    result = AgentResult(agent="cot", thinking="2+2", answer="4")
    assert result.text() == "Reasoning: 2+2\nAnswer: 4"
    assert "AgentResult" not in str(result)


async def test_cot_one_call_with_temperature_and_usage():
    model = ScriptedChatModel(replies=[cot_reply("9")], input_tokens=10, output_tokens=3)
    result = await CoTAgent(model, temperature=0.5).arun("3*3?")
    assert result.answer == "9" and result.thinking == "step by step"
    assert model.calls == 1 and model.call_kwargs[0]["temperature"] == 0.5
    assert (result.usage.calls, result.usage.input_tokens, result.usage.output_tokens) == (1, 10, 3)
    assert result.usage.by_model["scripted"].calls == 1
    assert "3*3?" in model.prompts[0]


async def test_format_repair_then_success():
    model = ScriptedChatModel(replies=["blah", "still blah", cot_reply("1")], cycle=False)
    result = await CoTAgent(model).arun("t")
    assert result.answer == "1" and model.calls == 3
    assert "did not follow the required format" in model.prompts[1]


async def test_format_repair_is_bounded_and_typed():
    model = ScriptedChatModel(replies=["never formatted"])
    with pytest.raises(SubAgentFormatError, match="after 3 tries"):
        await CoTAgent(model, settings=CallSettings(format_retries=2)).arun("t")
    assert model.calls == 3
    model = ScriptedChatModel(replies=["never formatted"])
    with pytest.raises(SubAgentFormatError):
        await CoTAgent(model).arun("t")
    assert model.calls == 6  # the original's bound: 5 reminders


async def test_sc_votes_over_normalised_answers_concurrently():
    replies = [cot_reply("\\boxed{1,000}"), cot_reply("7"), cot_reply("1000"), cot_reply("1000.0"), cot_reply("7")]
    model = ScriptedChatModel(replies=replies, delay=0.2, cycle=False)
    start = time.perf_counter()
    result = await SCAgent(model, samples=5).arun("t")
    elapsed = time.perf_counter() - start
    assert normalize_answer(result.answer) == "1000"
    assert result.details["votes"] == {"1000": 3, "7": 2}
    assert model.calls == 5 and model.peak_in_flight == 5
    assert elapsed < 0.2 * 5 * 0.6  # concurrent, not sequential (generous bound; latency is simulated)
    assert result.usage.calls == 5


async def test_sc_tolerates_some_failed_samples_and_respects_max_parallel():
    replies = ["junk"] * 6 + [cot_reply("3")] * 10
    model = ScriptedChatModel(replies=replies, cycle=False)
    result = await SCAgent(model, samples=3, max_parallel=1).arun("t")
    assert result.answer == "3"
    assert result.details["failed_samples"] == 1
    assert model.peak_in_flight == 1


async def test_reflexion_stops_when_critic_accepts():
    script = [cot_reply("5"), cot_reply("False", "wrong sign"), cot_reply("-5"), cot_reply("True", "ok")]
    model = ScriptedChatModel(replies=script, cycle=False)
    result = await ReflexionAgent(model, rounds=5).arun("t")
    assert result.answer == "-5" and model.calls == 4
    assert [r["accepted"] for r in result.details["rounds"]] == [False, True]
    assert "wrong sign" in model.prompts[2]


async def test_reflexion_call_bound():
    model = ScriptedChatModel(replies=[cot_reply("False")])
    await ReflexionAgent(model, rounds=5).arun("t")
    assert model.calls == 1 + 5 * 2


async def test_debate_rounds_roles_and_judge():
    model = ScriptedChatModel(replies=lambda msgs, i: cot_reply(f"r{i}"), delay=0.05)
    result = await DebateAgent(model, roles=["A", "B", "C"], rounds=2).arun("t")
    assert model.calls == 2 * 3 + 1
    assert model.peak_in_flight == 3  # debaters of one round run concurrently
    second_round_prompt_for_a = model.prompts[3]
    assert "[B]" in second_round_prompt_for_a and "[C]" in second_round_prompt_for_a
    assert "[A]\n" not in second_round_prompt_for_a.split("previous round")[1].split("Consider")[0]
    assert "judge" in model.prompts[-1]
    assert len(result.details["transcript"]) == 2


def test_debate_needs_two_roles():
    with pytest.raises(ValueError, match="at least 2 roles"):
        DebateAgent(ScriptedChatModel(), roles=["solo"])


async def test_global_limiter_bounds_in_flight_calls():
    model = ScriptedChatModel(delay=0.05)
    settings = CallSettings(limiter=CallLimiter(2))
    await asyncio.gather(*(SCAgent(model, samples=5, settings=settings).arun("t") for _ in range(3)))
    assert model.calls == 15 and model.peak_in_flight == 2


def test_limiter_works_across_event_loops():
    model = ScriptedChatModel(delay=0.01)
    agent = SCAgent(model, samples=4, settings=CallSettings(limiter=CallLimiter(2)))
    for _ in range(3):
        asyncio.run(agent.arun("t"))
    assert model.calls == 12 and model.peak_in_flight == 2


async def test_blocks_are_langgraph_nodes():
    builder = StateGraph(dict)
    builder.add_node("cot", CoTAgent(ScriptedChatModel(replies=[cot_reply("8")])))
    builder.add_edge(START, "cot")
    out = await builder.compile().ainvoke({"question": "2*4?"})
    assert out["answer"] == "8" and out["result"].agent == "cot"


async def test_transport_errors_propagate_unchanged():
    model = ScriptedChatModel(replies=[ConnectionError("boom")])
    with pytest.raises(ConnectionError):
        await CoTAgent(model).arun("t")


async def test_call_timeout():
    model = ScriptedChatModel(delay=1.0)
    with pytest.raises(TimeoutError):
        await CoTAgent(model, settings=CallSettings(call_timeout=0.05)).arun("t")


def test_message_text_reads_like_base_message_text():
    from langchain_core.messages import AIMessage

    from agents.base import message_text

    blocks = ["a", {"type": "text", "text": "b"}, {"type": "reasoning", "reasoning": "hidden"}, {"text": "untyped"}]
    message = AIMessage(content=blocks)
    assert message_text(message) == message.text == "ab"
    assert message_text({"role": "assistant", "content": blocks}) == "ab"  # a chat dict (TRL completion)
    assert message_text(type("Reply", (), {"content": blocks})()) == "ab"  # anything with .content
    assert message_text("plain") == "plain" and message_text({"role": "assistant", "content": None}) == ""
