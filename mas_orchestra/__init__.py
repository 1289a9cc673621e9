"""mas-orchestra: holistic multi-agent orchestration compiled to LangGraph."""

from mas_orchestra.errors import CompileError, MissingExtraError, SpecError
from mas_orchestra.registry import AgentRegistry, default_registry, register_agent
from mas_orchestra.spec import AgentNode, Edge, GraphSpec, parse_spec
from mas_orchestra.xml_format import parse_orchestration

__all__ = [
    "AgentNode",
    "AgentRegistry",
    "CompileError",
    "Edge",
    "GraphSpec",
    "MissingExtraError",
    "SpecError",
    "compile_spec",
    "default_registry",
    "parse_orchestration",
    "parse_spec",
    "register_agent",
]


def __getattr__(name: str):  # compile_spec imports LangGraph; load it on first use
    if name == "compile_spec":
        from mas_orchestra.compile import compile_spec

        return compile_spec
    raise AttributeError(f"module 'mas_orchestra' has no attribute {name!r}")
