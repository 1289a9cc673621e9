"""Building blocks: the sub-agent call contract and the agent strategies.

This layer imports no other layer of mas-orchestra; each block works alone as a LangGraph node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.lazy import lazy_exports

#: Marks this package as mas-orchestra's layer (another distribution also installs a top-level ``agents``);
#: :func:`mas_orchestra.package_check.check_agents_package` looks for it.
__mas_orchestra__ = True

if TYPE_CHECKING:
    from agents.base import (
        Agent,
        AgentResult,
        CallLimiter,
        CallSettings,
        ModelUsage,
        Params,
        SubAgentError,
        SubAgentFormatError,
        Usage,
        ask,
        parse_reply,
    )
    from agents.cot import CoTAgent
    from agents.debate import DebateAgent
    from agents.errors import MasOrchestraError, MissingExtraError
    from agents.normalize import normalize_answer
    from agents.reflexion import ReflexionAgent
    from agents.self_consistency import SCAgent

__all__ = [
    "Agent",
    "AgentResult",
    "CallLimiter",
    "CallSettings",
    "CoTAgent",
    "DebateAgent",
    "MasOrchestraError",
    "MissingExtraError",
    "ModelUsage",
    "Params",
    "ReflexionAgent",
    "SCAgent",
    "SubAgentError",
    "SubAgentFormatError",
    "Usage",
    "ask",
    "normalize_answer",
    "parse_reply",
]

# Imported on first use: the strategies pull in LangChain, which a bare ``import agents.errors`` does not need.
__getattr__, __dir__ = lazy_exports(__name__, {
    "agents.base": ["Agent", "AgentResult", "CallLimiter", "CallSettings", "ModelUsage", "Params", "SubAgentError",
                    "SubAgentFormatError", "Usage", "ask", "parse_reply"],
    "agents.cot": ["CoTAgent"],
    "agents.debate": ["DebateAgent"],
    "agents.errors": ["MasOrchestraError", "MissingExtraError"],
    "agents.normalize": ["normalize_answer"],
    "agents.reflexion": ["ReflexionAgent"],
    "agents.self_consistency": ["SCAgent"],
})
