"""The MASBench calculator sub-agent: reads only the prompt text, does bounded rounds of arithmetic."""

from __future__ import annotations

import asyncio
import re

import pytest

from mas_orchestra.bench import masbench as mb
from mas_orchestra.bench.masbench.calculator import MasbenchCalculator, parse_problem, solve
from mas_orchestra.models import resolve_model
from mas_orchestra.prompts import orchestrator_prompt
from mas_orchestra.registry import offered_registry
from mas_orchestra.runtime import execute_spec
from mas_orchestra.spec import spec_from_data


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("axis", ["depth", "breadth", "parallel", "horizon", "robustness"])
def test_every_statement_parses_and_unbounded_rounds_solve(axis, split):
    values = [2, 3] if axis != "depth" else [1, 3, 5]
    for row in mb.generate(axis, values, 5, 3, split):
        problem = parse_problem(row["question"])
        assert len(problem.constants) + len(problem.operations) == len(row["graph"]), row["id"]
        known, _ = solve(problem, rounds=50)
        gold = row["answer"] if isinstance(row["answer"], list) else [row["answer"]]
        assert [str(known.get(a)) for a in problem.asks] == gold, row["id"]


def test_one_round_per_call_reaches_exactly_depth_one():
    row = mb.generate("depth", [3], 1, 0, "train")[0]
    model = MasbenchCalculator()
    reply = model.invoke(row["question"]).content
    assert "<answer>unknown</answer>" in reply
    # Feeding the reply back (as a Reflexion critic or a wired downstream agent sees it) adds one level each.
    text = row["question"]
    for _ in range(3):
        reply = model.invoke(text + "\n" + reply).content
    assert f"<answer>{row['answer']}</answer>" in reply


def test_robustness_notes_are_not_statements():
    row = mb.generate("robustness", [3], 1, 0, "test")[0]
    problem = parse_problem(row["question"])
    for claim in row["distractors"]:
        name = claim["quantity"]
        value = problem.constants.get(name)
        assert value is None or value == row["graph"][name].get("value")


def _run(kind: str, question: str):
    params = {"roles": ["Solver", "Checker"]} if kind == "debate" else {}
    spec = spec_from_data({"nodes": [{"id": "A1", "agent": kind, "description": "solve", "input": "",
                                      "params": params}]})
    model = resolve_model("python:mas_orchestra.bench.masbench:MasbenchCalculator")
    return asyncio.run(execute_spec(spec, question, model=model))


@pytest.mark.parametrize(("kind", "solves"), [("cot", False), ("sc", False), ("reflexion", True), ("debate", True)])
def test_block_choice_decides_depth_two(kind, solves):
    """One call (CoT) or independent samples (SC) stop at depth 1; Reflexion and Debate carry results forward."""
    for row in mb.generate("depth", [2], 3, 0, "train"):
        outcome = _run(kind, row["question"])
        assert outcome.status.value == "ok"
        assert (outcome.answer == row["answer"]) is solves, (kind, row["id"], outcome.answer)


@pytest.mark.parametrize("agents", [["cot", "reflexion"], ["reflexion"], ["debate", "sc"], ["debate"], ["cot"]])
@pytest.mark.parametrize("dom", ["low", "high"])
def test_prompt_example_names_only_offered_kinds(agents, dom):
    registry = offered_registry(None, agents=agents)
    prompt = orchestrator_prompt("Q?", dom, registry=registry)
    offered = set(registry.block_names())
    named = set(re.findall(r"<agent_name>(\w+)</agent_name>", prompt))
    assert named and named <= offered
