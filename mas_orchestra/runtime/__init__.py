"""The runtime: orchestrate, compile and run a multi-agent system, and account for what it did.

- :mod:`~mas_orchestra.runtime.orchestra`: :class:`Orchestra` (orchestrator → spec → graph → outcome);
- :mod:`~mas_orchestra.runtime.execute`: :func:`execute_spec` (run an already parsed spec);
- :mod:`~mas_orchestra.runtime.outcome`: :class:`Outcome` and the record of a run in progress;
- :mod:`~mas_orchestra.runtime.usage` / :mod:`~mas_orchestra.runtime.pricing`: calls, tokens, cost;
- :mod:`~mas_orchestra.runtime.pipeline` / :mod:`~mas_orchestra.runtime.threads` /
  :mod:`~mas_orchestra.runtime.checkpoint`: checkpointed runs (resume, approval, fork);
- :mod:`~mas_orchestra.runtime.cli`: ``mas-orchestra run``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.lazy import lazy_exports

if TYPE_CHECKING:
    from mas_orchestra.runtime.execute import execute_spec
    from mas_orchestra.runtime.orchestra import DEFAULT_CONSTRAINED_MAX_TOKENS, Orchestra
    from mas_orchestra.runtime.outcome import Outcome, whole_response_answer
    from mas_orchestra.status import Status

__all__ = ["DEFAULT_CONSTRAINED_MAX_TOKENS", "Orchestra", "Outcome", "Status", "execute_spec", "whole_response_answer"]

# Imported on first use: they load LangGraph, which ``mas-orchestra run --help`` (this package's cli) does not need.
__getattr__, __dir__ = lazy_exports(__name__, {
    "mas_orchestra.runtime.execute": ["execute_spec"],
    "mas_orchestra.runtime.orchestra": ["DEFAULT_CONSTRAINED_MAX_TOKENS", "Orchestra"],
    "mas_orchestra.runtime.outcome": ["Outcome", "whole_response_answer"],
    "mas_orchestra.status": ["Status"],
})
