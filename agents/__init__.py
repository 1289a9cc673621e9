"""Building blocks: the sub-agent call contract and the agent strategies.

This layer imports no other layer of mas-orchestra; each block works alone as a LangGraph node.
"""

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
