"""One frozen RunSettings: validated once, passed whole, and honoured by every entry point.

The sub-agent below takes 30 s per call; a ``call_timeout`` of 0.1 s must end its run within seconds, through
Orchestra (``settings=``), execute_spec (keywords and ``settings=``), the served graph's context, the eval runner
(orchestrated and baseline) and the training reward. Shared defaults (the grading timeout) live in one field.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time

import pytest
from pydantic import ValidationError

from graphs.end_to_end import ServedContext, build_graph, orchestra_from_context
from mas_orchestra import RunSettings
from mas_orchestra.bench.evaluation import EvalInputError, aevaluate
from mas_orchestra.errors import NodeExecutionError
from mas_orchestra.runtime import Orchestra, Status, execute_spec
from mas_orchestra.spec import spec_from_data
from tests.served_models import ONE_AGENT, one_agent_orchestrator, slow_subagent
from training.rewards import REWARD_SETTINGS, make_outcome_reward

FAST = 10.0  # seconds: far below the sub-agent's 30 s, far above a 0.1 s call time-out plus overhead


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", 0), ("timeout", -1), ("timeout", "10"), ("call_timeout", -0.5), ("max_retries", -1),
     ("max_retries", 1.5), ("max_retries", True), ("retry_initial_delay", -0.1), ("max_concurrency", 0)],
)
def test_an_invalid_value_names_its_field(field, value):
    with pytest.raises(ValidationError, match=field):
        RunSettings(**{field: value})
    with pytest.raises(ValueError, match=field):  # the same check behind execute_spec's keyword arguments
        RunSettings.of(None, **{field: value})


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
    assert RunSettings.of(base, max_retries=0) == RunSettings(timeout=60, max_retries=0, max_concurrency=4)
    assert Orchestra(one_agent_orchestrator(), slow_subagent(), settings=base).settings is base
    assert Orchestra(one_agent_orchestrator(), slow_subagent()).settings == RunSettings()
    with pytest.raises(TypeError):  # the loose keywords are gone: settings are passed whole
        Orchestra(one_agent_orchestrator(), slow_subagent(), max_retries=0)  # type: ignore[call-arg]


async def test_orchestra_honours_call_timeout():
    settings = RunSettings(call_timeout=0.1, max_retries=0)
    started = time.perf_counter()
    outcome = await Orchestra(one_agent_orchestrator(), slow_subagent(), settings=settings).arun("q")
    assert outcome.status is Status.EXEC_ERROR and outcome.failed_node == "A"
    assert "TimeoutError" in outcome.error and time.perf_counter() - started < FAST


async def test_execute_spec_honours_the_settings_object():
    spec = spec_from_data({"nodes": [{"id": "A", "agent": "cot"}]})
    started = time.perf_counter()
    outcome = await execute_spec(spec, "q", model=slow_subagent(), settings=RunSettings(timeout=0.2))
    assert outcome.status is Status.TIMEOUT and time.perf_counter() - started < FAST


async def test_the_served_graph_reads_the_settings_from_its_context(monkeypatch):
    monkeypatch.setenv("MAS_ORCHESTRATOR", "python:tests.served_models:one_agent_orchestrator")
    monkeypatch.setenv("MAS_SUBAGENT", "python:tests.served_models:slow_subagent")
    numbers = {"call_timeout": 0.1, "max_retries": 0, "retry_initial_delay": 0.5, "max_concurrency": 3}
    context = {"settings": numbers}
    assert orchestra_from_context(ServedContext.model_validate(context)).settings == RunSettings(**numbers)
    started = time.perf_counter()
    with pytest.raises(NodeExecutionError, match="TimeoutError"):
        await build_graph().ainvoke({"question": "q"}, {"configurable": {"thread_id": "t"}}, context=context)
    assert time.perf_counter() - started < FAST
    with pytest.raises(ValidationError, match="max_retries"):
        await build_graph().ainvoke({"question": "q"}, context={"settings": {"max_retries": -2}})
    with pytest.raises(ValidationError, match="call_timeout"):  # a JSON number, not a form's string
        await build_graph().ainvoke({"question": "q"}, context={"settings": {"call_timeout": "0.1"}})


@pytest.mark.parametrize("baseline", [None, "cot"])
async def test_the_eval_runner_honours_call_timeout(tmp_path, baseline):
    rows = [{"id": "1", "question": "q", "answer": "4"}]
    started = time.perf_counter()
    summary = await aevaluate(
        rows, orchestrator=one_agent_orchestrator(), subagent=slow_subagent(), baseline=baseline, grader="exact",
        out_dir=tmp_path, settings=RunSettings(call_timeout=0.1, max_retries=0), progress=False, plot=False,
    )
    line = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert summary["status_counts"]["exec_error"] == 1 and "TimeoutError" in line["error"]
    assert time.perf_counter() - started < FAST
    with pytest.raises(EvalInputError, match="RunSettings"):
        await aevaluate(rows, subagent=slow_subagent(), baseline="cot", grader="exact", out_dir=tmp_path / "x",
                        settings={"call_timeout": 0.1})  # type: ignore[arg-type]


async def test_the_outcome_reward_honours_call_timeout():
    assert make_outcome_reward(subagent=slow_subagent()).settings == REWARD_SETTINGS == RunSettings(timeout=120.0)
    settings = RunSettings(timeout=120.0, call_timeout=0.1, max_retries=0)
    reward = make_outcome_reward(subagent=slow_subagent(), settings=settings, grader="exact")
    assert reward.settings is settings
    started = time.perf_counter()
    scores = await reward(prompts=["q"], completions=[ONE_AGENT], answer=["4"])
    assert scores == [0.0] and reward.last_batch["records"][0].status == "exec_error"
    assert "TimeoutError" in reward.last_batch["records"][0].error and time.perf_counter() - started < FAST


def test_the_grading_timeout_has_one_default_for_eval_training_and_grading():
    from mas_orchestra.bench.evaluation.runner import aevaluate as runner_aevaluate
    from mas_orchestra.bench.grading import agrade, default_grade_timeout, grade, score
    from mas_orchestra.runtime.cli import add_settings_flags, settings_from_args
    from training.config import OrchestraGRPOConfig

    default = RunSettings.model_fields["grade_timeout"].default
    assert default == 10.0 and RunSettings().grade_timeout == default
    for fn in (agrade, grade, score):  # the grading functions take RunSettings' default, not a number of their own
        assert inspect.signature(fn).parameters["timeout"].default is None
    assert default_grade_timeout() == default
    assert "grade_timeout" not in inspect.signature(runner_aevaluate).parameters  # it comes with settings
    assert REWARD_SETTINGS.grade_timeout == default
    assert OrchestraGRPOConfig().run_settings().grade_timeout == default
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, grade_timeout=True)
    assert settings_from_args(parser.parse_args([])) == RunSettings()  # the CLI repeats no default
    assert settings_from_args(parser.parse_args(["--grade-timeout", "3"])).grade_timeout == 3.0
