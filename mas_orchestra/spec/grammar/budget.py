"""Fitting the stages of a staged orchestration to the tokens left.

Local decoding runs an orchestration in stages (:mod:`mas_orchestra.spec.grammar.orchestration`). Before each
stage, the functions here scale the text bounds so that the stage, the rest of its agent and the largest edge
block still fit the call's token budget: forced markup is counted at :data:`MARKUP_CHARS_PER_TOKEN` characters
per token or more, free text at one character per token or better (the decoder makes both true, see
:mod:`mas_orchestra.local.decoding`).

Nothing here imports xgrammar or torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mas_orchestra.registry import AgentKind, AgentRegistry
from mas_orchestra.spec.grammar.ebnf import GrammarLimits
from mas_orchestra.spec.grammar.orchestration import (
    OpenInput,
    agent_markup_chars,
    agent_text_chars,
    edges_chars,
    input_rest_markup_chars,
    params_text_chars,
)
from mas_orchestra.spec.limits import Dom

__all__ = ["MARKUP_CHARS_PER_TOKEN", "fit_agent", "fit_rest_of_input", "markup_tokens"]

#: Forced markup (tags) is assumed written at >= this many characters per token when a stage is fitted to
#: the token budget (canonical tokenizations of the tags do about 4); free text is counted at one per token.
MARKUP_CHARS_PER_TOKEN = 3

#: Tokens kept back on top of every fitting: the end-of-text token and slack.
_SLACK = 2


def markup_tokens(chars: int) -> int:
    """Tokens ``chars`` characters of forced markup take at most.

    Args:
        chars: Characters of markup.
    """
    return -(-chars // MARKUP_CHARS_PER_TOKEN)


def fit_agent(k: int, remaining: int | None, *, dom: Dom, registry: AgentRegistry | None,
              limits: GrammarLimits) -> tuple[GrammarLimits, bool]:
    """``limits`` scaled so that agent k and the largest edge block of k agents fit ``remaining`` tokens.

    Args:
        k: The agent's number (1-based).
        remaining: Tokens left (``None``: unbounded, ``limits`` as they are).
        dom: The degree of MAS.
        registry: The kinds offered.
        limits: The unscaled bounds.

    Returns:
        The scaled limits, and whether agent k fits at all.
    """
    if remaining is None:
        return limits, True
    markup = agent_markup_chars(k, dom, registry) + edges_chars(k if dom == "high" else 0)
    available = remaining - markup_tokens(markup) - _SLACK
    scale = min(1.0, max(0.0, available / agent_text_chars(registry, limits)))
    while True:  # shrink until it fits: per-item constants (list quotes) do not scale with the bounds
        scaled = _scaled(limits, scale, remaining)
        if agent_text_chars(registry, scaled) <= available or scale == 0.0:
            break
        scale = scale * 0.9 if scale > 0.01 else 0.0
    return scaled, agent_text_chars(registry, scaled) <= available


def fit_rest_of_input(opened: OpenInput, kind: AgentKind, remaining: int | None, stage_starts: Sequence[int], *,
                      dom: Dom, registry: AgentRegistry | None, limits: GrammarLimits) -> tuple[GrammarLimits, int]:
    """The bounds of the stage that continues an agent's input after a reference.

    The input keeps the bound its agent was fitted to when it began (each reference began one stage, so the
    agent's stage began ``opened.references`` stages ago); without that history, the bound a fresh agent would
    get now. Either way the rest of the input, the parameters, the closing markup and the largest edge block
    must fit the tokens left.

    Args:
        opened: Where the input stopped (:func:`~mas_orchestra.spec.grammar.orchestration.open_input`).
        kind: The agent's kind.
        remaining: Tokens left (``None``: unbounded).
        stage_starts: Tokens left when each stage so far began, oldest first.
        dom: The degree of MAS.
        registry: The kinds offered.
        limits: The unscaled bounds.

    Returns:
        The limits for the parameters, and the items (characters; a reference counts as one) the input may
        still take (``>= 0``).
    """
    k = opened.agent
    if remaining is None:
        return limits, max(0, limits.input_chars - opened.items)
    began = stage_starts[-opened.references] if len(stage_starts) >= opened.references else remaining
    scaled, _ = fit_agent(k, began, dom=dom, registry=registry, limits=limits)
    markup = input_rest_markup_chars(k, kind, dom) + edges_chars(k if dom == "high" else 0)
    available = remaining - markup_tokens(markup) - _SLACK
    items = min(scaled.input_chars - opened.items, available - params_text_chars(kind, scaled))
    return scaled, max(0, items)


def _scaled(limits: GrammarLimits, scale: float, remaining: int) -> GrammarLimits:
    def shrink(value: int) -> int:
        return max(1, int(value * scale))

    return replace(
        limits,
        description_chars=shrink(limits.description_chars),
        input_chars=shrink(limits.input_chars),
        string_param_chars=shrink(limits.string_param_chars),
        answer_chars=max(1, min(limits.answer_chars, remaining - 8)),
    )
