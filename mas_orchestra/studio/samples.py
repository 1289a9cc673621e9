"""The sample questions the live view offers, each with its expected answer.

MASBench problems are generated on the fly (deterministic, a few per axis; no data ships in the package);
``--data FILE`` adds the rows of any JSONL file with ``question`` and ``answer`` (e.g. a shared benchmark file).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from mas_orchestra.bench.datasets import read_rows
from mas_orchestra.bench.masbench import generate
from mas_orchestra.bench.masbench.graph import AXES, MIN_VALUE
from mas_orchestra.errors import DataError
from mas_orchestra.studio.common import StudioInputError, clip

__all__ = ["MAX_ROWS_PER_FILE", "load_samples"]

#: Rows offered per ``--data`` file (the picker is a list, not a browser).
MAX_ROWS_PER_FILE = 500


def _masbench() -> list[dict[str, Any]]:
    rows = []
    for axis in AXES:
        for row in generate(axis, [MIN_VALUE[axis], MIN_VALUE[axis] + 2], n=1, seed=0, split="test"):
            rows.append({"source": "MASBench", "id": row["id"], "label": f"{axis} {row['value']}",
                         "question": row["question"], "answer": row["answer"]})
    return rows


def load_samples(data_files: Sequence[str | os.PathLike[str]] = ()) -> list[dict[str, Any]]:
    """MASBench samples, then up to :data:`MAX_ROWS_PER_FILE` rows of each data file (numbered ``key``).

    Args:
        data_files: JSONL data files given with ``--data``.

    Raises:
        StudioInputError: A data file that cannot be read.
    """
    samples = _masbench()
    for file in data_files:
        try:
            rows = read_rows(file, ids="default", unique_ids=False)
        except DataError as exc:
            raise StudioInputError(f"--data {file}: {exc}") from None
        name = os.path.basename(os.fspath(file))
        samples += [{"source": name, "id": str(r["id"]), "label": clip(r["question"], 60), "question": r["question"],
                     "answer": r["answer"]} for r in rows[:MAX_ROWS_PER_FILE]]
    return [{"key": i, **s} for i, s in enumerate(samples)]
