"""Documented import path of MASBench: re-exports :mod:`mas_orchestra.bench.masbench`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.bench.masbench import (
    AXES,
    MAX_VALUE,
    MIN_VALUE,
    MOD,
    MULTI_ANSWER_AXES,
    OPS,
    SPLIT_TEXT,
    SPLITS,
    TEMPLATES,
    MasbenchCalculator,
    SplitText,
    Template,
    TwoRoundCalculator,
    add_cli,
    ancestors,
    evaluate,
    generate,
    op_depths,
    read_jsonl,
    templates,
    verify,
    write_jsonl,
)

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
