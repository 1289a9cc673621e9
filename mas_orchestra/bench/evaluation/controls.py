"""Causal controls for an evaluation: run the orchestrator's plan changed in one controlled way.

A rising reward does not show that an orchestrator learnt structure: it may have learnt a kind, a length or an
ensembling habit. Each control keeps everything but one thing:

- ``ablate-wiring``: the plan as written, with every ``${id}`` reference removed from the agents' inputs (the
  edges stay, so the agents still run in the same order; they just receive nothing from each other). Accuracy
  that survives this did not come from the wiring.
- ``random-graph``: a random valid graph with as many agents as the plan, kinds drawn from the offered ones,
  a random DAG with one sink in which every agent references all its predecessors. Accuracy that the trained
  plan beats by a margin came from *which* wiring it chose, not from its size.

Both need high DoM (a low-DoM plan is one agent: nothing to rewire). :func:`control_runner` applies a control to
freshly sampled plans (``mas-orchestra eval --ablate-wiring``); :func:`areplay_with_control` applies it to the
plans an earlier eval already sampled (its ``results.jsonl``), so the controlled and the uncontrolled rows of a
table compare the very same plans and no orchestrator call is repeated.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from mas_orchestra.errors import SpecError
from mas_orchestra.registry import AgentKind, AgentRegistry
from mas_orchestra.spec import GraphSpec, spec_from_data
from mas_orchestra.spec.structure import ablate_wiring

__all__ = ["CONTROLS", "areplay", "areplay_with_control", "check_control", "control_runner", "random_graph_like"]

#: The controls an evaluation can apply (``mas-orchestra eval --ablate-wiring`` / ``--random-graph``).
CONTROLS: tuple[str, ...] = ("ablate-wiring", "random-graph")


def check_control(control: str | None, dom: str, baseline: str | None) -> None:
    """Refuse a control an evaluation cannot apply.

    Args:
        control: the control asked for (``None``: none).
        dom: the evaluation's DoM.
        baseline: the evaluation's single-agent baseline, if any.

    Raises:
        EvalInputError: an unknown control, a control with a baseline, or one outside high DoM.
    """
    from mas_orchestra.bench.evaluation.common import EvalInputError

    if control is None:
        return
    if control not in CONTROLS:
        raise EvalInputError(f"unknown control {control!r}; valid: {', '.join(CONTROLS)}")
    if baseline is not None:
        raise EvalInputError(f"--{control} changes an orchestrator's plan; a --baseline run has none")
    if dom != "high":
        raise EvalInputError(f"--{control} needs --dom high: a low-DoM plan is one agent with no wiring to change")


def _plain_kinds(registry: AgentRegistry) -> list[AgentKind]:
    """Offered kinds a random node can use: no search backend needed, no required parameter."""
    kinds = [k for k in registry.kinds()
             if not k.needs_search and not any(f.is_required() for f in k.params.model_fields.values())]
    if not kinds:
        raise SpecError("random-graph control: no offered agent kind runs without required parameters")
    return kinds


def random_graph_like(spec: GraphSpec, registry: AgentRegistry, rng: random.Random) -> GraphSpec:
    """A random valid high-DoM graph with as many agents as ``spec``.

    Agents ``R1..Rn`` in a random order: each agent but the last gets an edge to a uniformly chosen later agent
    (so ``Rn`` is the one sink and every agent reaches it), then each later agent gets further earlier agents as
    parents with probability 1/2. Every agent with parents references all of them in its input; sources get an
    empty input (the whole question). A spec with no agents (a direct answer) is returned unchanged.

    Args:
        spec: the plan whose size is copied.
        registry: the offered kinds (those needing search or required parameters are skipped).
        rng: the random source (seed it for a reproducible control).

    Returns:
        The random spec (validated).

    Raises:
        SpecError: when no offered kind can be used.
    """
    n = len(spec.nodes)
    if n == 0:
        return spec
    kinds = _plain_kinds(registry)
    ids = [f"R{i}" for i in range(1, n + 1)]
    parents: dict[str, set[str]] = {i: set() for i in ids}
    for i in range(n - 1):
        parents[ids[rng.randrange(i + 1, n)]].add(ids[i])
    for j in range(1, n):
        for i in range(j):
            if rng.random() < 0.5:
                parents[ids[j]].add(ids[i])
    nodes = []
    for node_id in ids:
        refs = sorted(parents[node_id], key=ids.index)
        text = ("Use " + ", ".join("${" + r + "}" for r in refs) + " to continue the task.") if refs else ""
        nodes.append({"id": node_id, "agent": rng.choice(kinds).name, "description": "random control",
                      "input": text})
    edges = [{"source": p, "target": t} for t in ids for p in sorted(parents[t], key=ids.index)]
    return spec_from_data({"thinking": "random-graph control", "dom": "high", "nodes": nodes, "edges": edges},
                          registry=registry)


def control_runner(orchestra: Any, control: str, *, constrained: Any = None) -> Callable[[str], Awaitable[Any]]:
    """A runner ``question -> Outcome`` that orchestrates, applies ``control`` to the plan, and executes it.

    The orchestration text in the outcome is what the orchestrator wrote; the spec is the controlled one.

    Args:
        orchestra: a :class:`mas_orchestra.runtime.Orchestra` (high DoM).
        control: one of :data:`CONTROLS`.
        constrained: the sub-agent reply constraint setting, as ``execute_spec`` takes it.

    Returns:
        An async function of the question.

    Raises:
        ValueError: for an unknown control or a low-DoM orchestra.
    """
    from mas_orchestra.runtime import Status, execute_spec
    from mas_orchestra.runtime.outcome import RunRecord

    if control not in CONTROLS:
        raise ValueError(f"unknown control {control!r}; valid: {', '.join(CONTROLS)}")
    if orchestra.dom != "high":
        raise ValueError(f"the {control} control needs high DoM: a low-DoM plan has one agent and no wiring")
    calls: dict[str, int] = {}

    async def run(question: str) -> Any:
        text = await orchestra.aorchestrate(question)
        try:
            spec = orchestra.parse(text)
        except SpecError as exc:
            record = RunRecord(question)
            record.orchestration = text
            return record.outcome(Status.INVALID_SPEC, error=str(exc))
        if control == "ablate-wiring":
            spec = ablate_wiring(spec)
        else:
            count = calls[question] = calls.get(question, 0) + 1
            seed = int.from_bytes(hashlib.sha256(f"{question}#{count}".encode()).digest()[:8], "big")
            spec = random_graph_like(spec, orchestra.registry, random.Random(seed))
        return await execute_spec(
            spec, question, model=orchestra.subagent, search=orchestra.search, registry=orchestra.registry,
            settings=orchestra.settings, orchestration=text, constrained=constrained,
        )

    return run


def _controlled(spec: GraphSpec, control: str, registry: AgentRegistry, key: str) -> GraphSpec:
    if control == "ablate-wiring":
        return ablate_wiring(spec)
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return random_graph_like(spec, registry, random.Random(seed))


async def areplay_with_control(
    records: Iterable[Mapping[str, Any]], control: str, *, subagent: Any, registry: AgentRegistry,
    grader: str = "math", settings: Any = None,
) -> list[dict[str, Any]]:
    """Run the plans of earlier eval records again under ``control``; return new records of the same shape.

    The random graph is seeded by the record's id and sample, so a replay is repeatable. See :func:`areplay`.

    Args:
        records: eval records (``results.jsonl`` lines) of a high-DoM run.
        control: one of :data:`CONTROLS`.
        subagent: the sub-agent model (or model string) the plans run on.
        registry: the agent kinds the plans were written with.
        grader: the grading kind of the original eval.
        settings: run bounds (:class:`~mas_orchestra.settings.RunSettings`; default its defaults).

    Returns:
        One record per input record (see :func:`areplay`), ``control`` set to ``control``.

    Raises:
        ValueError: for an unknown control.
    """
    if control not in CONTROLS:
        raise ValueError(f"unknown control {control!r}; valid: {', '.join(CONTROLS)}")
    return await areplay(records, lambda spec, key: _controlled(spec, control, registry, key), label=control,
                         subagent=subagent, registry=registry, grader=grader, settings=settings)


async def areplay(
    records: Iterable[Mapping[str, Any]], change: Callable[[GraphSpec, str], GraphSpec], *, label: str,
    subagent: Any, registry: AgentRegistry, grader: str = "math", settings: Any = None,
) -> list[dict[str, Any]]:
    """Run the plans of earlier eval records again, each changed by ``change``; return new records of the same shape.

    Each record's ``orchestration`` is parsed with ``registry`` (a plan that does not parse stays
    ``invalid_spec``), changed, executed on ``subagent`` and graded against its ``truth``. Summarise the result
    with :func:`mas_orchestra.bench.evaluation.summary.summarize`.

    Args:
        records: eval records (``results.jsonl`` lines) of a high-DoM run.
        change: the plan's new form from its spec and the record's key (``"<id>#<sample>"``, e.g. a seed).
        label: what the change is, kept in each record's ``control``.
        subagent: the sub-agent model (or model string) the plans run on.
        registry: the agent kinds the plans were written with.
        grader: the grading kind of the original eval.
        settings: run bounds (:class:`~mas_orchestra.settings.RunSettings`; default its defaults).

    Returns:
        One record per input record, with ``status``, ``correct``, ``answer``, ``usage``, ``spec`` (the
        changed spec) and ``control``.
    """
    from mas_orchestra.bench.grading import agrade
    from mas_orchestra.models import resolve_model
    from mas_orchestra.runtime import execute_spec
    from mas_orchestra.spec import parse_orchestration

    model = resolve_model(subagent)
    out: list[dict[str, Any]] = []
    for record in records:
        base = {"id": record["id"], "sample": record.get("sample", 0), "question": record["question"],
                "truth": record.get("truth"), "control": label, "orchestration": record.get("orchestration")}
        try:
            spec = parse_orchestration(record.get("orchestration") or "", registry=registry)
        except SpecError as exc:
            out.append({**base, "status": "invalid_spec", "valid": False, "correct": False, "answer": None,
                        "usage": {}, "spec": None, "error": str(exc)})
            continue
        spec = change(spec, f"{record['id']}#{base['sample']}")
        outcome = await execute_spec(spec, record["question"], model=model, registry=registry, settings=settings)
        truth = record.get("truth")
        correct = bool(outcome.answer is not None and truth is not None
                       and await agrade(outcome.answer, truth, grader, question=record["question"]))
        out.append({**base, "status": outcome.status.value, "valid": True, "correct": correct,
                    "answer": outcome.answer, "usage": outcome.usage.model_dump(mode="json"),
                    "spec": spec.model_dump(mode="json"), "error": outcome.error})
    return out
