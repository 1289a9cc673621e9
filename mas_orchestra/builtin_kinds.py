"""The names of the built-in agent kinds, importable without loading the agents.

The command line offers them as choices (``mas-orchestra eval --baseline``) and its ``--help`` must not load
LangChain to list them. :mod:`mas_orchestra.registry` defines the kinds themselves; a test checks that the names
here are theirs, in the same order.
"""

from __future__ import annotations

__all__ = ["BASELINE_KINDS"]

#: The single-agent baselines (the paper's CoT / SC / Reflexion / Debate / Search rows): one per built-in
#: agent kind, run alone on the whole question. ``graphs.baselines`` builds them and the eval runs them.
BASELINE_KINDS: tuple[str, ...] = ("cot", "sc", "reflexion", "debate", "search")
