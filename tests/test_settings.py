"""One frozen RunSettings: validated once, passed whole, and honoured by every entry point.

The sub-agent below takes 30 s per call; a ``call_timeout`` of 0.1 s must end its run within seconds, through
Orchestra (keywords and ``settings=``), execute_spec, the served graph's ``configurable``, the eval runner
(orchestrated and baseline) and the training reward.
"""

from __future__ import annotations

import json
import time

import pytest
from pydantic import ValidationError

from graphs.end_to_end import build_graph, orchestra_from_config
from mas_orchestra import RunSettings
from mas_orchestra.bench.evaluation import EvalInputError, aevaluate
from mas_orchestra.errors import NodeExecutionError
from mas_orchestra.runtime import Orchestra, Status, execute_spec
from mas_orchestra.spec import spec_from_data
from tests.served_models import ONE_AGENT, one_agent_orchestrator, slow_subagent
from training.rewards import make_outcome_reward

FAST = 10.0  # seconds: far below the sub-agent's 30 s, far above a 0.1 s call time-out plus overhead


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", 0), ("timeout", -1), ("timeout", "10"), ("call_timeout", -0.5), ("max_retries", -1),
     ("max_retries", 1.5), ("max_retries", True), ("retry_initial_delay", -0.1), ("max_concurrency", 0)],
)
def test_an_invalid_value_names_its_field(field, value):
    with pytest.raises(ValidationError, match=field):
        RunSettings(**{field: value})
    with pytest.raises(ValueError, match=field):  # the same check behind the keyword arguments
        Orchestra(one_agent_orchestrator(), slow_subagent(), **{field: value})


def test_settings_are_frozen_and_reject_unknown_fields():
    settings = RunSettings(timeout=5)
    with pytest.raises(ValidationError):
        settings.timeout = 1  # type: ignore[misc]
    with pytest.raises(ValidationError, match="retries"):
        RunSettings(retries=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="RunSettings"):
        RunSettings.of({"timeout": 5})  # type: ignore[arg-type]


def test_keywords_override_the_settings_they_name():
    base = RunSettings(timeout=60, max_retries=1, max_concurrency=4)
    orchestra = Orchestra(one_agent_orchestrator(), slow_subagent(), settings=base, max_retries=0)
    assert orchestra.settings == RunSettings(timeout=60, max_retries=0, max_concurrency=4)
    assert Orchestra(one_agent_orchestrator(), slow_subagent(), settings=base).settings is base
    assert Orchestra(one_agent_orchestrator(), slow_subagent()).settings == RunSettings()


@pytest.mark.parametrize("how", ["keywords", "settings"])
async def test_orchestra_honours_call_timeout(how):
    options = {"call_timeout": 0.1, "max_retries": 0}
    kwargs = options if how == "keywords" else {"settings": RunSettings(**options)}
    started = time.perf_counter()
    outcome = await Orchestra(one_agent_orchestrator(), slow_subagent(), **kwargs).arun("q")
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node == "A"
    assert "TimeoutError" in outcome.error and time.perf_counter() - started < FAST


async def test_execute_spec_honours_the_settings_object():
    spec = spec_from_data({"nodes": [{"id": "A", "agent": "cot"}]})
    started = time.perf_counter()
    outcome = await execute_spec(spec, "q", model=slow_subagent(), settings=RunSettings(timeout=0.2))
    assert outcome.status is Status.TIMEOUT and time.perf_counter() - started < FAST


async def test_the_served_graph_reads_the_settings_from_configurable(monkeypatch):
    monkeypatch.setenv("MAS_ORCHESTRATOR", "python:tests.served_models:one_agent_orchestrator")
    monkeypatch.setenv("MAS_SUBAGENT", "python:tests.served_models:slow_subagent")
    numbers = {"call_timeout": "0.1", "max_retries": 0, "retry_initial_delay": 0.5, "max_concurrency": 3}
    config = {"configurable": {**numbers, "thread_id": "t"}}
    assert orchestra_from_config(config).settings == RunSettings(
        call_timeout=0.1, max_retries=0, retry_initial_delay=0.5, max_concurrency=3
    )
    started = time.perf_counter()
    with pytest.raises(NodeExecutionError, match="TimeoutError"):
        await build_graph().ainvoke({"question": "q"}, config)
    assert time.perf_counter() - started < FAST
    with pytest.raises(ValueError, match="max_retries"):
        orchestra_from_config({"configurable": {"max_retries": -2}})


@pytest.mark.parametrize("baseline", [None, "cot"])
async def test_the_eval_runner_honours_call_timeout(tmp_path, baseline):
    rows = [{"id": "1", "question": "q", "answer": "4"}]
    started = time.perf_counter()
    summary = await aevaluate(
        rows, orchestrator=one_agent_orchestrator(), subagent=slow_subagent(), baseline=baseline, grader="exact",
        out_dir=tmp_path, call_timeout=0.1, max_retries=0, progress=False, plot=False,
    )
    line = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert summary["status_counts"]["exec_error"] == 1 and "TimeoutError" in line["error"]
    assert time.perf_counter() - started < FAST
    with pytest.raises(EvalInputError, match="call_timeout"):
        await aevaluate(rows, subagent=slow_subagent(), baseline="cot", grader="exact", out_dir=tmp_path / "x",
                        call_timeout=-1)


async def test_the_outcome_reward_honours_call_timeout():
    reward = make_outcome_reward(subagent=slow_subagent(), call_timeout=0.1, max_retries=0, grader="exact")
    assert reward.settings == RunSettings(timeout=120.0, call_timeout=0.1, max_retries=0, max_concurrency=32)
    started = time.perf_counter()
    scores = await reward(prompts=["q"], completions=[ONE_AGENT], answer=["4"])
    assert scores == [0.0] and reward.last_batch["records"][0].status == "exec_error"
    assert "TimeoutError" in reward.last_batch["records"][0].error and time.perf_counter() - started < FAST
