"""Grammars whose every sentence is a valid orchestration (or a well-formed sub-agent reply).

Constrained decoding makes even a 135M-parameter orchestrator write something the parser accepts. The
grammars are generated from the agent registry, as plain strings (nothing here imports xgrammar or torch):

- :mod:`~mas_orchestra.spec.grammar.ebnf`: the pieces (literals, bounded text, parameter values) and
  :class:`GrammarLimits`;
- :mod:`~mas_orchestra.spec.grammar.orchestration`: the orchestration grammar, in one piece and in the
  stages of local decoding (how far it goes into the validator's rules is documented there);
- :mod:`~mas_orchestra.spec.grammar.budget`: fitting each stage's text bounds to the tokens left;
- :mod:`~mas_orchestra.spec.grammar.replies`: the sub-agent reply contract;
- :mod:`~mas_orchestra.spec.grammar.json_schema`: the JSON-schema form for ``response_format`` APIs.
"""

from mas_orchestra.spec.grammar.ebnf import GrammarLimits, agent_id
from mas_orchestra.spec.grammar.json_schema import orchestration_json_schema
from mas_orchestra.spec.grammar.orchestration import (
    EDGE_MARKER,
    OpenInput,
    agent_markup_chars,
    agent_stage_grammar,
    agent_text_chars,
    edge_grammar,
    edges_chars,
    input_rest_grammar,
    input_rest_markup_chars,
    open_input,
    orchestration_grammar,
    params_text_chars,
    references_by_agent,
    thinking_grammar,
)
from mas_orchestra.spec.grammar.replies import (
    REPLY_CLOSE,
    REPLY_END,
    reply_closing_grammar,
    reply_grammar,
    reply_json_schema,
)

__all__ = [
    "EDGE_MARKER",
    "REPLY_CLOSE",
    "REPLY_END",
    "GrammarLimits",
    "OpenInput",
    "agent_id",
    "agent_markup_chars",
    "agent_stage_grammar",
    "agent_text_chars",
    "edge_grammar",
    "edges_chars",
    "input_rest_grammar",
    "input_rest_markup_chars",
    "open_input",
    "orchestration_grammar",
    "orchestration_json_schema",
    "params_text_chars",
    "references_by_agent",
    "reply_closing_grammar",
    "reply_grammar",
    "reply_json_schema",
    "thinking_grammar",
]
