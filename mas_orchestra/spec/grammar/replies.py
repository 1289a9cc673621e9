"""The grammar of a sub-agent reply: ``<thinking>…</thinking>`` and a non-empty ``<answer>…</answer>``."""

from __future__ import annotations

from typing import Any

from mas_orchestra.spec.grammar.ebnf import lit, text_rule

__all__ = ["REPLY_CLOSE", "REPLY_END", "REPLY_EXAMPLE", "reply_closing_grammar", "reply_grammar", "reply_json_schema"]

#: Between the reasoning and the answer of a sub-agent reply, and after the answer.
REPLY_CLOSE = "</thinking>\n<answer>"


REPLY_END = "</answer>"


def reply_grammar(thinking_chars: int = 600, answer_chars: int = 200) -> str:
    """EBNF of the sub-agent reply contract ``<thinking>…</thinking>`` + non-empty ``<answer>…</answer>``.

    Args:
        thinking_chars: Characters of the reasoning at most.
        answer_chars: Characters of the answer at most.

    Returns:
        The grammar text.
    """
    if thinking_chars < 1 or answer_chars < 1:
        raise ValueError("thinking_chars and answer_chars must be >= 1")
    return f'root ::= "<thinking>" {text_rule(thinking_chars)} {reply_closing_grammar(REPLY_CLOSE, answer_chars)}\n'


def reply_closing_grammar(close: str, answer_chars: int) -> str:
    """The end of a reply from inside the reasoning: ``close`` (the rest of :data:`REPLY_CLOSE`), a non-empty
    answer of at most ``answer_chars`` characters and :data:`REPLY_END` (an expression, no rule name).

    Args:
        close: The rest of :data:`REPLY_CLOSE` still to write.
        answer_chars: Most characters of the answer.
    """
    return f"{lit(close)} {text_rule(answer_chars, first_nonspace=True)} {lit(REPLY_END)}"


#: A complete reply in the contract, shown where a format is described (schema descriptions, docs) instead of
#: placeholder text a small model would copy as its answer (the sub-agent prompts carry the same example).
REPLY_EXAMPLE = {"thinking": "Each spider has 8 legs, so 3 spiders have 3 × 8 = 24 legs.", "answer": "24"}


def reply_json_schema() -> dict[str, Any]:
    """JSON schema of the reply contract for ``response_format`` APIs (``{"thinking", "answer"}``).

    The field descriptions give a worked example (:data:`REPLY_EXAMPLE`), not placeholder wording.
    """
    thinking, answer = REPLY_EXAMPLE["thinking"], REPLY_EXAMPLE["answer"]
    example = f'for "A spider has 8 legs. How many legs do 3 spiders have?": thinking "{thinking}", answer "{answer}"'
    return {
        "type": "object",
        "properties": {
            "thinking": {"type": "string", "description": f"The step-by-step reasoning; {example}."},
            "answer": {"type": "string", "description": "Only the final answer to this task, e.g. 24 in the example "
                       "of the reasoning's description."},
        },
        "required": ["thinking", "answer"],
        "additionalProperties": False,
    }
