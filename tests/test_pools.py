"""Sub-agent model pools: a ``model`` parameter on every kind (prompt, grammar, schema, validator), nodes run on
the model they name, usage and cost per model, per-kind defaults, the CLI and the training reward's price."""

from __future__ import annotations

import asyncio
import json

import pytest

from mas_orchestra import OrchestraConfig, RunSettings
from mas_orchestra.errors import SpecError
from mas_orchestra.offers import PoolError, subagent_from_args, with_pool
from mas_orchestra.prompts import orchestrator_prompt
from mas_orchestra.registry import default_registry
from mas_orchestra.runtime import Orchestra, Status
from mas_orchestra.runtime.pricing import register_price
from mas_orchestra.spec import spec_from_data
from mas_orchestra.spec.grammar import orchestration_grammar, orchestration_json_schema
from mas_orchestra.testing import ScriptedChatModel, cot_reply

REGISTRY = default_registry.without_search()


def two_nodes(first: str | None, second: str | None, agent: str = "cot") -> str:
    params = [{} if m is None else {"model": m} for m in (first, second)]
    return spec_from_data({
        "nodes": [{"id": "A", "agent": agent, "input": "part", "params": params[0]},
                  {"id": "B", "agent": "cot", "input": "combine ${A}", "params": params[1]}],
        "edges": [{"source": "A", "target": "B"}],
    }, registry=with_pool(REGISTRY, {"fast": "x", "strong": "y"})).to_xml()


def pool() -> dict[str, ScriptedChatModel]:
    return {"fast": ScriptedChatModel(replies=[cot_reply("1")], model_name="pool-fast"),
            "strong": ScriptedChatModel(replies=[cot_reply("2")], model_name="pool-strong")}


def test_a_pool_adds_a_literal_model_parameter_everywhere():
    registry = with_pool(REGISTRY, {"fast": "a", "strong": "b"})
    prompt = orchestrator_prompt("q", registry=registry)
    assert prompt.count("<model>: Which sub-agent model runs it: fast, strong (default \"fast\")") == len(REGISTRY.kinds())
    assert '<model>" ("fast" | "strong")' in orchestration_grammar("high", registry)
    schema = json.dumps(orchestration_json_schema("high", registry))
    assert '"model": {"enum": ["fast", "strong"], "type": "string"}' in schema
    with pytest.raises(SpecError, match=r"parameter 'model' \(<model>\): Input should be 'fast' or 'strong'"):
        spec_from_data({"nodes": [{"id": "A", "agent": "cot", "input": "", "params": {"model": "huge"}}]},
                       registry=registry)
    assert with_pool(REGISTRY, {"only": "a"}) is REGISTRY  # one model: nothing to choose


def test_each_node_runs_on_the_model_it_names_and_usage_is_per_model():
    register_price("pool-fast", 1.0, 2.0)
    register_price("pool-strong", 10.0, 20.0)
    models = pool()
    orchestrator = ScriptedChatModel(replies=[two_nodes("strong", None)], model_name="orch")
    outcome = Orchestra(orchestrator, models).run("q")
    assert outcome.status is Status.OK and outcome.answer == "1"  # B took the default, fast
    assert models["strong"].calls == 1 and models["fast"].calls == 1
    by_model = outcome.usage.by_model
    assert by_model["pool-strong"].calls == 1 and by_model["pool-fast"].calls == 1
    expected = sum(m.input_tokens * p[0] / 1e6 + m.output_tokens * p[1] / 1e6
                   for m, p in ((by_model["pool-fast"], (1, 2)), (by_model["pool-strong"], (10, 20))))
    assert outcome.usage.cost_usd == pytest.approx(expected) and outcome.usage.cost_usd > 0


def test_per_kind_defaults_are_the_original_sampler_map():
    models = pool()
    orchestrator = ScriptedChatModel(replies=[two_nodes(None, None, agent="reflexion")])
    orchestra = Orchestra(orchestrator, models, config=OrchestraConfig(subagent_defaults={"Reflexion": "strong"}))
    assert orchestra.registry.get("reflexion").params.model_fields["model"].default == "strong"
    assert orchestra.registry.get("cot").params.model_fields["model"].default == "fast"
    outcome = orchestra.run("q")
    assert outcome.status is Status.OK and models["strong"].calls >= 1


def test_pool_errors_name_the_valid_names():
    with pytest.raises(PoolError, match="no such pool model; valid: fast, strong"):
        Orchestra(ScriptedChatModel(), pool(), config=OrchestraConfig(subagent_defaults={"cot": "medium"}))
    with pytest.raises(PoolError, match="unknown agent kind 'juggler'"):
        Orchestra(ScriptedChatModel(), pool(), config=OrchestraConfig(subagent_defaults={"juggler": "fast"}))
    with pytest.raises(PoolError, match="needs a pool"):
        Orchestra(ScriptedChatModel(), ScriptedChatModel(), config=OrchestraConfig(subagent_defaults={"cot": "fast"}))
    with pytest.raises(PoolError, match="empty"):
        Orchestra(ScriptedChatModel(), {})
    with pytest.raises(PoolError, match="pool name 'two words'"):
        Orchestra(ScriptedChatModel(), {"two words": ScriptedChatModel()})
    outcome = Orchestra(ScriptedChatModel(replies=[two_nodes("fast", None).replace(">fast<", ">medium<")]),
                        pool()).run("q")
    assert outcome.status is Status.INVALID_SPEC and "Input should be 'fast' or 'strong'" in outcome.error


def test_subagent_arguments():
    assert subagent_from_args(None) == "embedded"
    assert subagent_from_args(["openai:gpt-4o-mini"]) == "openai:gpt-4o-mini"
    assert subagent_from_args(["vllm:m@http://h:8000/v1?a=b"]) == "vllm:m@http://h:8000/v1?a=b"
    assert subagent_from_args(["fast=scripted:1", "strong=openai:gpt-4o"]) == {"fast": "scripted:1",
                                                                                "strong": "openai:gpt-4o"}
    with pytest.raises(PoolError, match="give one model, or a pool"):
        subagent_from_args(["fast=scripted:1", "openai:gpt-4o"])
    with pytest.raises(PoolError, match="given twice"):
        subagent_from_args(["a=scripted:1", "a=scripted:2"])


def test_cli_run_with_a_pool(capsys):
    from mas_orchestra.cli import main

    code = main(["run", "q", "--orchestrator", "python:tests.served_models:one_agent_orchestrator",
                 "--subagent", "fast=scripted:7", "--subagent", "strong=scripted:9", "--subagent-default", "cot=strong"])
    out = capsys.readouterr().out
    assert code == 0 and "answer: 9" in out
    code = main(["run", "q", "--orchestrator", "scripted:1", "--subagent", "fast=scripted:7",
                 "--subagent-default", "cot=strong"])
    assert code == 2 and "no such pool model; valid: fast" in capsys.readouterr().err


def test_the_training_reward_charges_each_pool_models_price():
    from training.rewards import OutcomeReward

    register_price("pool-fast", 1.0, 1.0)
    register_price("pool-strong", 1000.0, 1000.0)
    registry = with_pool(REGISTRY, pool())
    reward = OutcomeReward(subagent=ScriptedChatModel(), registry=registry, grader="exact", cost_metric="cost_usd",
                           cost_weight=10.0, settings=RunSettings(timeout=30))
    cheap, dear = two_nodes("fast", "fast"), two_nodes("strong", "strong")
    # TRL calls the reward with prompts, completions and the dataset's answers; both answers are correct.
    scores = asyncio.run(reward(["q", "q"], [cheap, dear], answer=["1", "2"], question=["q", "q"]))
    assert scores[0] > scores[1]  # both correct; the strong model's price is charged
    costs = [r.cost_usd for r in reward.last_batch["records"]]
    assert costs[1] > 100 * costs[0] > 0
