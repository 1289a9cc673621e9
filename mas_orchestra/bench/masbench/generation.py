"""MASBench generation: one row per (axis, value, index), deterministic for a seed (see the package docstring)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from mas_orchestra.bench.masbench.graph import (
    AXES,
    MAX_VALUE,
    MIN_VALUE,
    MOD,
    MULTI_ANSWER_AXES,
    OPS,
    SPLITS,
    ancestors,
    check_choice,
    evaluate,
)
from mas_orchestra.bench.masbench.templates import SPLIT_TEXT, Template, templates

__all__ = ["generate"]

def _join_and(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


class _Problem:
    """Builds one problem's graph inside a row-wide namespace, remembering the phrasing of each node."""

    def __init__(self, rng: random.Random, tpl: Template, graph: dict[str, dict[str, Any]]) -> None:
        self.rng = rng
        self.tpl = tpl
        self.graph = graph  # shared across the row's problems so names stay unique
        self.nodes: list[str] = []
        self.depth: dict[str, int] = {}

    def _new_name(self) -> str:
        tpl, rng = self.tpl, self.rng
        # 720 names per template; a row uses at most a few hundred, so retries end quickly.
        while True:
            name = tpl.name_format.format(a=rng.choice(tpl.a), b=rng.choice(tpl.b), c=rng.choice(tpl.c))
            if name not in self.graph:
                return name

    def const(self) -> str:
        name = self._new_name()
        self.graph[name] = {"op": "const", "value": self.rng.randint(0, MOD - 1)}
        self.nodes.append(name)
        self.depth[name] = 0
        return name

    def op(self, inputs: list[str], op: str | None = None) -> str:
        name = self._new_name()
        self.graph[name] = {"op": op or self.rng.choice(OPS), "inputs": inputs}
        self.nodes.append(name)
        self.depth[name] = 1 + max(self.depth.get(x, 0) for x in inputs)
        return name

    def chain(
        self,
        depth: int,
        *,
        fan: tuple[int, int] = (2, 3),
        wide: int | None = None,
        reuse: float = 0.3,
        leaf: str | None = None,
        leaf_depth: int = 0,
    ) -> str:
        """A target whose longest operation chain is ``depth`` (counted from ``leaf``, if given).

        Each level is one operation over the previous level plus side inputs: reused nodes of this
        problem (whose depth is below the level, so the longest chain stays exactly ``depth``), fresh
        constants or small fresh operations. ``wide`` makes one level take exactly that many inputs.
        """
        rng = self.rng
        prev = leaf if leaf is not None else self.const()
        if leaf is not None:
            self.depth[leaf] = leaf_depth
        wide_level = rng.randint(1, depth) if wide else -1
        for level in range(1, depth + 1):
            k = wide if wide is not None and level == wide_level else rng.randint(*fan)
            inputs = [prev]
            while len(inputs) < k:
                roll = rng.random()
                pool = [n for n in self.nodes if n not in inputs]
                if roll < reuse and pool:
                    inputs.append(rng.choice(pool))
                elif roll < reuse + 0.15 and level >= 2:
                    inputs.append(self.op([self.const(), self.const()]))
                else:
                    inputs.append(self.const())
            rng.shuffle(inputs)
            prev = self.op(inputs)
        return prev

    def extras(self, count: int) -> None:
        """Quantities the answer does not need: a model must not assume every sentence matters."""
        for _ in range(count):
            if self.rng.random() < 0.5 or len(self.nodes) < 2:
                self.const()
            else:
                self.op(self.rng.sample(self.nodes, 2))

    def sentences(self, refs: dict[str, str]) -> list[str]:
        """One defining sentence per node of this problem, shuffled."""
        out = []
        for name in self.nodes:
            out.append(_sentence(self.rng, self.tpl, name, self.graph[name], refs))
        self.rng.shuffle(out)
        return out


def _sentence(rng: random.Random, tpl: Template, name: str, node: dict[str, Any], refs: dict[str, str]) -> str:
    q = "the " + name

    def ref(x: str) -> str:
        return "the " + x + refs.get(x, "")

    fields: dict[str, str] = {"q": q, "Q": _cap(q)}
    if node["op"] == "const":
        fields["v"] = str(node["value"])
        pattern = rng.choice(tpl.const)
    else:
        names = [ref(x) for x in node["inputs"]]
        fields["L"] = _join_and(names)
        fields["F"] = names[0]
        fields["Ra"] = _join_and(names[1:])
        fields["Rm"] = " minus ".join(names[1:])
        pattern = rng.choice(getattr(tpl, node["op"]))
    return _cap(pattern.format(**fields))


def _row_rng(seed: int, axis: str, split: str, value: int, index: int) -> random.Random:
    # A string seed is hashed with SHA-512 by random.Random: stable across runs and Python versions,
    # unlike hash(), which is salted per process.
    return random.Random(f"masbench|{seed}|{axis}|{split}|{value}|{index}")


def _make_row(axis: str, value: int, split: str, seed: int, index: int) -> dict[str, Any]:
    rng = _row_rng(seed, axis, split, value, index)
    tpl = rng.choice(templates(split))
    text = SPLIT_TEXT[split]
    graph: dict[str, dict[str, Any]] = {}
    targets: list[str] = []
    distractors: list[dict[str, Any]] = []
    blocks: list[list[str]] = []  # sentences per problem, the ask last
    refs: dict[str, str] = {}

    if axis in ("depth", "breadth", "robustness"):
        p = _Problem(rng, tpl, graph)
        if axis == "depth":
            targets.append(p.chain(value))
        elif axis == "breadth":
            fan_hi = min(3, value)
            targets.append(p.chain(rng.randint(2, 4), fan=(2, fan_hi), wide=value))
        else:
            # No reuse, so the answer needs at least 1 + 2 * depth distinct quantities: enough for
            # `value` notes about different quantities.
            depth = max(rng.randint(2, 4), math.ceil((value - 1) / 2))
            targets.append(p.chain(depth, reuse=0.0))
        p.extras(rng.randint(0, 2))
        body = p.sentences(refs)
        if axis == "robustness":
            values = evaluate(graph)
            needed = sorted(ancestors(graph, targets[0]), key=p.nodes.index)
            for name in rng.sample(needed, value):
                claimed = rng.choice([v for v in range(MOD) if v != values[name]])
                distractors.append({"quantity": name, "claimed": claimed})
                body.append(rng.choice(text.notes).format(q="the " + name, v=claimed))
            fill = min(len(text.fillers), value + rng.randint(1, 3))
            body.extend(rng.sample(text.fillers, fill))
            rng.shuffle(body)
        blocks.append([*body, tpl.ask.format(q="the " + targets[0])])
    else:
        prev: str | None = None
        prev_depth = 0
        for i in range(value):
            p = _Problem(rng, tpl, graph)
            if axis == "parallel":
                target = p.chain(rng.randint(2, 4))
            else:
                target = p.chain(rng.randint(1, 3), leaf=prev, leaf_depth=prev_depth)
                if prev is not None:
                    refs[prev] = f" ([answer{i}])"
                prev_depth = p.depth[target]
            p.extras(rng.randint(0, 1))
            blocks.append([*p.sentences(refs), tpl.ask.format(q="the " + target)])
            targets.append(target)
            prev = target

    values = evaluate(graph)
    answers = [str(values[t]) for t in targets]
    if axis in MULTI_ANSWER_AXES:
        parts = [tpl.intro]
        if axis == "horizon" and value > 1:
            parts.append(text.horizon_hint)
        head = " ".join(parts)
        body_text = "\n\n".join(
            text.problem_header.format(i=i) + " " + " ".join(b) for i, b in enumerate(blocks, 1)
        )
        question = f"{head}\n\n{body_text}\n\n{text.multi_instruction}"
        answer: str | list[str] = answers
    else:
        question = f"{tpl.intro} {' '.join(blocks[0])} {text.single_instruction}"
        answer = answers[0]

    return {
        "id": f"masbench-{axis}-{split}-v{value}-{index:04d}",
        "axis": axis,
        "value": value,
        "split": split,
        "template_id": tpl.id,
        "question": question,
        "answer": answer,
        "targets": targets,
        "graph": graph,
        "distractors": distractors,
    }


def generate(axis: str, values: list[int], n: int, seed: int, split: str = "test") -> list[dict[str, Any]]:
    """``n`` problems for each of ``values`` on ``axis``; deterministic for a given ``seed``.

    Args:
        axis: ``breadth``, ``depth``, ``horizon``, ``parallel`` or ``robustness``.
        values: The axis values (each in ``MIN_VALUE[axis]..MAX_VALUE``).
        n: Problems per value.
        seed: The random seed.
        split: ``train`` or ``test`` (the splits share no template, entity word or phrasing).

    Returns:
        Rows with ``id``, ``question``, ``answer``, ``axis``, ``value``, ``split``, the template, the targets,
        the graph and the distractors.

    Raises:
        ValueError: An unknown axis or split, a value out of range, or ``n < 1``.
    """
    check_choice("axis", axis, AXES)
    check_choice("split", split, SPLITS)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not values:
        raise ValueError("values must be a non-empty list of integers")
    lo = MIN_VALUE[axis]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= MAX_VALUE:
            raise ValueError(f"{axis} values must be integers in {lo}..{MAX_VALUE}, got {v!r}")
    return [_make_row(axis, v, split, seed, i) for v in values for i in range(n)]
