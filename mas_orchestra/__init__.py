"""mas-orchestra: holistic multi-agent orchestration compiled to LangGraph."""

from mas_orchestra.errors import (
    CompileError,
    ConstrainedDecodingError,
    GrammarError,
    MasOrchestraError,
    MissingExtraError,
    SpecError,
)
from mas_orchestra.registry import AgentRegistry, default_registry, register_agent
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import AgentNode, Edge, GraphSpec, parse_orchestration, parse_spec
from mas_orchestra.status import Status

__all__ = [
    "AgentNode",
    "AgentRegistry",
    "CompileError",
    "ConstrainedDecodingError",
    "Edge",
    "GrammarError",
    "GraphSpec",
    "MasOrchestraError",
    "MissingExtraError",
    "Orchestra",
    "Outcome",
    "RunSettings",
    "SpecError",
    "Status",
    "compile_spec",
    "default_registry",
    "parse_orchestration",
    "parse_spec",
    "register_agent",
]


_LAZY = {"compile_spec": "mas_orchestra.compile", "Orchestra": "mas_orchestra.runtime.orchestra",
         "Outcome": "mas_orchestra.runtime.outcome"}


def __getattr__(name: str) -> object:  # these import LangGraph: load them on first use
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mas_orchestra' has no attribute {name!r}")
