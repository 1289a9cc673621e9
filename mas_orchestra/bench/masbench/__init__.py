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

from typing import TYPE_CHECKING

from agents.lazy import lazy_exports
from mas_orchestra.bench.masbench.cli import add_cli, read_jsonl, write_jsonl
from mas_orchestra.bench.masbench.generation import generate
from mas_orchestra.bench.masbench.graph import (
    AXES,
    MAX_VALUE,
    MIN_VALUE,
    MOD,
    MULTI_ANSWER_AXES,
    OPS,
    SPLITS,
    ancestors,
    evaluate,
    op_depths,
)
from mas_orchestra.bench.masbench.templates import SPLIT_TEXT, TEMPLATES, SplitText, Template, templates
from mas_orchestra.bench.masbench.verification import verify

if TYPE_CHECKING:
    from mas_orchestra.bench.masbench.calculator import MasbenchCalculator, TwoRoundCalculator

__all__ = [
    "AXES",
    "MAX_VALUE",
    "MIN_VALUE",
    "MOD",
    "MULTI_ANSWER_AXES",
    "OPS",
    "SPLITS",
    "SPLIT_TEXT",
    "TEMPLATES",
    "MasbenchCalculator",
    "SplitText",
    "Template",
    "TwoRoundCalculator",
    "add_cli",
    "ancestors",
    "evaluate",
    "generate",
    "op_depths",
    "read_jsonl",
    "templates",
    "verify",
    "write_jsonl",
]

# Imported on first use: the calculator is a LangChain chat model, which ``mas-orchestra masbench --help`` and the
# eval's official-data reader do not need.
__getattr__, __dir__ = lazy_exports(__name__, {
    "mas_orchestra.bench.masbench.calculator": ["MasbenchCalculator", "TwoRoundCalculator"],
})
