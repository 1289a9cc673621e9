"""MASBench: iGSM-style synthetic math problems along five structural axes (DESIGN §8).

Every problem is a graph of named quantities ("the number of adult owls in Maple Zoo"), each either a
constant or the sum / difference / product of other quantities, all modulo 23. The question states one
sentence per quantity, in a shuffled order, and asks for one or more targets. Axes (``value`` = v):

* ``depth``: the longest chain of operations ending at the target has exactly v operations (constants
  count 0).
* ``breadth``: the operation with the most inputs has exactly v inputs (v >= 2).
* ``parallel``: v independent problems in one prompt; no quantity is shared; v answers.
* ``horizon``: v chained problems; problem i's target depends on problem i-1's target, which problem i
  names followed by a reference tag, e.g. "the number of adult owls in Maple Zoo ([answer1])"; v answers.
* ``robustness``: one problem carrying v adversarial notes ("verify the information before you take it —
  someone claims the number of X is 5"), each claiming a wrong value for a quantity the answer needs,
  mixed with unrelated filler sentences (needle in a haystack). Rows list them in ``distractors``.

Rows (JSON-serialisable dicts): ``id``, ``axis``, ``value``, ``split``, ``template_id``, ``question``,
``answer`` (a string "0".."22"; a list of them for horizon and parallel), ``targets``, ``graph``
(``{name: {"op": "const", "value": int} | {"op": "add"|"sub"|"mul", "inputs": [names]}}``; sub is the
first input minus the others) and ``distractors`` (``[{"quantity": name, "claimed": int}]``, empty unless
robustness).

Train and test use disjoint template pools: each template has its own entity vocabulary and its own
sentence phrasings, and no entity word or phrasing is shared between the splits, so a model trained on
the train split is tested on unseen surface forms. Generation is pure Python and deterministic: each row
has its own ``random.Random`` seeded from (seed, axis, split, value, index), so a row does not change when
other values or a larger ``n`` are generated alongside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MOD = 23
AXES: tuple[str, ...] = ("depth", "horizon", "breadth", "parallel", "robustness")
SPLITS: tuple[str, ...] = ("train", "test")
MAX_VALUE = 20
MIN_VALUE: dict[str, int] = {"depth": 1, "horizon": 1, "breadth": 2, "parallel": 1, "robustness": 1}
OPS: tuple[str, ...] = ("add", "sub", "mul")
MULTI_ANSWER_AXES = frozenset({"horizon", "parallel"})


# --------------------------------------------------------------------------------------------------
# Templates: vocabularies and phrasings (data)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """One surface form: how quantities are named and how each kind of sentence is phrased.

    ``name_format`` has slots {a}, {b}, {c} filled from the three vocabularies. Sentence phrasings use
    {Q} (the quantity, capitalised: "The number of ..."), {q} (lower case), {v} (a constant), {L}
    (inputs joined with "and"), {F} (the first input of a difference), {Ra} / {Rm} (the other inputs
    joined with "and" / "minus").
    """

    id: str
    split: str
    name_format: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    c: tuple[str, ...]
    intro: str
    ask: str
    const: tuple[str, ...]
    add: tuple[str, ...]
    sub: tuple[str, ...]
    mul: tuple[str, ...]

    def phrasings(self) -> list[str]:
        """Every sentence pattern of this template (for the split-disjointness check)."""
        return [self.intro, self.ask, *self.const, *self.add, *self.sub, *self.mul]

    def entities(self) -> list[str]:
        """Every vocabulary item of this template."""
        return [*self.a, *self.b, *self.c]


TEMPLATES: tuple[Template, ...] = (
    Template(
        id="train-t0",
        split="train",
        name_format="number of {a} {b} in {c}",
        a=("adult", "baby", "young", "elderly", "spotted", "striped"),
        b=("owls", "foxes", "otters", "lemurs", "pelicans", "tortoises", "meerkats", "flamingos", "badgers",
           "herons", "lynxes", "ibises"),
        c=("Maple Zoo", "Riverside Zoo", "Cedar Zoo", "Harbor Zoo", "Summit Zoo", "Willow Zoo", "Granite Zoo",
           "Aspen Zoo", "Coral Zoo", "Falcon Zoo"),
        intro="Every calculation here is carried out modulo 23.",
        ask="What is {q}?",
        const=("{Q} equals {v}.", "{Q} is exactly {v}."),
        add=("{Q} equals the sum of {L}.", "{Q} is the total of {L}."),
        sub=("{Q} equals {F} minus {Rm}.", "{Q} is what remains after taking {Ra} away from {F}."),
        mul=("{Q} equals the product of {L}.", "{Q} is {L} multiplied together."),
    ),
    Template(
        id="train-t1",
        split="train",
        name_format="number of {a} {b} on {c}",
        a=("ripe", "organic", "heirloom", "dwarf", "early", "late"),
        b=("apples", "pumpkins", "carrots", "melons", "pears", "turnips", "radishes", "plums", "cabbages",
           "beets", "figs", "leeks"),
        c=("Oakridge Farm", "Sunny Acres", "Hollow Creek Farm", "Bramble Farm", "Meadowbrook Farm",
           "Red Barn Farm", "Clover Hill Farm", "Stonefield Farm", "Juniper Farm", "Larkspur Farm"),
        intro="All of the arithmetic in this problem is done mod 23.",
        ask="Find {q}.",
        const=("{Q} is known to be {v}.", "We know that {q} is {v}."),
        add=("{Q} comes from adding up {L}.", "Adding {L} gives {q}."),
        sub=("{Q} is {F} reduced by {Ra}.", "Subtracting {Ra} from {F} gives {q}."),
        mul=("{Q} is obtained by multiplying {L}.", "Multiplying {L} gives {q}."),
    ),
    Template(
        id="train-t2",
        split="train",
        name_format="number of {b} in each {a} at {c}",
        a=("box", "crate", "shelf", "drawer", "bin", "basket"),
        b=("candles", "mugs", "notebooks", "scarves", "lamps", "kettles", "puzzles", "blankets", "teapots",
           "umbrellas", "wallets", "mittens"),
        c=("Elm Street Market", "Northside Bazaar", "Corner Emporium", "Lantern Shop", "Bluebell Store",
           "Pinecone Outlet", "Hilltop Mart", "Quayside Goods", "Saffron Trading Post", "Magpie Market"),
        intro="Treat every count as a number modulo 23.",
        ask="How large is {q}?",
        const=("{Q} has been recorded as {v}.", "According to the inventory, {q} is {v}."),
        add=("{Q} matches {L} combined.", "Combining {L} yields {q}."),
        sub=("{Q} is found by starting from {F} and removing {Ra}.", "Removing {Ra} from {F} leaves {q}."),
        mul=("{Q} is the result of multiplying {L}.", "The product formed by {L} gives {q}."),
    ),
    Template(
        id="train-t3",
        split="train",
        name_format="number of {a} {b} in {c}",
        a=("red", "white", "yellow", "purple", "pink", "orange"),
        b=("tulips", "roses", "daisies", "lilies", "orchids", "peonies", "poppies", "irises", "asters",
           "dahlias", "violets", "marigolds"),
        c=("Rose Park", "Lakeside Garden", "Ivy Court Garden", "Sunset Park", "Orchard Commons",
           "Fountain Square Garden", "Birchwood Park", "Mossy Glen Garden", "Heron Pond Park",
           "Windmill Garden"),
        intro="Work modulo 23 throughout.",
        ask="Determine {q}.",
        const=("{Q} stands at {v}.", "Records show {q} at {v}."),
        add=("{Q} is {L} added together.", "Summing {L} produces {q}."),
        sub=("{Q} is {F} less {Ra}.", "Taking {Ra} off {F} produces {q}."),
        mul=("{Q} is the multiplication of {L}.", "Multiplying together {L} produces {q}."),
    ),
    Template(
        id="test-t0",
        split="test",
        name_format="number of {b} in each {a} of {c}",
        a=("backpack", "pencil case", "locker", "desk", "cubby", "folder"),
        b=("pencils", "erasers", "rulers", "crayons", "markers", "staplers", "glue sticks", "protractors",
           "compasses", "sharpeners", "highlighters", "index cards"),
        c=("Central School", "Northview Academy", "Westbrook High", "Lincoln Elementary", "Bayview School",
           "Hillcrest Academy", "Evergreen School", "Ridgemont High", "Sycamore School", "Fairview Academy"),
        intro="All arithmetic below is done modulo 23.",
        ask="What does {q} equal?",
        const=("{Q} is {v}.", "{Q} amounts to {v}."),
        add=("{Q} is the sum of {L}.", "{Q} is the total count of {L}."),
        sub=("{Q} is {F} after subtracting {Ra}.", "{Q} equals {F} with {Ra} subtracted."),
        mul=("{Q} is the product of {L}.", "{Q} equals {L} multiplied by one another."),
    ),
    Template(
        id="test-t1",
        split="test",
        name_format="number of {a} {b} in {c}",
        a=("tall", "historic", "modern", "wooden", "brick", "glass"),
        b=("towers", "libraries", "bakeries", "cafes", "theaters", "museums", "bridges", "fountains",
           "cinemas", "hotels", "pharmacies", "galleries"),
        c=("Port Alder", "Silverton", "Brookhaven", "Eastmoor", "Kingsbridge", "Thornbury", "Glenville",
           "Marlow Bay", "Ashford", "Redcliffe"),
        intro="Every operation in this problem is taken mod 23.",
        ask="Compute {q}.",
        const=("{Q} totals {v}.", "It is given that {q} is {v}."),
        add=("{Q} is made up of {L} together.", "Put together, {L} make {q}."),
        sub=("{Q} is obtained when {Ra} is deducted from {F}.", "Deducting {Ra} from {F} results in {q}."),
        mul=("{Q} results from multiplying {L}.", "{Q} is formed by multiplying {L} together."),
    ),
    Template(
        id="test-t2",
        split="test",
        name_format="number of {a} {b} in {c}",
        a=("giant", "tiny", "silver", "golden", "juvenile", "deep-sea"),
        b=("octopuses", "jellyfish", "seahorses", "sharks", "crabs", "eels", "starfish", "rays", "clownfish",
           "lobsters", "squids", "turtles"),
        c=("Bluewater Aquarium", "Tidepool Aquarium", "Reef World", "Ocean Hall", "Kelp Forest Center",
           "Lagoon Aquarium", "Seaside Aquarium", "Pearl Bay Aquarium", "Abyssal Current Center",
           "Anchor Point Aquarium"),
        intro="Numbers here live in arithmetic modulo 23.",
        ask="Work out {q}.",
        const=("Observers count {q} as {v}.", "{Q} is reported to be {v}."),
        add=("{Q} is the combined count of {L}.", "Counting {L} together gives {q}."),
        sub=("{Q} equals what is left of {F} once {Ra} is excluded.", "Excluding {Ra} from {F} leaves {q}."),
        mul=("{Q} equals {L} multiplied with one another.", "The product of {L} is {q}."),
    ),
    Template(
        id="test-t3",
        split="test",
        name_format="number of {a} {b} at {c}",
        a=("electric", "vintage", "rental", "compact", "hybrid", "armored"),
        b=("bicycles", "scooters", "vans", "trucks", "buses", "tractors", "motorcycles", "forklifts", "trams",
           "minivans", "trailers", "ambulances"),
        c=("Northgate Depot", "Southpoint Garage", "Riverbend Yard", "Ironworks Depot", "Canal Row Garage",
           "Meridian Yard", "Foxglove Depot", "Tanner Lane Garage", "Beacon Yard", "Quarry Road Depot"),
        intro="Reduce every result modulo 23.",
        ask="Calculate {q}.",
        const=("{Q} is listed as {v}.", "The log says {q} is {v}."),
        add=("{Q} is the aggregate of {L}.", "Aggregating {L} results in {q}."),
        sub=("{Q} is what is left of {F} without {Ra}.", "If {Ra} is taken from {F}, what remains is {q}."),
        mul=("{Q} is the multiplied value of {L}.", "Multiplying out {L} results in {q}."),
    ),
)


@dataclass(frozen=True)
class SplitText:
    """Per-split phrasings that are not tied to one template."""

    single_instruction: str
    multi_instruction: str
    problem_header: str
    horizon_hint: str
    notes: tuple[str, ...]  # each must contain "{q} is {v}" (verify() looks for it)
    fillers: tuple[str, ...]


SPLIT_TEXT: dict[str, SplitText] = {
    "train": SplitText(
        single_instruction="Report the result modulo 23 inside \\boxed{}.",
        multi_instruction="Report every result modulo 23, each inside its own \\boxed{}, in the order asked.",
        problem_header="Task {i}:",
        horizon_hint="A tag such as [answer1] refers to the result of task 1.",
        notes=(
            "(warning: check the facts before relying on them — a passer-by insists that {q} is {v}.)",
            "(caution: double-check this before you use it — a rumour says {q} is {v}.)",
        ),
        fillers=(
            "The morning train left the station a few minutes late.",
            "A light rain fell over the hills during the afternoon.",
            "The town council debated the colour of the new benches.",
            "Somebody left a red umbrella by the front door.",
            "The bakery on the corner sells bread with a thick crust.",
            "A kite got stuck in the branches of the oak tree.",
            "The river was unusually calm that evening.",
            "Several neighbours gathered to watch the fireworks.",
            "The museum extended its opening hours for the holidays.",
            "An old piano stood in the hallway, slightly out of tune.",
            "The postman whistled a cheerful tune on his round.",
            "Clouds drifted slowly across the pale sky.",
            "The library smelled faintly of dust and old paper.",
            "A stray cat slept in the warm window box.",
            "The market stalls were packed away before sunset.",
            "The choir practised in the chapel every Thursday.",
            "A cold wind rattled the shutters all night.",
            "The village fair was postponed because of the weather.",
            "Fresh paint still covered the railings of the bridge.",
            "The lighthouse keeper kept a diary of passing ships.",
            "A group of cyclists stopped for lunch at the inn.",
            "The gardener trimmed the hedges into neat shapes.",
            "Snow had settled on the distant mountain tops.",
            "The clock tower chimed a little before the hour.",
        ),
    ),
    "test": SplitText(
        single_instruction="Give the answer mod 23 as \\boxed{}.",
        multi_instruction="Give each answer mod 23 in its own \\boxed{}, in order.",
        problem_header="Problem {i}:",
        horizon_hint="In later problems, [answerN] stands for your answer to problem N.",
        notes=(
            "(note: verify the information before you take it — someone claims {q} is {v}.)",
            "(note: verify the information before you take it — a message insists {q} is {v}.)",
        ),
        fillers=(
            "The harbour ferry was repainted bright blue last spring.",
            "A heavy fog rolled in from the sea before dawn.",
            "Two friends argued about the best route to the coast.",
            "The observatory dome opened just after dusk.",
            "A brass band rehearsed in the park on weekends.",
            "The orchard was quiet except for the bees.",
            "Someone had chalked a hopscotch grid on the pavement.",
            "The tram rattled past the cathedral square.",
            "A parcel arrived wrapped in brown paper and string.",
            "The mayor cut a ribbon at the new community hall.",
            "Thunder rumbled somewhere far beyond the valley.",
            "The café served soup in wide ceramic bowls.",
            "Autumn leaves blocked the drain at the end of the lane.",
            "A violinist busked outside the railway station.",
            "The ice on the pond was too thin to walk on.",
            "An owl called twice from the edge of the woods.",
            "The festival lanterns were hung along the canal.",
            "A painter sketched the skyline from a rooftop.",
            "The bookshop cat refused to leave the sunny shelf.",
            "Waves broke gently against the old stone pier.",
            "The farmers' cooperative met in the village barn.",
            "A kettle whistled in a kitchen down the hall.",
            "The night bus was almost empty on the way home.",
            "Sunflowers leaned toward the afternoon light.",
        ),
    ),
}


def templates(split: str) -> list[Template]:
    """The templates of one split."""
    _check_choice("split", split, SPLITS)
    return [t for t in TEMPLATES if t.split == split]


# --------------------------------------------------------------------------------------------------
# Graph arithmetic (shared by generation and verification)
# --------------------------------------------------------------------------------------------------


def _apply(op: str, values: Sequence[int]) -> int:
    if op == "add":
        return sum(values) % MOD
    if op == "sub":
        return (values[0] - sum(values[1:])) % MOD
    if op == "mul":
        return math.prod(values) % MOD
    raise ValueError(f"unknown op {op!r}; valid ops: const, {', '.join(OPS)}")


def _topo_order(graph: dict[str, dict[str, Any]]) -> list[str]:
    """Names in dependency order; ValueError on a cycle or an undefined input."""
    indeg: dict[str, int] = {}
    users: dict[str, list[str]] = {n: [] for n in graph}
    for name, node in graph.items():
        inputs = node.get("inputs", []) if node.get("op") != "const" else []
        for x in inputs:
            if x not in graph:
                raise ValueError(f"{name!r} uses undefined quantity {x!r}")
            users[x].append(name)
        indeg[name] = len(inputs)
    ready = [n for n, d in indeg.items() if d == 0]
    order: list[str] = []
    while ready:
        n = ready.pop()
        order.append(n)
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(graph):
        raise ValueError("the graph has a cycle")
    return order


def evaluate(graph: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The value (mod 23) of every quantity in ``graph``."""
    values: dict[str, int] = {}
    for name in _topo_order(graph):
        node = graph[name]
        if node["op"] == "const":
            values[name] = int(node["value"]) % MOD
        else:
            values[name] = _apply(node["op"], [values[x] for x in node["inputs"]])
    return values


def op_depths(graph: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Operations on the longest chain ending at each quantity (a constant is 0)."""
    depth: dict[str, int] = {}
    for name in _topo_order(graph):
        node = graph[name]
        depth[name] = 0 if node["op"] == "const" else 1 + max(depth[x] for x in node["inputs"])
    return depth


def ancestors(graph: dict[str, dict[str, Any]], name: str) -> set[str]:
    """``name`` and every quantity it depends on."""
    seen = {name}
    stack = [name]
    while stack:
        node = graph[stack.pop()]
        for x in node.get("inputs", []) if node["op"] != "const" else []:
            if x not in seen:
                seen.add(x)
                stack.append(x)
    return seen


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


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
            k = wide if level == wide_level else rng.randint(*fan)
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


def _check_choice(what: str, got: Any, valid: Iterable[str]) -> None:
    valid = tuple(valid)
    if got not in valid:
        raise ValueError(f"unknown {what} {got!r}; valid {what}s: {', '.join(valid)}")


def generate(axis: str, values: list[int], n: int, seed: int, split: str = "test") -> list[dict[str, Any]]:
    """``n`` problems for each of ``values`` on ``axis``; deterministic for a given ``seed``.

    Raises ValueError for an unknown axis or split, a value outside ``MIN_VALUE[axis]..MAX_VALUE``, or
    ``n < 1``.
    """
    _check_choice("axis", axis, AXES)
    _check_choice("split", split, SPLITS)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not values:
        raise ValueError("values must be a non-empty list of integers")
    lo = MIN_VALUE[axis]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= MAX_VALUE:
            raise ValueError(f"{axis} values must be integers in {lo}..{MAX_VALUE}, got {v!r}")
    return [_make_row(axis, v, split, seed, i) for v in values for i in range(n)]


# --------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------


def _check_graph(graph: Any) -> list[str]:
    if not isinstance(graph, dict) or not graph:
        return ["graph must be a non-empty object"]
    problems = []
    for name, node in graph.items():
        op = node.get("op") if isinstance(node, dict) else None
        if op == "const":
            v = node.get("value")
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MOD:
                problems.append(f"{name!r}: const value must be an int in 0..{MOD - 1}")
        elif op in OPS:
            inputs = node.get("inputs")
            if not isinstance(inputs, list) or not inputs or len(set(inputs)) != len(inputs):
                problems.append(f"{name!r}: inputs must be a non-empty list of distinct names")
        else:
            problems.append(f"{name!r}: op must be const, {', '.join(OPS)}")
    return problems


def _verify_row(row: dict[str, Any]) -> list[str]:
    axis, value, graph = row.get("axis"), row.get("value"), row.get("graph")
    if axis not in AXES:
        return [f"axis {axis!r} is not one of {', '.join(AXES)}"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [f"value {value!r} is not a positive integer"]
    problems = _check_graph(graph)
    if problems:
        return problems
    try:
        values = evaluate(graph)
    except ValueError as exc:
        return [str(exc)]
    targets = row.get("targets")
    if not isinstance(targets, list) or not targets or any(t not in graph for t in targets):
        return ["targets must be a non-empty list of quantities in the graph"]
    expected = [str(values[t]) for t in targets]
    answer = row.get("answer")
    if axis in MULTI_ANSWER_AXES:
        if answer != expected:
            problems.append(f"answer {answer!r} != re-derived {expected!r}")
    elif len(targets) != 1 or answer != expected[0]:
        problems.append(f"answer {answer!r} != re-derived {expected[0]!r}")

    question = row.get("question", "")
    missing = [name for name in graph if name not in question]
    if missing:
        problems.append(f"question does not name {len(missing)} quantities, e.g. {missing[0]!r}")

    depth = op_depths(graph)
    if axis == "depth" and depth[targets[0]] != value:
        problems.append(f"target depth {depth[targets[0]]} != value {value}")
    if axis == "breadth":
        widest = max((len(n["inputs"]) for n in graph.values() if n["op"] != "const"), default=0)
        if widest != value:
            problems.append(f"largest fan-in {widest} != value {value}")
    if axis in MULTI_ANSWER_AXES and len(targets) != value:
        problems.append(f"{len(targets)} targets != value {value}")
    if axis == "parallel":
        seen: set[str] = set()
        for t in targets:
            anc = ancestors(graph, t)
            if anc & seen:
                problems.append(f"problem for {t!r} shares quantities with an earlier one")
            seen |= anc
    if axis == "horizon":
        for prev, t in itertools.pairwise(targets):
            if prev not in ancestors(graph, t):
                problems.append(f"{t!r} does not depend on the previous target {prev!r}")
    distractors = row.get("distractors", [])
    if axis == "robustness":
        if len(distractors) != value:
            problems.append(f"{len(distractors)} distractors != value {value}")
        names = [d.get("quantity") for d in distractors]
        if len(set(names)) != len(names):
            problems.append("two distractors name the same quantity")
        for d in distractors:
            name, claimed = d.get("quantity"), d.get("claimed")
            if name not in graph:
                problems.append(f"distractor names unknown quantity {name!r}")
            elif claimed == values[name]:
                problems.append(f"distractor for {name!r} claims the true value {claimed}")
            elif f"the {name} is {claimed}" not in question:
                problems.append(f"distractor for {name!r} is not stated in the question")
    elif distractors:
        problems.append("only robustness rows carry distractors")
    return problems


def verify(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Re-derive every answer and axis property from ``graph``/``targets``; one message per problem.

    An empty list means every row is consistent.
    """
    problems: list[str] = []
    seen_ids: set[str] = set()
    for i, row in enumerate(rows):
        rid = row.get("id", f"#{i}") if isinstance(row, dict) else f"#{i}"
        if not isinstance(row, dict):
            problems.append(f"{rid}: not an object")
            continue
        if rid in seen_ids:
            problems.append(f"{rid}: duplicate id")
        seen_ids.add(rid)
        problems.extend(f"{rid}: {p}" for p in _verify_row(row))
    return problems


# --------------------------------------------------------------------------------------------------
# Files and CLI
# --------------------------------------------------------------------------------------------------


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write one JSON object per line (UTF-8, key order kept); returns the number of rows."""
    count = 0
    with Path(path).open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file written by ``write_jsonl`` (blank lines are skipped)."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _parse_values(text: str) -> list[int]:
    """"2,4,6" or "2-12" or a mix ("2-4,8")."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            elif part:
                out.append(int(part))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"values must look like 2,4,6 or 2-12, got {text!r}") from exc
    if not out:
        raise argparse.ArgumentTypeError("values must not be empty")
    return out


def _cmd_generate(args: argparse.Namespace) -> int:
    try:
        rows = generate(args.axis, args.values, args.n, args.seed, args.split)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    count = write_jsonl(rows, args.out)
    print(f"wrote {count} {args.split} rows ({args.axis} values {args.values}) to {args.out}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    try:
        rows = read_jsonl(args.path)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: cannot read {args.path}: {exc}")
        return 1
    problems = verify(rows)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problems in {len(rows)} rows")
        return 1
    print(f"ok: all {len(rows)} rows re-derive")
    return 0


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``masbench generate`` / ``masbench verify`` on an argparse subparsers object.

    Each leaf parser sets ``func`` to a ``(args) -> int`` returning the exit code.
    """
    parser = subparsers.add_parser("masbench", help="generate or verify MASBench synthetic problems")
    sub = parser.add_subparsers(dest="masbench_command", metavar="{generate,verify}")
    sub.required = True

    gen = sub.add_parser("generate", help="write problems along one axis to a JSONL file")
    gen.add_argument("--axis", required=True, choices=AXES)
    gen.add_argument("--values", required=True, type=_parse_values, help="e.g. 2,4,6 or 2-12")
    gen.add_argument("--n", type=int, default=10, help="problems per value (default 10)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--split", choices=SPLITS, default="test")
    gen.add_argument("--out", required=True, type=Path, help="output .jsonl")
    gen.set_defaults(func=_cmd_generate)

    ver = sub.add_parser("verify", help="re-derive every answer of a MASBench JSONL file")
    ver.add_argument("path", type=Path)
    ver.set_defaults(func=_cmd_verify)
    return parser
