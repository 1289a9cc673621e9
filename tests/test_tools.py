"""Tool agents over LangChain tools: the loop (native and text protocol), the registry offer, bad input."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from agents.base import CallSettings
from agents.tools import ToolAgent, ToolsetError, as_toolset, parse_tool_request
from mas_orchestra import compile_spec
from mas_orchestra.errors import SpecError
from mas_orchestra.offers import with_tools
from mas_orchestra.prompts import orchestrator_prompt
from mas_orchestra.registry import default_registry
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.spec import parse_orchestration, spec_from_data
from mas_orchestra.spec.grammar import orchestration_grammar, orchestration_json_schema
from mas_orchestra.testing import ScriptedChatModel, cot_reply

CALLED: list[tuple[str, object]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLED.append(("add", (a, b)))
    return a + b


@tool
def lookup(key: str) -> str:
    """Look up a value in the company directory."""
    CALLED.append(("lookup", key))
    return {"ceo": "Ada"}.get(key, "not found")


@tool
def broken(x: int) -> int:
    """A tool that always fails."""
    raise RuntimeError("the database is down")


@tool
async def slow(x: int) -> int:
    """A tool that never answers in time."""
    await asyncio.sleep(30)
    return x


def text_call(name: str, **args: object) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


def native_call(name: str, call_id: str = "c1", **args: object) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@pytest.fixture(autouse=True)
def _clear():
    CALLED.clear()


# -- the text protocol ----------------------------------------------------------------------------


def test_parse_tool_request_reads_json_and_ignores_calls_after_an_answer():
    assert parse_tool_request(text_call("add", a=1, b=2) + " trailing")[:2] == ("add", {"a": 1, "b": 2})
    assert parse_tool_request('<tool_call>{"name": "add", "args": {"a": 1}}') [:2] == ("add", {"a": 1})
    assert parse_tool_request("<answer>3</answer>" + text_call("add", a=1, b=2)) is None
    assert parse_tool_request("no call here") is None
    name, args, _ = parse_tool_request("<tool_call>add(1, 2)</tool_call>")
    assert name == "" and "add(1, 2)" in args["_unreadable"]


async def test_text_protocol_calls_the_tool_and_answers_from_its_result():
    model = ScriptedChatModel(replies=[text_call("add", a=17, b=25), cot_reply("42")])
    result = await ToolAgent(model, [add]).arun("What is 17 + 25?")
    assert result.answer == "42" and CALLED == [("add", (17, 25))]
    assert result.details["mode"] == "text" and result.details["turns"] == 2
    assert result.details["tool_calls"][0]["ok"] is True and result.usage.tool_calls == 1
    assert "Result of add:\n42" in model.prompts[1]  # the observation the model saw
    assert '"a": {"type": "integer"' in model.prompts[0]  # text protocol: argument schemas are listed


async def test_native_tool_calls_use_bind_tools_and_tool_messages():
    seen: list[list] = []

    def reply(messages, index):
        seen.append(messages)
        return native_call("lookup", key="ceo") if index == 0 else cot_reply("Ada")

    model = ScriptedChatModel(replies=reply, tool_calling=True)
    result = await ToolAgent(model, [lookup, add]).arun("Who is the CEO?")
    assert result.answer == "Ada" and result.details["mode"] == "tools"
    assert [t["function"]["name"] for t in model.call_kwargs[0]["tools"]] == ["lookup", "add"]
    tool_message = next(m for m in seen[1] if isinstance(m, ToolMessage))
    assert tool_message.content.startswith("Ada") and tool_message.tool_call_id == "c1"


# -- what goes wrong becomes an observation -----------------------------------------------------


async def test_a_raising_tool_an_invented_tool_and_bad_arguments_are_observations():
    model = ScriptedChatModel(replies=[
        text_call("broken", x=1), text_call("teleport", to="mars"), text_call("add", a="x", b=None),
        "<tool_call>not json</tool_call>", cot_reply("gave up"),
    ])
    result = await ToolAgent(model, [broken, add], max_turns=6).arun("task")
    assert result.answer == "gave up"
    prompts = model.prompts
    assert "error: tool 'broken' failed: the database is down" in prompts[1]
    assert "error: there is no tool 'teleport'; the tools are: broken, add" in prompts[2]
    assert "error: tool 'add' failed" in prompts[3]
    assert "could not be read" in prompts[4]
    log = result.details["tool_calls"]
    assert [(e["tool"], e["ok"]) for e in log] == [("broken", False), ("add", False)]
    assert log[0]["error"].startswith("RuntimeError")


async def test_a_hanging_tool_is_cut_at_the_call_timeout():
    model = ScriptedChatModel(replies=[text_call("slow", x=1), cot_reply("late")])
    agent = ToolAgent(model, [slow], settings=CallSettings(call_timeout=0.3))
    started = time.perf_counter()
    result = await agent.arun("task")
    assert time.perf_counter() - started < 5
    assert result.details["tool_calls"][0]["error"] == "timed out after 0.3 s"
    assert "did not answer within 0.3 s" in model.prompts[1]


async def test_the_last_turn_always_asks_for_the_answer():
    model = ScriptedChatModel(replies=[text_call("add", a=1, b=1), text_call("add", a=2, b=2), cot_reply("4")])
    result = await ToolAgent(model, [add], max_turns=2).arun("task")
    assert result.answer == "4" and len(CALLED) == 1 and result.details["turns"] == 2
    assert "No more tool calls are possible" in model.prompts[1]


# -- offered through the registry: prompt, grammar, schema, validator ------------------------------


def test_offered_tools_appear_in_prompt_grammar_schema_and_validator():
    registry = with_tools(default_registry.without_search(), [add, lookup])
    prompt = orchestrator_prompt("q", registry=registry)
    assert "## ToolAgent" in prompt and "- add: Add two integers." in prompt
    assert "- lookup: Look up a value in the company directory." in prompt
    grammar = orchestration_grammar("high", registry)
    assert '"\\"add\\""' in grammar and '"\\"lookup\\""' in grammar
    schema = json.dumps(orchestration_json_schema("high", registry))
    assert '"enum": ["add", "lookup"]' in schema
    with pytest.raises(SpecError, match=r"parameter 'tools.0' \(<tools>\): Input should be 'add' or 'lookup'"):
        spec_from_data({"nodes": [{"id": "T", "agent": "ToolAgent", "input": "x", "params": {"tools": ["rm_rf"]}}]},
                       registry=registry)
    # without tools nothing is offered
    assert with_tools(default_registry, []) is default_registry
    assert "ToolAgent" not in orchestrator_prompt("q", registry=default_registry.without_search())


def test_bad_toolsets_are_typed_errors():
    @tool("bad name!")
    def weird() -> str:
        """x"""
        return "x"

    with pytest.raises(ToolsetError, match="cannot be offered"):
        as_toolset([weird])
    with pytest.raises(ToolsetError, match="two tools are named 'add'"):
        as_toolset([add, add])
    with pytest.raises(ToolsetError, match="is not a tool"):
        as_toolset([42])

    def plain(x: int) -> int:
        """Double x."""
        return 2 * x

    assert as_toolset([plain])["plain"].invoke({"x": 4}) == 8


SPEC = """<thinking>use the tool</thinking>
<agent><agent_id>T</agent_id><agent_name>ToolAgent</agent_name><agent_description>compute</agent_description>
<required_arguments><agent_input>Add 17 and 25.</agent_input><tools>["add"]</tools></required_arguments></agent>"""


def test_compile_spec_with_tools():
    spec = parse_orchestration(SPEC, registry=with_tools(default_registry, [add]))
    model = ScriptedChatModel(replies=[text_call("add", a=17, b=25), cot_reply("42")])
    out = compile_spec(spec, model, tools=[add]).invoke({"question": "What is 17 + 25?"})
    assert out["final_answer"] == "42" and CALLED == [("add", (17, 25))]


def test_orchestra_runs_a_tool_agent_and_counts_tool_calls():
    sub = ScriptedChatModel(replies=[text_call("add", a=17, b=25), cot_reply("42")], model_name="sub")
    orchestra = Orchestra(ScriptedChatModel(replies=[SPEC], model_name="orch"), sub, tools=[add, lookup])
    assert "- lookup: Look up a value" in orchestra.prompt("q")
    outcome = orchestra.run("What is 17 + 25?")
    assert outcome.status is Status.OK and outcome.answer == "42"
    assert outcome.usage.tool_calls == 1 and outcome.usage.tool_errors == 0
    assert outcome.node_results["T"].details["tool_calls"][0]["tool"] == "add"


def test_orchestra_records_an_invented_tool_name_as_invalid_spec():
    invented = SPEC.replace('["add"]', '["shell"]')
    orchestra = Orchestra(ScriptedChatModel(replies=[invented]), ScriptedChatModel(), tools=[add])
    outcome = orchestra.run("q")
    assert outcome.status is Status.INVALID_SPEC and "Input should be 'add'" in outcome.error


def test_tool_errors_are_counted_and_the_run_still_ends_ok():
    spec = SPEC.replace('["add"]', '["broken"]')
    sub = ScriptedChatModel(replies=[text_call("broken", x=1), cot_reply("unknown")])
    outcome = Orchestra(ScriptedChatModel(replies=[spec]), sub, tools=[broken]).run("q")
    assert outcome.status is Status.OK and outcome.usage.tool_calls == 1 and outcome.usage.tool_errors == 1


class _LocalScripted(ScriptedChatModel):
    """A scripted model that says it decodes under grammars (as the embedded model does)."""

    supports_grammar_constraints: bool = True


async def test_constrained_local_turns_are_bound_to_reply_or_offered_tool_call():
    from mas_orchestra.models.constraints import ToolTurnConstraint, reply_constrainer

    model = _LocalScripted(replies=[text_call("add", a=1, b=2), cot_reply("3")])
    agent = ToolAgent(model, [add, lookup], max_turns=2, settings=CallSettings(constrain_reply=reply_constrainer("on")))
    assert (await agent.arun("1 + 2?")).answer == "3"
    constraint = model.call_kwargs[0]["constraint"]
    assert isinstance(constraint, ToolTurnConstraint)
    assert constraint.tools == (("add", (("a", "integer"), ("b", "integer"))), ("lookup", (("key", "string"),)))
    grammar = constraint.grammar(96)
    assert '"<tool_call>{\\"name\\": \\"add\\", \\"arguments\\": {"' in grammar and "<thinking>" in grammar
    assert model.call_kwargs[1]["constraint"].name == "reply"  # the final turn: the reply contract only


def test_the_tool_turn_grammar_accepts_calls_the_parser_reads():
    xgr = pytest.importorskip("xgrammar")
    from mas_orchestra.models.constraints import ToolTurnConstraint, tool_signatures

    grammar = ToolTurnConstraint(tools=tuple(tool_signatures([add, lookup]))).grammar(96)
    vocab = ["<eos>", *(chr(c) for c in range(32, 127)), "\n"]
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, stop_token_ids=[0])).compile_grammar(grammar)
    for text, ok in ((text_call("add", a=1, b=-2), True), (text_call("lookup", key="ceo"), True),
                     (text_call("rm", path="/"), False), (text_call("add", a="x", b=1), False),
                     ("<thinking>t</thinking>\n<answer>3</answer>", True)):
        matcher = xgr.GrammarMatcher(compiled)
        assert (matcher.accept_string(text) and matcher.accept_token(0)) is ok, text  # then the stop token
        if ok and "tool_call" in text:
            assert parse_tool_request(text)[0] in ("add", "lookup")
