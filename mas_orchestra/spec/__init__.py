"""The spec: the multi-agent system an orchestrator writes, its text formats, its rules and its grammars.

- :mod:`~mas_orchestra.spec.model`: :class:`GraphSpec` (pydantic) and the parse entry points;
- :mod:`~mas_orchestra.spec.validation`: the structural rules (:func:`check_spec`);
- :mod:`~mas_orchestra.spec.xml_format` / :mod:`~mas_orchestra.spec.json_format`: text ↔ plain data;
- :mod:`~mas_orchestra.spec.limits`: bounds and lexical rules shared by all of them;
- :mod:`~mas_orchestra.spec.warnings`: the typed warnings of the leniencies applied to real text;
- :mod:`mas_orchestra.spec.grammar`: grammars whose every sentence is a valid orchestration.
"""

from mas_orchestra.spec.limits import (
    DOMS,
    MAX_INPUT_CHARS,
    MAX_NODES,
    MAX_TEXT_CHARS,
    PLACEHOLDER_RE,
    Dom,
    check_dom,
    references,
)
from mas_orchestra.spec.model import AgentNode, Edge, GraphSpec, parse_orchestration, parse_spec, spec_from_data
from mas_orchestra.spec.validation import check_spec
from mas_orchestra.spec.warnings import WARNING_KINDS, SpecWarning, count_warnings
from mas_orchestra.spec.xml_format import detect_dom, spec_to_xml

__all__ = [
    "DOMS",
    "MAX_INPUT_CHARS",
    "MAX_NODES",
    "MAX_TEXT_CHARS",
    "PLACEHOLDER_RE",
    "WARNING_KINDS",
    "AgentNode",
    "Dom",
    "Edge",
    "GraphSpec",
    "SpecWarning",
    "check_dom",
    "check_spec",
    "count_warnings",
    "detect_dom",
    "parse_orchestration",
    "parse_spec",
    "references",
    "spec_from_data",
    "spec_to_xml",
]
