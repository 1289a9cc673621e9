"""Documented import path of the data-row reader: re-exports :mod:`mas_orchestra.bench.datasets`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.bench.datasets import IdPolicy, check_row, read_rows, scalar_text

__all__ = [
    "IdPolicy",
    "check_row",
    "read_rows",
    "scalar_text",
]
