"""Documented import path of checkpoint stores: re-exports :mod:`mas_orchestra.runtime.checkpoint`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.runtime.checkpoint import (
    CHECKPOINT_TYPES,
    check_sqlite_file,
    checkpoint_serde,
    memory_checkpointer,
    open_async_sqlite_checkpointer,
    open_sqlite_checkpointer,
)

__all__ = [
    "CHECKPOINT_TYPES",
    "check_sqlite_file",
    "checkpoint_serde",
    "memory_checkpointer",
    "open_async_sqlite_checkpointer",
    "open_sqlite_checkpointer",
]
