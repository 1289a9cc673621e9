"""Documented import path of Orchestra threads: re-exports :mod:`mas_orchestra.runtime.threads`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.runtime.threads import finished_nodes, thread_differences, thread_events

__all__ = [
    "finished_nodes",
    "thread_differences",
    "thread_events",
]
