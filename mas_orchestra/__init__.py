"""mas-orchestra: holistic multi-agent orchestration compiled to LangGraph."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mas_orchestra.package_check import check_agents_package

check_agents_package()  # before anything from `agents`: another distribution's `agents` fails here, clearly

from agents.lazy import lazy_exports  # noqa: E402

if TYPE_CHECKING:
    from mas_orchestra.compile import compile_spec
    from mas_orchestra.config import OrchestraConfig
    from mas_orchestra.errors import (
        CompileError,
        ConstrainedDecodingError,
        GrammarError,
        MasOrchestraError,
        MissingExtraError,
        SpecError,
    )
    from mas_orchestra.registry import AgentRegistry, default_registry, register_agent
    from mas_orchestra.runtime.orchestra import Orchestra
    from mas_orchestra.runtime.outcome import Outcome
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
    "OrchestraConfig",
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

# Imported on first use: the registry, the spec models and the runtime load LangChain, pydantic and LangGraph,
# which ``mas-orchestra --help`` (``import mas_orchestra.cli``) does not need.
__getattr__, __dir__ = lazy_exports(__name__, {
    "mas_orchestra.compile": ["compile_spec"],
    "mas_orchestra.config": ["OrchestraConfig"],
    "mas_orchestra.errors": ["CompileError", "ConstrainedDecodingError", "GrammarError", "MasOrchestraError",
                             "MissingExtraError", "SpecError"],
    "mas_orchestra.registry": ["AgentRegistry", "default_registry", "register_agent"],
    "mas_orchestra.runtime.orchestra": ["Orchestra"],
    "mas_orchestra.runtime.outcome": ["Outcome"],
    "mas_orchestra.settings": ["RunSettings"],
    "mas_orchestra.spec": ["AgentNode", "Edge", "GraphSpec", "parse_orchestration", "parse_spec"],
    "mas_orchestra.status": ["Status"],
})
