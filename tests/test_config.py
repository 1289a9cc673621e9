"""OrchestraConfig: one frozen object of how the orchestrator plans, taken whole by every entry point.

It round-trips as data, names the field of any bad input, builds an Orchestra that behaves as the keywords did,
reaches the served graph through its LangGraph context, and the training config builds it for every recipe.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import ValidationError

from graphs.end_to_end import ServedContext, build_graph
from mas_orchestra import Orchestra, OrchestraConfig, RunSettings
from mas_orchestra.bench.evaluation import aevaluate
from mas_orchestra.caps import SamplingCaps
from mas_orchestra.cli import main
from mas_orchestra.spec.grammar import GrammarLimits
from mas_orchestra.testing import ScriptedChatModel, cot_reply
from training.config import parse_config
from training.rewards import OutcomeReward

REPO = Path(__file__).resolve().parents[1]
DELEGATE = ("<thinking>Delegate.</thinking><agent><agent_name>CoTAgent</agent_name><required_arguments>"
            "<agent_input></agent_input></required_arguments><agent_output_id>a</agent_output_id></agent>"
            "<answer>a</answer>")
# A low-DoM plan with text after it: lenient reading warns, strict reading refuses.
LENIENT = DELEGATE + "\nExplanation: one solver."


def full_config() -> OrchestraConfig:
    return OrchestraConfig(
        dom="low", agents=("cot", "reflexion"), constrained="auto",
        grammar_limits=GrammarLimits(max_agents=2, input_chars=120, direct_answer=False),
        orchestrator_max_tokens=320, orchestrator_temperature=0.5, prompt="recipes/prompts/wiring", strict=True,
        whole_response_fallback=True, subagent_defaults={"debate": "strong"},
        caps=SamplingCaps(max_samples=3, max_temperature=1.0), plain_replies=False, interrupt_before_execute=True,
    )


def test_the_config_round_trips_as_data_and_json():
    config = full_config()
    assert OrchestraConfig.model_validate(config.model_dump()) == config
    assert OrchestraConfig.model_validate_json(config.model_dump_json()) == config
    # Nested limits and caps may be given as mappings (a YAML recipe, a JSON context).
    data = config.model_dump(mode="json")
    assert isinstance(data["grammar_limits"], dict) and isinstance(data["caps"], dict)
    again = OrchestraConfig.model_validate(data)
    assert again.grammar_limits == GrammarLimits(max_agents=2, input_chars=120, direct_answer=False)
    assert again.caps == SamplingCaps(max_samples=3, max_temperature=1.0) and again.agents == ("cot", "reflexion")
    assert OrchestraConfig() == OrchestraConfig.model_validate({})  # the defaults are the fields'
    assert OrchestraConfig(prompt=Path("recipes/prompts/wiring")).prompt == "recipes/prompts/wiring"


def test_every_field_is_described():
    for name, field in OrchestraConfig.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize(("data", "field"), [
    ({"domm": "low"}, "domm"),  # an unknown field
    ({"dom": "medium"}, "dom"),
    ({"strict": 1}, "strict"),  # no silent bool/int coercion
    ({"strict": "true"}, "strict"),
    ({"orchestrator_max_tokens": "48"}, "orchestrator_max_tokens"),
    ({"orchestrator_max_tokens": 0}, "orchestrator_max_tokens"),
    ({"orchestrator_temperature": -0.5}, "orchestrator_temperature"),
    ({"constrained": "yes"}, "constrained"),
    ({"agents": "cot"}, "agents"),  # a string is not a list of kinds
    ({"grammar_limits": {"max_agent": 2}}, "grammar_limits.max_agent"),  # unknown nested field
    ({"grammar_limits": {"max_agents": 0}}, "grammar_limits"),
    ({"caps": {"max_samples": 0}}, "caps"),
    ({"subagent_defaults": {"debate": 1}}, "subagent_defaults.debate"),
])
def test_bad_input_is_a_validation_error_naming_the_field(data, field):
    with pytest.raises(ValidationError) as caught:
        OrchestraConfig.model_validate(data)
    locations = {".".join(str(part) for part in error["loc"]) for error in caught.value.errors()}
    assert any(loc == field or loc.startswith(field + ".") for loc in locations), locations


def test_the_config_is_frozen():
    config = OrchestraConfig()
    with pytest.raises(ValidationError):
        config.dom = "low"  # type: ignore[misc]
    assert config.model_copy(update={"dom": "low"}).dom == "low" and config.dom == "high"


def test_orchestra_takes_at_most_ten_parameters_and_no_loose_config_keywords():
    params = inspect.signature(Orchestra.__init__).parameters
    assert len(params) <= 10, list(params)  # self included
    assert {"config", "settings", "tools", "checkpointer"} <= set(params)
    assert not set(OrchestraConfig.model_fields) & set(params)  # each lives in the config, once
    assert not set(RunSettings.model_fields) & set(params)


def test_an_unknown_agent_kind_answers_with_the_valid_choices():
    with pytest.raises(KeyError, match="unknown agent 'nope'; valid: CoTAgent"):
        Orchestra("scripted:1", "scripted:1", config=OrchestraConfig(agents=("cot", "nope")))


async def test_orchestra_from_a_config_plans_reads_and_calls_as_configured():
    orchestrator = ScriptedChatModel(replies=[LENIENT], model_name="orch")
    config = OrchestraConfig(dom="low", constrained=False, orchestrator_max_tokens=48, orchestrator_temperature=0.3,
                             agents=("cot",))
    orchestra = Orchestra(orchestrator, ScriptedChatModel(replies=[cot_reply("7")]), config=config)
    assert orchestra.config is config and orchestra.dom == "low"
    assert [kind.name for kind in orchestra.registry.kinds()] == ["cot"]
    assert "CoTAgent" in orchestra.prompt("q") and "SCAgent" not in orchestra.prompt("q")
    outcome = await orchestra.arun("q")
    assert outcome.ok and outcome.answer == "7" and outcome.spec_warnings == {"ignored_after_plan": 1}
    assert {k: v for k, v in orchestrator.call_kwargs[0].items() if k in ("max_tokens", "temperature")} == {
        "max_tokens": 48, "temperature": 0.3}
    strict = Orchestra(ScriptedChatModel(replies=[LENIENT]), ScriptedChatModel(replies=[cot_reply("7")]),
                       config=config.model_copy(update={"strict": True}))
    assert (await strict.arun("q")).status.value == "invalid_spec"
    with pytest.raises(ValueError, match="needs a checkpointer"):
        Orchestra("scripted:1", "scripted:1", config=OrchestraConfig(interrupt_before_execute=True))


async def test_eval_and_reward_read_a_completion_with_the_same_config(tmp_path):
    strict = OrchestraConfig(dom="low", constrained=False, strict=True)
    rows = [{"id": "1", "question": "q", "answer": "7"}]
    summary = await aevaluate(rows, orchestrator=ScriptedChatModel(replies=[LENIENT]),
                              subagent=ScriptedChatModel(replies=[cot_reply("7")]), config=strict, grader="exact",
                              out_dir=tmp_path / "strict", progress=False, plot=False)
    assert summary["status_counts"]["invalid_spec"] == 1 and summary["strict"] is True
    reward = OutcomeReward(subagent=ScriptedChatModel(replies=[cot_reply("7")]), config=strict, grader="exact")
    assert await reward(["q"], [LENIENT], answer=["7"]) == [0.0]
    lenient = OutcomeReward(subagent=ScriptedChatModel(replies=[cot_reply("7")]),
                            config=strict.model_copy(update={"strict": False}), grader="exact")
    assert await lenient(["q"], [LENIENT], answer=["7"]) == [1.0]
    with pytest.raises(TypeError, match="OrchestraConfig"):
        OutcomeReward(config={"dom": "low"})  # type: ignore[arg-type]


async def test_the_served_graph_reads_the_config_from_its_context(monkeypatch):
    monkeypatch.delenv("MAS_DOM", raising=False)
    monkeypatch.setenv("MAS_ORCHESTRATOR", "scripted:7")  # a direct answer, valid in low DoM only
    monkeypatch.setenv("MAS_SUBAGENT", "scripted:7")
    graph = build_graph()
    low = await graph.ainvoke({"question": "q"}, context={"config": {"dom": "low", "constrained": False}})
    assert low["status"] == "ok" and low["answer"] == "7" and low["setup"]["dom"] == "low"
    high = await graph.ainvoke({"question": "q"}, context=ServedContext(config=OrchestraConfig(constrained=False)))
    assert high["setup"]["dom"] == "high"
    with pytest.raises(ValidationError, match="domm"):
        await graph.ainvoke({"question": "q"}, context={"config": {"domm": "low"}})
    with pytest.raises(ValidationError, match="timeout"):
        await graph.ainvoke({"question": "q"}, context={"timeout": 5})  # settings go under "settings"
    with pytest.raises(ValueError, match="prompt template folders are not accepted"):
        await graph.ainvoke({"question": "q"}, context={"config": {"prompt": "/etc"}})


def test_the_cli_builds_the_config_and_names_a_bad_setting(capsys):
    assert main(["run", "q", "--orchestrator", "scripted:7", "--subagent", "scripted:7", "--dom", "low",
                 "--no-constrained", "--strict", "--max-tokens", "16"]) == 0
    assert "answer: 7" in capsys.readouterr().out
    assert main(["run", "q", "--orchestrator", "scripted:7", "--subagent", "scripted:7",
                 "--max-retries", "-1"]) == 2
    err = capsys.readouterr().err
    assert "max_retries" in err and "Traceback" not in err


@pytest.mark.parametrize("recipe", sorted((REPO / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_recipe_builds_its_orchestra_config_and_settings(recipe):
    cfg = parse_config(["--config", str(recipe)])
    config, settings = cfg.orchestra_config(), cfg.run_settings()
    assert config.dom == cfg.dom and config.strict == cfg.strict and config.prompt == cfg.prompt
    assert config.grammar_limits == GrammarLimits(max_agents=cfg.max_agents, direct_answer=False)
    assert config.orchestrator_max_tokens == cfg.max_completion_length
    assert config.constrained == (None if cfg.constrained else False)
    assert config.agents == (tuple(cfg.agent_kinds) if cfg.agent_kinds is not None else None)
    assert settings.timeout == cfg.reward_timeout and settings.max_retries == cfg.max_retries
    assert OrchestraConfig.model_validate_json(config.model_dump_json()) == config
