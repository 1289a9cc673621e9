"""Training pieces for learning structure: structure metrics per batch, cost among a group's correct rollouts,
model pools and prices from the training config, the dead-group warning, and the wiring recipes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mas_orchestra.bench.masbench import MasbenchCalculator
from mas_orchestra.bench.masbench.generation import generate
from mas_orchestra.offers import PoolError, with_pool
from mas_orchestra.registry import offered_registry
from mas_orchestra.spec import spec_from_data
from training.config import parse_config
from training.records import RolloutRecord, summarize
from training.rewards import REWARD_QUANTUM, make_outcome_reward
from training.shaping import group_cost_rewards

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
CALC = "python:mas_orchestra.bench.masbench:MasbenchCalculator"
CALC2 = "python:mas_orchestra.bench.masbench:TwoRoundCalculator"


def chain(n: int, *, wired: bool = True, model: str | None = None) -> str:
    nodes = []
    for i in range(1, n + 1):
        text = f"Given ${{A{i - 1}}}, continue." if wired and i > 1 else "Continue the task."
        node = {"id": f"A{i}", "agent": "cot", "input": text}
        if model:
            node["params"] = {"model": model}
        nodes.append(node)
    edges = [{"source": f"A{i}", "target": f"A{i + 1}"} for i in range(1, n)]
    registry = offered_registry(None, agents=["cot", "sc"])
    if model:
        registry = with_pool(registry, {"fast": MasbenchCalculator(), "strong": MasbenchCalculator(rounds=2)})
    return spec_from_data({"nodes": nodes, "edges": edges}, registry=registry).to_xml(registry=registry)


def score(reward, completions, rows):
    return asyncio.run(reward(
        prompts=[[{"role": "user", "content": r["question"]}] for r in rows], completions=completions,
        answer=[[r["answer"]] for r in rows], question=[r["question"] for r in rows], id=[r["id"] for r in rows],
    ))


@pytest.fixture(scope="module")
def depth3():
    return generate("depth", [3], n=2, seed=0, split="test")


def test_only_a_wired_chain_as_long_as_the_problem_solves_it(depth3):
    reward = make_outcome_reward(subagent=CALC, registry=offered_registry(None, agents=["cot", "sc"]))
    rows = [depth3[0]] * 4
    out = score(reward, [chain(2), chain(3), chain(3, wired=False), chain(4)], rows)
    assert out == [0.0, 1.0, 0.0, 1.0]
    m = reward.last_batch["metrics"]
    assert m["structure/depth_mean"] == pytest.approx((2 + 3 + 3 + 4) / 4)
    assert m["structure/ref_depth_mean"] == pytest.approx((2 + 3 + 1 + 4) / 4)
    assert m["structure/wired_share"] == pytest.approx((1 + 2 + 0 + 3) / (1 + 2 + 2 + 3))
    assert m["structure/width_mean"] == 1.0 and m["structure/edges_mean"] == pytest.approx(2.0)
    assert m["structure/correct_ref_depth_mean"] == pytest.approx(3.5)
    assert reward.last_batch["records"][1].structure["ref_depth"] == 3


def test_structure_keys_are_logged_even_for_an_all_invalid_batch():
    m = summarize([RolloutRecord(index=0, status="invalid_spec")])
    assert m["structure/depth_mean"] == 0.0 and m["structure/wired_share"] == 0.0


def test_group_cost_prefers_the_cheaper_correct_rollout_within_each_group():
    class Costs:
        cost_weight, final_answer_weight, execution_success_weight = 0.5, 1.0, 0.0

        @staticmethod
        def cost_of(record):
            return float(record.subagent_calls)

    def rec(i, calls, correct, status="ok"):
        return RolloutRecord(index=i, status=status, correct=correct, subagent_calls=calls,
                             reward=1.0 if correct else 0.0)

    records = [rec(0, 3, True), rec(1, 9, True), rec(2, 6, True), rec(3, 1, False),  # group a
               rec(4, 50, True), rec(5, 2, False),                                 # group b: one correct
               rec(6, 4, True), rec(7, 4, True)]                                   # group c: equal costs
    out = group_cost_rewards(records, ["a"] * 4 + ["b"] * 2 + ["c"] * 2, Costs())
    assert out == pytest.approx([1.0, 0.5, 0.75, 0.0, 1.0, 0.0, 1.0, 1.0])


def test_a_pool_with_prices_learns_nothing_from_scale(depth3):
    pool = {"fast": MasbenchCalculator(), "strong": MasbenchCalculator(rounds=2, model_name="calc-strong")}
    registry = with_pool(offered_registry(None, agents=["cot", "sc"]), pool)
    from mas_orchestra.runtime.pricing import register_price

    register_price("masbench-calculator", 1.0, 1.0)
    register_price("calc-strong", 5.0, 5.0)
    reward = make_outcome_reward(subagent=pool["fast"], registry=registry, cost_metric="cost_usd",
                                 cost_weight=0.5, cost_reward="group")
    rows = [depth3[0]] * 4
    # fast 3-chain and strong 2-chain both solve depth 3; the strong one costs more; fast 2-chain is wrong.
    out = score(reward, [chain(3, model="fast"), chain(2, model="strong"), chain(2, model="fast"),
                         chain(3, model="strong")], rows)
    records = reward.last_batch["records"]
    assert [r.correct for r in records] == [True, True, False, True]
    assert records[0].cost_usd < records[1].cost_usd < records[3].cost_usd
    assert out[0] == pytest.approx(1.0) and out[2] == 0.0 and out[3] == pytest.approx(0.5)
    assert 0.5 < out[1] < 1.0
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        make_outcome_reward(subagent=pool["fast"], cost_reward="group", cost_weight=1.0)
    with pytest.raises(ValueError, match="unknown cost_reward"):
        make_outcome_reward(subagent=pool["fast"], cost_reward="relative")


def test_config_pool_defaults_and_prices(tmp_path, capsys):
    cfg = parse_config(["--subagent", f"fast={CALC},strong={CALC2}", "--subagent-defaults", "sc=strong",
                        "--prices", "fast=1:1,strong=5:4.5", "--cost-reward", "group", "--cost-weight", "0.5"])
    assert cfg.subagent_pool == {"fast": CALC, "strong": CALC2}
    assert cfg.subagent_default_map == {"sc": "strong"} and cfg.price_table == {"fast": (1.0, 1.0),
                                                                                  "strong": (5.0, 4.5)}
    recipe = tmp_path / "pool.yaml"
    recipe.write_text(f"subagent: {{fast: '{CALC}', strong: '{CALC2}'}}\nprices: {{fast: '1:1', strong: [5, 5]}}\n")
    cfg = parse_config(["--config", str(recipe)])
    assert cfg.subagent_pool == {"fast": CALC, "strong": CALC2} and cfg.price_table["strong"] == (5.0, 5.0)
    assert parse_config([]).subagent_pool is None
    for argv, message in (
        (["--prices", "fast=cheap"], "price of 'fast' is 'cheap'"),
        (["--subagent-defaults", "debate"], "is not KIND=ENTRY"),
        (["--subagent", f"fast={CALC},fast={CALC2}"], "given twice"),
        (["--cost-reward", "group", "--cost-weight", "2"], "must be in [0, 1)"),
    ):
        with pytest.raises(SystemExit):
            parse_config(argv)
        assert message in capsys.readouterr().err


def test_pool_errors_name_what_is_missing():
    from training.config import OrchestraGRPOConfig
    from training.grpo import _subagent
    from training.pools import pooled_subagents

    def _subagents(cfg, registry):
        return pooled_subagents(cfg, registry, lambda text: _subagent(cfg, text))

    registry = offered_registry(None, agents=["cot", "sc"])
    cfg = OrchestraGRPOConfig(subagent=f"fast={CALC},strong={CALC2}", cost_metric="cost_usd",
                              prices="fast=1:1", subagent_max_tokens=None)
    with pytest.raises(PoolError, match=r"no price for pool model\(s\) strong \(masbench-calculator-2\)"):
        _subagents(cfg, registry)
    cfg = OrchestraGRPOConfig(subagent=f"fast={CALC},strong={CALC2}", subagent_defaults="sc=turbo",
                              subagent_max_tokens=None)
    with pytest.raises(PoolError, match="no such pool model; valid: fast, strong"):
        _subagents(cfg, registry)
    cfg = OrchestraGRPOConfig(subagent=CALC, subagent_defaults="sc=strong", subagent_max_tokens=None)
    with pytest.raises(PoolError, match="needs a pool"):
        _subagents(cfg, registry)
    cfg = OrchestraGRPOConfig(subagent=f"fast={CALC},strong={CALC2}", prices="fast=1:1,strong=5:5",
                              cost_metric="cost_usd", subagent_max_tokens=None)
    model, pooled = _subagents(cfg, registry)
    assert model.rounds == 1 and "model" in pooled.get("cot").params.model_fields


@pytest.mark.parametrize("name", ["cpu_wiring.yaml", "cpu_wiring_low.yaml", "cpu_wiring_cost.yaml"])
def test_wiring_recipes_parse_and_differ_only_where_they_say(name):
    cfg = parse_config(["--config", str(RECIPES / name)])
    base = parse_config(["--config", str(RECIPES / "cpu_wiring.yaml")])
    assert cfg.model == "embedded" and cfg.constrained and cfg.merge and cfg.agent_kinds == ["cot", "sc"]
    assert cfg.dataset == base.dataset and cfg.dataset.endswith("split=train")
    # the cost recipe keeps the two-agent example it was measured with (training/README.md, "What was measured")
    assert cfg.prompt == {"cpu_wiring.yaml": "recipes/prompts/chains", "cpu_wiring_low.yaml": None,
                          "cpu_wiring_cost.yaml": "recipes/prompts/wiring"}[name]
    assert (cfg.max_steps, cfg.num_generations, cfg.learning_rate) == (base.max_steps, base.num_generations,
                                                                       base.learning_rate)
    # every rollout enters the loss (training on the 4 most varied of 8 cost seed 2 the length: training/README.md)
    assert cfg.downsample_generations is None
    if name != "cpu_wiring_cost.yaml":  # the cost recipe keeps the linear decay it was measured with
        assert cfg.lr_scheduler_type == base.lr_scheduler_type == "constant"
    if name == "cpu_wiring_low.yaml":
        assert cfg.dom == "low" and cfg.subagent == base.subagent and cfg.max_completion_length == \
            base.max_completion_length
    elif name == "cpu_wiring_cost.yaml":
        assert cfg.dom == "high" and set(cfg.subagent_pool) == {"fast", "strong"}
        assert cfg.cost_reward == "group" and cfg.cost_metric == "cost_usd" and set(cfg.price_table) == {"fast",
                                                                                                         "strong"}
    else:
        assert cfg.dom == "high" and cfg.subagent == CALC


def test_zero_reward_steps_are_reported_once(caplog):
    from types import SimpleNamespace

    from training.trainer import OrchestraGRPOTrainer

    trainer = OrchestraGRPOTrainer.__new__(OrchestraGRPOTrainer)
    trainer._zero_reward_steps = []
    trainer.state = SimpleNamespace(global_step=0)
    zero = [RolloutRecord(index=0, status="ok", reward=0.0), RolloutRecord(index=1, status="invalid_spec")]
    with caplog.at_level("WARNING", logger="training.trainer"):
        for step in (1, 2, 3, 4):
            trainer.state.global_step = step
            trainer._watch_zero_rewards(zero)
    warnings = [r.getMessage() for r in caplog.records if "no gradient" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("steps 1-3: every rollout scored 0")
    assert "invalid_spec, ok" in warnings[0]
    trainer.state.global_step = 5
    trainer._watch_zero_rewards([RolloutRecord(index=0, status="ok", reward=1.0)])
    assert trainer._zero_reward_steps == []


def test_dead_group_share_counts_groups_without_advantage():
    records = [RolloutRecord(index=i, status="ok", reward=r, question=q)
               for i, (q, r) in enumerate([("a", 0.0), ("a", 0.0), ("b", 1.0), ("b", 0.0), ("c", 1.0), ("c", 1.0)])]
    assert summarize(records)["dead_group_share"] == pytest.approx(2 / 3)


def test_controls_replay_the_same_plans(depth3):
    from mas_orchestra.bench.evaluation.controls import areplay_with_control
    from mas_orchestra.bench.evaluation.summary import summarize as summarize_eval
    from training.controls import table_row

    registry = offered_registry(None, agents=["cot", "sc"])
    row = depth3[1]
    records = [{"id": row["id"], "sample": s, "question": row["question"], "truth": row["answer"],
                "orchestration": text} for s, text in enumerate([chain(3), chain(4), "not a plan"])]
    ablated = asyncio.run(areplay_with_control(records, "ablate-wiring", subagent=CALC, registry=registry))
    assert [r["status"] for r in ablated] == ["ok", "ok", "invalid_spec"]
    assert [r["correct"] for r in ablated] == [False, False, False]
    assert all("${" not in n["input"] for r in ablated[:2] for n in r["spec"]["nodes"])
    randomised = asyncio.run(areplay_with_control(records, "random-graph", subagent=CALC, registry=registry))
    assert [len(r["spec"]["nodes"]) for r in randomised[:2]] == [3, 4]
    again = asyncio.run(areplay_with_control(records, "random-graph", subagent=CALC, registry=registry))
    assert [r["spec"] for r in again] == [r["spec"] for r in randomised]  # seeded by id and sample
    line = table_row("trained, wiring ablated", 3, summarize_eval(ablated))
    assert line.startswith("| trained, wiring ablated | 3 | 0.0% (0/3) | 3.50 | 3.50 | 1.00 | 0% |")
    with pytest.raises(ValueError, match="unknown control"):
        asyncio.run(areplay_with_control(records, "shuffle", subagent=CALC, registry=registry))


def test_partial_credit_counts_how_far_up_the_chain_the_final_agent_got():
    from training.data import load_masbench
    from training.shaping import stated_share

    row = load_masbench("depth", [3], n=1, seed=0, split="test")[0]
    facts = row["intermediates"]
    assert len(facts) == 3 and all(f.startswith("the ") and " = " in f for f in facts)  # one per level
    reward = make_outcome_reward(subagent=CALC, registry=offered_registry(None, agents=["cot", "sc"]),
                                 partial_credit_weight=0.5)
    out = asyncio.run(reward(
        prompts=[[{"role": "user", "content": row["question"]}]] * 4,
        completions=[chain(1), chain(2), chain(3, wired=False), chain(3)], answer=[row["answer"]] * 4,
        question=[row["question"]] * 4, intermediates=[facts] * 4,
    ))
    partial = [r.partial for r in reward.last_batch["records"]]
    assert out[3] == 1.0 and partial[0] == partial[2] == pytest.approx(1 / 3) and partial[1] == pytest.approx(2 / 3)
    # rewards are rounded to multiples of 2^-16 (exact group means in float32)
    assert out[0] == pytest.approx(0.5 * partial[0], abs=REWARD_QUANTUM)
    assert out[1] == pytest.approx(0.5 * partial[1], abs=REWARD_QUANTUM)
    assert reward.last_batch["metrics"]["partial_credit/mean"] == pytest.approx(sum(partial) / 4)
    # the matcher: the name, then the value, no other digit between; a longer number is not the value
    assert stated_share("the number of a = 5; the number of b = 17", ["the number of a = 5", "the number of b = 1"]) == 0.5
    assert stated_share("anything", []) == 0.0
    with pytest.raises(ValueError, match="never score like a right one"):
        make_outcome_reward(subagent=CALC, partial_credit_weight=1.0)
    zero = make_outcome_reward(subagent=CALC, registry=offered_registry(None, agents=["cot", "sc"]))
    assert asyncio.run(zero(prompts=[[{"role": "user", "content": "x"}]], completions=[chain(2)],
                            answer=[row["answer"]], question=[row["question"]], intermediates=[facts])) == [0.0]


def test_pareto_replays_the_same_plans_on_one_pool_model(depth3):
    from training.pareto import _replay, _strong_share, force_model, pool_models

    models = pool_models()
    registry = with_pool(offered_registry(None, agents=["cot", "sc"]), models)
    row = depth3[0]
    records = [{"id": row["id"], "sample": 0, "question": row["question"], "truth": row["answer"],
                "orchestration": chain(2, model="fast")}]
    fast = asyncio.run(_replay(records, "fast", registry, models))
    strong = asyncio.run(_replay(records, "strong", registry, models))
    assert not fast[0]["correct"] and strong[0]["correct"]  # two strong rounds x 2 agents reach depth 3
    assert _strong_share(strong) == 1.0 and _strong_share(fast) == 0.0
    spec = force_model(spec_from_data({"nodes": [{"id": "A", "agent": "cot", "params": {"model": "fast"}}]},
                                      registry=registry), "strong")
    assert spec.nodes[0].params["model"] == "strong"


def test_controls_refuse_a_run_without_merged_weights(tmp_path):
    from training.controls import arms_for

    with pytest.raises(SystemExit, match="merged does not exist"):
        arms_for([str(tmp_path / "run")])
    (tmp_path / "run" / "merged").mkdir(parents=True)
    arms = arms_for([str(tmp_path / "run")], low_dom_run=str(tmp_path / "low"))
    assert [a.label for a in arms] == ["base", "trained (run)", "low DoM, trained (low)"]
    assert arms[-1].dom == "low" and arms[1].orchestrator.endswith("run/merged")


def test_system_scoped_partial_credit_counts_facts_any_agent_reached():
    from training.data import load_masbench

    row = load_masbench("depth", [3], n=1, seed=0, split="test")[0]
    facts = row["intermediates"]
    registry = offered_registry(None, agents=["cot", "sc"])
    # A1 -> A2 wired (two levels reached), then a final A3 that drops the reference (it restarts at level one)
    broken_tail = spec_from_data({"nodes": [
        {"id": "A1", "agent": "cot", "input": "Continue the task."},
        {"id": "A2", "agent": "cot", "input": "Given ${A1}, continue."},
        {"id": "A3", "agent": "cot", "input": "Continue the task."}],
        "edges": [{"source": "A1", "target": "A2"}, {"source": "A2", "target": "A3"}]},
        registry=registry).to_xml(registry=registry)
    completions = [chain(2), broken_tail]
    scored = {}
    for scope in ("final", "system"):
        reward = make_outcome_reward(subagent=CALC, registry=registry, partial_credit_weight=0.5,
                                     partial_credit_scope=scope)
        out = asyncio.run(reward(prompts=[[{"role": "user", "content": row["question"]}]] * 2,
                                 completions=completions, answer=[row["answer"]] * 2,
                                 question=[row["question"]] * 2, intermediates=[facts] * 2))
        scored[scope] = (out, [r.partial for r in reward.last_batch["records"]])
    # the final agent alone: the broken tail states one fact, the two-agent chain two
    assert scored["final"][1] == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    # the system: both reached two levels, so the extra agent no longer costs the plan partial credit
    assert scored["system"][1] == [pytest.approx(2 / 3), pytest.approx(2 / 3)]
    assert scored["system"][0][1] == pytest.approx(0.5 * 2 / 3, abs=REWARD_QUANTUM)
    with pytest.raises(ValueError, match="partial_credit_scope"):
        make_outcome_reward(subagent=CALC, partial_credit_scope="agents")


def _chain_text(n: int) -> str:
    nodes = [{"id": f"A{k}", "agent": "cot", "description": f"Step {k}",
              "input": "" if k == 1 else f"Given ${{A{k - 1}}}, work out the next quantity."} for k in range(1, n + 1)]
    edges = [{"source": f"A{k}", "target": f"A{k + 1}"} for k in range(1, n)]
    return spec_from_data({"thinking": "One step per agent.", "nodes": nodes, "edges": edges}).to_xml()


def test_the_wiring_budget_leaves_room_for_a_third_and_fourth_agent_after_plans_as_long_as_the_policy_writes():
    """The grammar offers agent k only if it and the largest edge block of k agents still fit the tokens left.
    Two-agent plans of the trained policy take ~190-210 tokens and three-agent ones ~290 (rollouts.jsonl of the
    wiring runs): at a budget of 320 no third agent fitted after 92 % of the two-agent plans, so the length a
    depth-3 problem needs was the grammar's choice, not the policy's (training/README.md, "The budget")."""
    from mas_orchestra.models.constraints import OrchestrationConstraint

    cfg = parse_config(["--config", str(RECIPES / "cpu_wiring.yaml")])
    config = cfg.orchestra_config()
    constraint = OrchestrationConstraint(dom="high", registry=offered_registry(None, agents=cfg.agent_kinds),
                                         limits=config.grammar_limits)

    def offers(agent: int, plan: str, used: int, budget: int) -> bool:
        return f"<agent_id>A{agent}</agent_id>" in (constraint.next_stage(plan, remaining=budget - used) or "")

    two, three = _chain_text(2).split("\n<edge>")[0], _chain_text(3).split("\n<edge>")[0]
    assert offers(3, two, used=210, budget=cfg.max_completion_length)
    assert offers(4, three, used=285, budget=cfg.max_completion_length)
    assert not offers(3, two, used=210, budget=320)  # the recipe's budget before


def test_a_group_of_equal_partial_rewards_has_exactly_zero_advantage():
    """Eight wired two-agent chains on a depth-3 problem all earn 0.5 x 2/3. TRL averages the group in
    float32, where 1/3 does not add up exactly: before rewards were rounded to multiples of 2^-16 the
    advantages were ~1e-4 instead of 0 and the step ran a full forward and backward for nothing."""
    import torch

    from training.data import load_masbench

    row = load_masbench("depth", [3], n=1, seed=0, split="test")[0]
    reward = make_outcome_reward(subagent=CALC, registry=offered_registry(None, agents=["cot", "sc"]),
                                 partial_credit_weight=0.5)
    out = asyncio.run(reward(
        prompts=[[{"role": "user", "content": row["question"]}]] * 8, completions=[chain(2)] * 8,
        answer=[row["answer"]] * 8, question=[row["question"]] * 8, intermediates=[row["intermediates"]] * 8,
    ))
    assert out[0] == pytest.approx(0.5 * 2 / 3, abs=REWARD_QUANTUM) and len(set(out)) == 1
    grouped = torch.tensor(out, dtype=torch.float32).view(1, 8)
    assert bool((grouped - grouped.mean(dim=1, keepdim=True) == 0).all()) and float(grouped.std()) == 0.0
    raw = torch.tensor([0.5 * 2 / 3] * 8, dtype=torch.float32)
    assert float(raw.std()) > 0  # the float32 rounding the quantum removes
