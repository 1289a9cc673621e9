"""The Orchestra runtime: every outcome status, retries, time-outs, usage accounting, streaming, leaks.

Scripted models only (no server, no real model); latencies are simulated with ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import pytest

from agents.cot import CoTAgent
from mas_orchestra import GraphSpec, OrchestraConfig, RunSettings, SpecError, default_registry, register_agent
from mas_orchestra.models import TransientModelError
from mas_orchestra.registry import AgentRegistry
from mas_orchestra.runtime import Orchestra, Outcome, Status, execute_spec, pricing
from mas_orchestra.spec import spec_from_data
from mas_orchestra.testing import ScriptedChatModel, cot_reply

SPECS = Path(__file__).resolve().parents[1] / "graphs" / "specs"
DIAMOND = (SPECS / "diamond.xml").read_text("utf-8")
# diamond.xml: P1 CoT (1 call), P2 SC (5 samples), FINAL Debate (2 roles x 5 rounds + judge = 11 calls)
DIAMOND_SUBAGENT_CALLS = 1 + 5 + 11


def fan_in_data(width: int = 3, *, kinds: dict[str, str] | None = None) -> dict:
    """``width`` parallel nodes P0..P{width-1} joined by J (a 4-node graph for width 3)."""
    kinds = kinds or {}
    nodes = [{"id": f"P{i}", "agent": kinds.get(f"P{i}", "cot"), "input": f"part {i}"} for i in range(width)]
    refs = " ".join(f"${{P{i}}}" for i in range(width))
    nodes.append({"id": "J", "agent": "cot", "input": f"combine {refs}"})
    return {"nodes": nodes, "edges": [{"source": f"P{i}", "target": "J"} for i in range(width)]}


def fan_in_xml(width: int = 3, *, kinds: dict[str, str] | None = None, registry: AgentRegistry | None = None) -> str:
    return spec_from_data(fan_in_data(width, kinds=kinds), registry=registry).to_xml(registry=registry)


def orchestrator_for(text: str, **kwargs) -> ScriptedChatModel:
    return ScriptedChatModel(replies=[text], model_name="orchestrator-model", **kwargs)


async def wait_until(predicate, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


# -- statuses ------------------------------------------------------------------------------------


async def test_ok_runs_the_orchestrated_diamond():
    sub = ScriptedChatModel(replies=[cot_reply("7")])
    outcome = await Orchestra(orchestrator_for(DIAMOND), sub).arun("What is 3 + 4?")
    assert outcome.status is Status.OK and outcome.ok and outcome.valid
    assert outcome.answer == "7"
    assert outcome.error is None and outcome.failed_node is None
    assert isinstance(outcome.spec, GraphSpec) and [n.id for n in outcome.spec.nodes] == ["P1", "P2", "FINAL"]
    assert set(outcome.finished_nodes) == {"P1", "P2", "FINAL"} == set(outcome.node_results)
    assert outcome.node_results["P2"].agent == "sc" and outcome.node_results["FINAL"].agent == "debate"
    assert outcome.orchestration == DIAMOND
    assert sub.calls == DIAMOND_SUBAGENT_CALLS


async def test_garbage_orchestration_is_invalid_spec_and_runs_nothing():
    sub = ScriptedChatModel()
    outcome = await Orchestra(orchestrator_for("I would simply think hard about it."), sub).arun("q")
    assert outcome.status is Status.INVALID_SPEC and not outcome.valid
    assert outcome.spec is None and outcome.answer is None and outcome.error
    assert outcome.orchestration == "I would simply think hard about it."
    assert sub.calls == 0
    assert outcome.usage.orchestrator_calls == 1 and outcome.usage.subagent_calls == 0


async def test_search_node_without_backend_is_an_unknown_agent_for_the_orchestra():
    # Without a backend WebSearchAgent is not offered, and the parse uses the same filtered registry.
    text = spec_from_data({"nodes": [{"id": "WS_1", "agent": "search"}]}).to_xml()
    outcome = await Orchestra(orchestrator_for(text), ScriptedChatModel()).arun("q")
    assert outcome.status is Status.INVALID_SPEC
    assert "unknown agent" in outcome.error and "WebSearchAgent" in outcome.error


async def test_search_spec_without_backend_is_a_compile_error_in_execute_spec():
    spec = GraphSpec.from_file(SPECS / "search_chain.json")
    sub = ScriptedChatModel()
    outcome = await execute_spec(spec, "Who wrote it?", model=sub, search=None)
    assert outcome.status is Status.COMPILE_ERROR
    assert "search backend" in outcome.error and outcome.spec is spec
    assert not outcome.valid and sub.calls == 0


async def test_a_factory_that_raises_is_a_compile_error():
    registry = default_registry.copy()

    def broken_factory(model, params, ctx):
        raise RuntimeError("no such device")

    register_agent("broken", broken_factory, description="always fails to build", registry=registry)
    text = fan_in_xml(2, kinds={"P1": "broken"}, registry=registry)
    sub = ScriptedChatModel()
    outcome = await Orchestra(orchestrator_for(text), sub, registry=registry).arun("q")
    assert outcome.status is Status.COMPILE_ERROR
    assert "could not build" in outcome.error and "no such device" in outcome.error
    assert outcome.spec is not None and sub.calls == 0


async def test_a_user_agent_kind_in_its_own_registry_runs_ok():
    # Regression: the Outcome re-validated its spec against the default registry (and crashed), and
    # a factory returning a plain async function was rejected by the compiler.
    registry = default_registry.copy()

    def factory(model, params, ctx):
        async def shout(task: str) -> str:
            return task.upper()[-3:]

        return shout

    register_agent("shout", factory, description="upper-cases the task", registry=registry)
    text = fan_in_xml(1, kinds={"P0": "shout"}, registry=registry)
    outcome = await Orchestra(orchestrator_for(text), ScriptedChatModel(), registry=registry).arun("q")
    assert outcome.status is Status.OK, outcome.error
    assert outcome.node_results["P0"].answer == "T 0" and outcome.answer == "42"
    restored = Outcome.model_validate_json(outcome.model_dump_json(), context={"registry": registry})
    assert restored.status is Status.OK and restored.spec == outcome.spec


async def test_non_transient_subagent_error_is_exec_error_naming_the_node_and_not_retried():
    def replies(messages, index):
        if "part 1" in messages[-1].content:
            return ValueError("bad request: unsupported parameter")
        return cot_reply("ok")

    sub = ScriptedChatModel(replies=replies)
    outcome = await Orchestra(orchestrator_for(fan_in_xml(3)), sub,
                              settings=RunSettings(max_retries=5, retry_initial_delay=0.01)).arun("q")
    assert outcome.status is Status.EXEC_ERROR and outcome.valid
    assert outcome.failed_node == "P1"
    assert "ValueError" in outcome.error and "'P1'" in outcome.error
    assert outcome.answer is None and "J" not in outcome.finished_nodes
    prompts_for_p1 = [p for p in sub.prompts if "part 1" in p]
    assert len(prompts_for_p1) == 1  # not retried
    assert outcome.usage.failed_calls == 1


async def test_non_transient_error_is_called_once_and_transient_error_is_retried():
    spec = spec_from_data({"nodes": [{"id": "A", "agent": "cot"}]})
    bad = ScriptedChatModel(replies=[KeyError("missing field")], cycle=True)
    outcome = await execute_spec(spec, "q", model=bad, max_retries=5, retry_initial_delay=0.001)
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node == "A" and bad.calls == 1

    flaky = ScriptedChatModel(replies=[TransientModelError("overloaded"), cot_reply("5")], cycle=False)
    outcome = await execute_spec(spec, "q", model=flaky, max_retries=5, retry_initial_delay=0.001)
    assert outcome.status is Status.OK and outcome.answer == "5" and flaky.calls == 2
    assert outcome.usage.failed_calls == 1 and outcome.usage.llm_calls == 1


async def test_dead_model_gives_up_after_its_retries_in_bounded_time(capsys):
    dead = ScriptedChatModel(replies=[ConnectionError("connection refused")])
    orchestra = Orchestra(orchestrator_for(fan_in_xml(1)), dead,
                          settings=RunSettings(max_retries=2, retry_initial_delay=0.01))
    start = time.perf_counter()
    outcome = await orchestra.arun("q")
    elapsed = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n[runtime] dead model (always ConnectionError, max_retries=2): gave up after {elapsed:.3f} s, "
              f"{dead.calls} calls")
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node == "P0"
    assert "ConnectionError" in outcome.error
    assert dead.calls == 3  # 1 + 2 retries, then the run fails; the join never runs
    assert outcome.usage.failed_calls == 3
    assert elapsed < 5.0


async def test_timeout_reports_finished_nodes_and_cancels_the_slow_calls():
    slow = ScriptedChatModel(delay=30.0, model_name="slow")
    registry = default_registry.copy()
    register_agent(
        "slow", lambda model, params, ctx: CoTAgent(slow, settings=ctx.settings),
        description="a CoT agent on a very slow model", registry=registry,
    )
    fast = ScriptedChatModel(delay=0.05, replies=[cot_reply("1")])
    text = fan_in_xml(3, kinds={"P2": "slow"}, registry=registry)
    # 2 s for calls that take 0.05 s: room for a loaded CI process (0.5 s once left the fast nodes unfinished)
    orchestra = Orchestra(orchestrator_for(text), fast, settings=RunSettings(timeout=2.0), registry=registry)
    start = time.perf_counter()
    outcome = await orchestra.arun("q")
    elapsed = time.perf_counter() - start
    assert outcome.status is Status.TIMEOUT and outcome.valid
    assert elapsed < 2.0 + 1.0
    assert sorted(outcome.finished_nodes) == ["P0", "P1"]
    assert set(outcome.node_results) == {"P0", "P1"}
    assert "finished nodes: P0, P1" in outcome.error or "finished nodes: P1, P0" in outcome.error
    assert outcome.answer is None
    assert slow.calls == 1
    assert await wait_until(lambda: slow.in_flight == 0, timeout=1.0), "the slow call was not cancelled"
    assert fast.in_flight == 0


async def test_call_timeout_bounds_one_subagent_call():
    spec = spec_from_data({"nodes": [{"id": "A", "agent": "cot"}]})
    slow = ScriptedChatModel(delay=30.0)
    start = time.perf_counter()
    outcome = await execute_spec(spec, "q", model=slow, call_timeout=0.1, max_retries=0)
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node == "A"
    assert "TimeoutError" in outcome.error
    assert time.perf_counter() - start < 3.0
    assert await wait_until(lambda: slow.in_flight == 0, timeout=1.0)


async def test_orchestrator_failure_is_exec_error():
    orchestrator = ScriptedChatModel(replies=[ValueError("invalid api key")])
    sub = ScriptedChatModel()
    outcome = await Orchestra(orchestrator, sub,
                              settings=RunSettings(max_retries=3, retry_initial_delay=0.001)).arun("q")
    assert outcome.status is Status.EXEC_ERROR
    assert outcome.error.startswith("orchestrator failed") and "invalid api key" in outcome.error
    assert outcome.spec is None and sub.calls == 0 and orchestrator.calls == 1


async def test_transient_orchestrator_failure_is_retried():
    orchestrator = ScriptedChatModel(replies=[ConnectionError("reset"), DIAMOND], cycle=False)
    outcome = await Orchestra(orchestrator, ScriptedChatModel(),
                              settings=RunSettings(max_retries=2, retry_initial_delay=0.001)).arun("q")
    assert outcome.status is Status.OK and orchestrator.calls == 2


# -- usage and cost ------------------------------------------------------------------------------


@pytest.fixture
def test_prices():
    names = {"test-orchestrator-model": (1.0, 2.0), "test-subagent-model": (3.0, 4.0)}
    for name, (inp, out) in names.items():
        pricing.register_price(name, inp, out)
    yield names
    for name in names:
        pricing._prices.pop(name, None)


async def test_usage_totals_are_the_sum_of_what_the_models_reported(test_prices):
    orchestrator = ScriptedChatModel(replies=[DIAMOND], input_tokens=100, output_tokens=40,
                                     model_name="test-orchestrator-model")
    sub = ScriptedChatModel(replies=[cot_reply("7")], input_tokens=10, output_tokens=3,
                            model_name="test-subagent-model")
    outcome = await Orchestra(orchestrator, sub).arun("q")
    assert outcome.ok
    usage = outcome.usage
    n = DIAMOND_SUBAGENT_CALLS
    assert sub.calls == n and orchestrator.calls == 1
    assert (usage.llm_calls, usage.orchestrator_calls, usage.subagent_calls, usage.failed_calls) == (1 + n, 1, n, 0)
    assert usage.input_tokens == 100 + 10 * n
    assert usage.output_tokens == 40 + 3 * n
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert set(usage.by_model) == {"test-orchestrator-model", "test-subagent-model"}
    orch_u, sub_u = usage.by_model["test-orchestrator-model"], usage.by_model["test-subagent-model"]
    assert (orch_u.calls, orch_u.input_tokens, orch_u.output_tokens) == (1, 100, 40)
    assert (sub_u.calls, sub_u.input_tokens, sub_u.output_tokens) == (n, 10 * n, 3 * n)
    expected_cost = (100 * 1.0 + 40 * 2.0 + 10 * n * 3.0 + 3 * n * 4.0) / 1e6
    assert usage.cost_usd == pytest.approx(expected_cost)
    assert usage.unpriced_models == []
    assert usage.wall_s > 0
    # the per-node records agree with the callback totals
    per_node = [r.usage for r in outcome.node_results.values()]
    assert sum(u.calls for u in per_node) == n
    assert sum(u.input_tokens for u in per_node) == 10 * n


async def test_usage_of_an_unpriced_model_is_listed():
    outcome = await Orchestra(orchestrator_for(fan_in_xml(1)),
                              ScriptedChatModel(model_name="never-priced-model")).arun("q")
    assert outcome.ok and "never-priced-model" in outcome.usage.unpriced_models


# -- retries under transient failures ------------------------------------------------------------


class FaultInjector:
    """Replies that raise ``ConnectionError`` on a seeded random 30 % of calls.

    Each distinct prompt has its own seeded stream, so which attempt fails does not depend on how
    the concurrent calls happen to be scheduled: the test is deterministic.
    """

    def __init__(self, rate: float, seed: int) -> None:
        self.rate, self.seed = rate, seed
        self.faults = 0
        self.calls = 0
        self._streams: dict[str, random.Random] = {}
        self._lock = threading.Lock()

    def __call__(self, messages, index):
        prompt = "\n".join(str(m.content) for m in messages)
        with self._lock:
            self.calls += 1
            rng = self._streams.setdefault(prompt, random.Random(f"{self.seed}:{prompt}"))
            if rng.random() < self.rate:
                self.faults += 1
                return ConnectionError(f"injected fault #{self.faults}")
        return cot_reply("42")


async def test_all_runs_succeed_under_30_percent_transient_failures(capsys):
    injector = FaultInjector(0.3, seed=20240601)
    sub = ScriptedChatModel(replies=injector)
    orchestra = Orchestra(orchestrator_for(fan_in_xml(3)), sub,
                          settings=RunSettings(max_retries=5, retry_initial_delay=0.001))
    outcomes = [await orchestra.arun(f"question {i}") for i in range(50)]
    not_ok = [o for o in outcomes if not o.ok]
    lost = sum(4 - len(o.node_results) for o in outcomes)
    failed_calls = sum(o.usage.failed_calls for o in outcomes)
    with capsys.disabled():
        print(f"\n[runtime] 30% transient faults: {injector.faults} faults injected and retried over "
              f"{injector.calls} calls; runs ok {len(outcomes) - len(not_ok)}/50; results lost {lost}")
    assert not not_ok, [o.error for o in not_ok]
    assert lost == 0
    assert all(o.answer == "42" for o in outcomes)
    assert injector.faults > 0.15 * injector.calls  # faults really were injected (≈ 30 %)
    assert injector.calls == 50 * 4 + injector.faults  # every fault was followed by exactly one retry
    assert failed_calls == injector.faults
    assert sum(o.usage.subagent_calls for o in outcomes) == 50 * 4


# -- streaming, plan, arguments ------------------------------------------------------------------


async def test_astream_event_order():
    orchestra = Orchestra(orchestrator_for(fan_in_xml(3)), ScriptedChatModel(delay=0.01))
    events = [event async for event in orchestra.astream("q")]
    types = [e["type"] for e in events]
    assert types[0] == "orchestration" and types[1] == "spec" and types[-1] == "outcome"
    assert types.count("outcome") == 1
    assert isinstance(events[1]["spec"], GraphSpec)
    starts = [e["node"] for e in events if e["type"] == "node_start"]
    ends = [e["node"] for e in events if e["type"] == "node_end"]
    assert sorted(starts) == sorted(ends) == ["J", "P0", "P1", "P2"]
    position = {(e["type"], e.get("node")): i for i, e in enumerate(events)}
    for node in ("P0", "P1", "P2", "J"):
        assert position[("node_start", node)] < position[("node_end", node)]
    for node in ("P0", "P1", "P2"):  # the join starts only after every branch ended
        assert position[("node_end", node)] < position[("node_start", "J")]
    outcome = events[-1]["outcome"]
    assert isinstance(outcome, Outcome) and outcome.ok
    assert [e["answer"] for e in events if e["type"] == "node_end" and e["node"] == "J"] == ["42"]


async def test_astream_of_an_invalid_spec_ends_with_the_outcome():
    events = [e async for e in Orchestra(orchestrator_for("nothing"), ScriptedChatModel()).astream("q")]
    assert [e["type"] for e in events] == ["orchestration", "outcome"]
    assert events[-1]["outcome"].status is Status.INVALID_SPEC


def test_plan_returns_the_spec():
    spec = Orchestra(orchestrator_for(DIAMOND), ScriptedChatModel()).plan("q")
    assert isinstance(spec, GraphSpec) and spec.sink == "FINAL"
    with pytest.raises(SpecError):
        Orchestra(orchestrator_for("no agents here"), ScriptedChatModel()).plan("q")


def test_sync_run():
    outcome = Orchestra(orchestrator_for(fan_in_xml(2)), ScriptedChatModel()).run("q")
    assert outcome.ok and outcome.answer == "42"


async def test_wrong_argument_types():
    orchestra = Orchestra(orchestrator_for(DIAMOND), ScriptedChatModel())
    with pytest.raises(TypeError, match="question must be a str"):
        await orchestra.arun(42)
    with pytest.raises(TypeError):
        await orchestra.astream(None).__anext__()
    with pytest.raises(TypeError):
        await orchestra.aplan(b"bytes")
    model = ScriptedChatModel()
    for kwargs in ({"timeout": -1}, {"timeout": 0}, {"call_timeout": -0.5}, {"timeout": "10"},
                   {"max_retries": -1}, {"max_retries": 1.5}, {"max_concurrency": 0}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            RunSettings(**kwargs)
    with pytest.raises(ValueError, match="dom"):
        OrchestraConfig(dom="medium")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="OrchestraConfig"):
        Orchestra(model, model, config={"dom": "low"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RunSettings"):
        Orchestra(model, model, settings={"timeout": 10})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Orchestra(model, model, "low")  # type: ignore[misc]  # the DoM is config=OrchestraConfig(dom="low")
    with pytest.raises(TypeError):
        Orchestra(object(), model)


async def test_sync_api_inside_a_running_loop_raises_with_a_hint():
    orchestra = Orchestra(orchestrator_for(DIAMOND), ScriptedChatModel())
    with pytest.raises(RuntimeError, match="arun"):
        orchestra.run("q")
    with pytest.raises(RuntimeError, match="running event loop"):
        orchestra.plan("q")


# -- concurrency ---------------------------------------------------------------------------------


async def test_parallel_branches_take_about_two_latencies(capsys):
    latency = 0.2
    sub = ScriptedChatModel(delay=latency)
    outcome = await Orchestra(orchestrator_for(fan_in_xml(3)), sub).arun("q")
    assert outcome.ok and sub.calls == 4 and sub.peak_in_flight == 3
    critical_path = 2 * latency  # one branch, then the join
    ratio = outcome.usage.wall_s / critical_path
    with capsys.disabled():
        print(f"\n[runtime] 3 parallel + join, latency {latency} s: wall {outcome.usage.wall_s:.3f} s, "
              f"wall/critical-path = {ratio:.2f} (sequential would be 2.0)")
    assert ratio < 1.5


async def test_max_concurrency_bounds_calls_in_flight():
    sub = ScriptedChatModel(delay=0.01)
    outcome = await Orchestra(orchestrator_for(DIAMOND), sub, settings=RunSettings(max_concurrency=2)).arun("q")
    assert outcome.ok and sub.calls == DIAMOND_SUBAGENT_CALLS
    assert sub.peak_in_flight <= 2


# -- leaks ---------------------------------------------------------------------------------------


@pytest.mark.slow  # ≈ 9 s on an idle machine (1,000 full runs); still part of the default run
def test_a_thousand_runs_leave_no_threads_or_tasks_behind(capsys):
    orchestrator = orchestrator_for(spec_from_data({
        "nodes": [{"id": "A", "agent": "cot"}, {"id": "B", "agent": "cot", "input": "check ${A}"}],
        "edges": [{"source": "A", "target": "B"}],
    }).to_xml())
    sub = ScriptedChatModel()
    orchestra = Orchestra(orchestrator, sub)
    runs = 1000

    async def main() -> tuple[int, int, int, int, int]:
        for _ in range(5):  # warm up lazily created executors and caches
            assert (await orchestra.arun("warm-up")).ok
        await asyncio.sleep(0)
        base_tasks, base_threads = len(asyncio.all_tasks()), threading.active_count()
        ok = 0
        for i in range(runs):
            ok += (await orchestra.arun(f"q{i}")).ok
        await asyncio.sleep(0.05)
        return ok, base_tasks, len(asyncio.all_tasks()), base_threads, threading.active_count()

    threads_before = threading.active_count()
    start = time.perf_counter()
    ok, base_tasks, tasks_after, base_threads, threads_after = asyncio.run(main())
    elapsed = time.perf_counter() - start
    threads_end = threading.active_count()
    with capsys.disabled():
        print(f"\n[runtime] {runs} runs in {elapsed:.1f} s: ok {ok}; tasks {base_tasks} -> {tasks_after}; "
              f"threads {base_threads} -> {threads_after} (after the loop closed: {threads_before} -> {threads_end})")
    assert ok == runs
    assert sub.in_flight == 0 and sub.calls == 2 * (runs + 5)
    assert tasks_after <= base_tasks
    assert threads_after <= base_threads + 2
    assert threads_end <= threads_before + 2


def test_usage_tokens_match_langchains_and_replies_naming_no_model_count_too():
    from uuid import uuid4

    from langchain_core.callbacks import UsageMetadataCallbackHandler
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    from agents.base import FORMAT_RETRY_TAG
    from mas_orchestra.runtime.usage import ORCHESTRATOR_TAG, UsageCallback

    def reply(model: str | None, inp: int, out: int) -> LLMResult:
        message = AIMessage(content="x", usage_metadata={"input_tokens": inp, "output_tokens": out,
                                                         "total_tokens": inp + out},
                            response_metadata={"model_name": model} if model else {})
        return LLMResult(generations=[[ChatGeneration(message=message)]])

    ours, theirs = UsageCallback(), UsageMetadataCallbackHandler()
    for result, tags in ((reply("orch", 100, 40), [ORCHESTRATOR_TAG]), (reply("sub", 10, 3), []),
                         (reply("sub", 10, 3), [FORMAT_RETRY_TAG]), (reply(None, 7, 7), [])):
        ours.on_llm_end(result, run_id=uuid4(), tags=tags)
        theirs.on_llm_end(result, run_id=uuid4(), tags=tags)
    ours.on_llm_error(RuntimeError("down"), run_id=uuid4())
    usage = ours.snapshot(1.0)
    # replies that name their model: langchain-core's counts exactly; the handler drops the nameless reply,
    # we file its tokens under "unknown"
    assert {k: v for k, v in ours.usage_metadata.items() if k != "unknown"} == theirs.usage_metadata
    assert "unknown" not in theirs.usage_metadata and ours.usage_metadata["unknown"]["total_tokens"] == 14
    assert (usage.llm_calls, usage.orchestrator_calls, usage.subagent_calls) == (4, 1, 3)
    assert (usage.format_retries, usage.failed_calls) == (1, 1)
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (127, 53, 180)
    assert {name: (m.calls, m.input_tokens) for name, m in usage.by_model.items()} == {
        "orch": (1, 100), "sub": (2, 20), "unknown": (1, 7)}


# -- usage of models that name no model, and spec warnings -----------------------------------------


def _nameless_model(replies: list[str]):
    """A user-written chat model: every reply carries ``usage_metadata`` but no ``model_name``."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class NamelessUsageModel(BaseChatModel):
        script: list[str]

        @property
        def _llm_type(self) -> str:
            return "nameless-test"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            text = self.script[0] if len(self.script) == 1 else self.script.pop(0)
            usage = {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, usage_metadata=usage))])

    return NamelessUsageModel(script=list(replies))


async def test_tokens_of_replies_without_a_model_name_are_counted():
    outcome = await Orchestra(_nameless_model([DIAMOND]), _nameless_model([cot_reply("7")]),
                              config=OrchestraConfig(constrained=False)).arun("q")
    assert outcome.ok
    calls = 1 + DIAMOND_SUBAGENT_CALLS
    usage = outcome.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (11 * calls, 5 * calls, 16 * calls)
    assert set(usage.by_model) == {"unknown"}
    unknown = usage.by_model["unknown"]
    assert (unknown.calls, unknown.input_tokens, unknown.output_tokens) == (calls, 11 * calls, 5 * calls)


LOW_WITH_COMMENTARY = (
    "<thinking>Delegate it.</thinking><agent><agent_name>CoTAgent</agent_name><required_arguments>"
    "<agent_input>\"\"</agent_input></required_arguments><agent_output_id>c</agent_output_id></agent>"
    "<answer>c</answer>\nExplanation: one solver.\n<agent><agent_name>SCAgent</agent_name></agent><answer>9</answer>"
)


async def test_outcome_counts_spec_warnings_and_strict_refuses_them():
    orchestra = Orchestra(ScriptedChatModel(replies=[LOW_WITH_COMMENTARY]),
                          ScriptedChatModel(replies=[cot_reply("7")]),
                          config=OrchestraConfig(dom="low", constrained=False))
    outcome = await orchestra.arun("q")
    assert outcome.ok and outcome.answer == "7"
    assert outcome.spec_warnings == {"quoted_empty_input": 1, "ignored_after_plan": 1}
    assert Outcome.model_validate_json(outcome.model_dump_json()).spec_warnings == outcome.spec_warnings
    strict = Orchestra(ScriptedChatModel(replies=[LOW_WITH_COMMENTARY]), ScriptedChatModel(replies=[cot_reply("7")]),
                       config=OrchestraConfig(dom="low", constrained=False, strict=True))
    refused = await strict.arun("q")
    assert refused.status is Status.INVALID_SPEC and refused.spec_warnings == {}
    assert "[ignored_after_plan]" in refused.error and "[quoted_empty_input]" in refused.error
