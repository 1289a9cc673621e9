"""Documented import path of the grammars: re-exports :mod:`mas_orchestra.spec.grammar`.

The README, the training README or the notebooks import from here; new code imports from the new module.
"""

from mas_orchestra.spec.grammar import (
    EDGE_MARKER,
    REPLY_CLOSE,
    REPLY_END,
    GrammarLimits,
    agent_id,
    agent_markup_chars,
    agent_stage_grammar,
    agent_text_chars,
    edge_grammar,
    edges_chars,
    orchestration_grammar,
    orchestration_json_schema,
    references_by_agent,
    reply_closing_grammar,
    reply_grammar,
    reply_json_schema,
    thinking_grammar,
)

__all__ = [
    "EDGE_MARKER",
    "REPLY_CLOSE",
    "REPLY_END",
    "GrammarLimits",
    "agent_id",
    "agent_markup_chars",
    "agent_stage_grammar",
    "agent_text_chars",
    "edge_grammar",
    "edges_chars",
    "orchestration_grammar",
    "orchestration_json_schema",
    "references_by_agent",
    "reply_closing_grammar",
    "reply_grammar",
    "reply_json_schema",
    "thinking_grammar",
]
