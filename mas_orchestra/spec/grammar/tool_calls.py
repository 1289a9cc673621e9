"""The grammar of a tool agent's turn on a local model: the reply contract, or one text-protocol tool call.

A call is ``<tool_call>{"name": "<offered tool>", "arguments": {…}}</tool_call>`` with the tool's arguments in
order, each a JSON string, number, integer or boolean as its schema says — what
:func:`agents.tools.parse_tool_request` reads back. A tool with an argument of another type cannot be written
under the grammar and is left out (the model can still answer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mas_orchestra.spec.grammar.ebnf import lit, text_rule

__all__ = ["ToolSignature", "tool_call_grammar"]

#: ``(tool name, ((argument, JSON type), ...))``: what the grammar needs of a tool.
ToolSignature = tuple[str, tuple[tuple[str, str], ...]]

_NUMBER = '"-"? [0-9] [0-9]{0,11} ("." [0-9]{1,6})?'
_VALUES = {
    "integer": '"-"? [0-9] [0-9]{0,11}',
    "number": _NUMBER,
    "boolean": '("true" | "false")',
}


def _value(kind: str, chars: int) -> str | None:
    if kind == "string":
        return '"\\"" ' + text_rule(chars, exclude='"\\\\<\n') + ' "\\""'
    return _VALUES.get(kind)


def tool_call_grammar(tools: Sequence[ToolSignature], argument_chars: int = 120) -> str | None:
    """The alternatives of one tool call (an EBNF expression), or None when no tool can be written.

    Args:
        tools: The tools' names and (argument, JSON type) pairs; a tool with an argument of a type the grammar
            cannot write is left out.
        argument_chars: Most characters of a string argument.
    """
    calls = []
    for name, arguments in tools:
        values = [(arg, _value(kind, argument_chars)) for arg, kind in arguments]
        if any(v is None for _, v in values):
            continue
        body = ' ", " '.join(f"{lit(json.dumps(arg) + ': ')} {value}" for arg, value in values)
        head = lit('<tool_call>{"name": ' + json.dumps(name) + ', "arguments": {')
        calls.append(f"{head} {body} {lit('}}</tool_call>')}" if body else f"{head} {lit('}}</tool_call>')}")
    return "(" + " | ".join(calls) + ")" if calls else None
