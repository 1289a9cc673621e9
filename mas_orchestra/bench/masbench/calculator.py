"""A deterministic MASBench sub-agent of bounded reasoning depth: a calculator over the text it is given.

``MasbenchCalculator`` is a LangChain chat model that reads MASBench sentences (every template's phrasings,
train and test) in the prompt it receives, plus facts of the form ``the <quantity> = <value>`` written by
earlier calls (its own replies, substituted into later prompts through ``${id}``, quoted by a Reflexion
critic or another debater), and carries out at most ``rounds`` rounds of arithmetic per call: in one round
every quantity whose inputs are all known is computed. It answers the quantity the task asks for if it is
known by then, otherwise ``unknown``.

It reads only the prompt text: no gold answer, no generator graph. With ``rounds=1`` a depth-d problem needs
d calls that see each other's results, so one CoT call or five independent SC samples solve depth 1 only,
while Reflexion (attempt → critic → refine, each seeing the previous text), Debate (each round sees the
previous round) or a chain of agents wired with ``${id}`` reach deeper. That makes the executed outcome depend
on the orchestration — the sub-agent stands in for a weak model that "MAS beats mostly where sub-agents are
weak" (DESIGN §8) — and it makes training runs cheap: a call costs microseconds and no tokens.

Use it as a sub-agent model string: ``python:mas_orchestra.bench.masbench:MasbenchCalculator`` (one round
per call) or ``python:mas_orchestra.bench.masbench:TwoRoundCalculator``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from agents.base import message_text
from mas_orchestra.bench.masbench.graph import MOD, apply_op
from mas_orchestra.bench.masbench.templates import TEMPLATES, Template

__all__ = ["MasbenchCalculator", "Problem", "TwoRoundCalculator", "parse_problem", "solve"]

UNKNOWN = "unknown"
_FACT_RE = re.compile(r"\bthe (number of [^=.\n]+?) = (\d+)")
_HORIZON_TAG = r"(?: \(\[answer\d+\]\))?"
_SENTENCE_SPLIT = re.compile(r"(?<=[.?!])\s+|\n+")


@dataclass
class Problem:
    """What one prompt states: constants, operations, facts derived earlier and the quantities asked for.

    Attributes:
        constants: Stated constants by quantity (mod 23).
        operations: Stated operations by quantity: the op and its inputs.
        facts: Values given as facts (results derived earlier) by quantity (mod 23).
        asks: The quantities asked for, in order.
    """

    constants: dict[str, int] = field(default_factory=dict)
    operations: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    facts: dict[str, int] = field(default_factory=dict)
    asks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Pattern:
    kind: str  # const | add | sub | mul | ask
    regex: re.Pattern[str]
    slots: tuple[str, ...]


def _name_regex(tpl: Template) -> str:
    def alternatives(words: Sequence[str]) -> str:
        return "(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + ")"

    body = re.escape(tpl.name_format)
    for slot, words in (("a", tpl.a), ("b", tpl.b), ("c", tpl.c)):
        body = body.replace(re.escape("{" + slot + "}"), alternatives(words))
    return body


def _compile(tpl: Template, kind: str, phrasing: str) -> _Pattern:
    name = _name_regex(tpl)
    one = f"[Tt]he {name}{_HORIZON_TAG}"
    joined_and = f"{one}(?:, {one})*(?: and {one})?"
    slot_regex = {
        "Q": f"The ({name}){_HORIZON_TAG}",
        "q": f"the ({name}){_HORIZON_TAG}",
        "v": r"(\d+)",
        "L": f"({joined_and})",
        "F": f"({one})",
        "Ra": f"({joined_and})",
        "Rm": f"({one}(?: minus {one})*)",
    }
    slots: list[str] = []
    regex = ""
    for piece in re.split(r"(\{[A-Za-z]+\})", phrasing):
        if piece.startswith("{") and piece.endswith("}"):
            slot = piece[1:-1]
            slots.append(slot)
            regex += slot_regex[slot]
        else:
            regex += re.escape(piece)
    # Sentences may start with a capitalised phrasing word ("Adding ...") and always end the sentence.
    return _Pattern(kind, re.compile("^" + regex + "$"), tuple(slots))


@cache
def _patterns() -> tuple[_Pattern, ...]:
    out: list[_Pattern] = []
    for tpl in TEMPLATES:
        for kind in ("const", "add", "sub", "mul"):
            for phrasing in getattr(tpl, kind):
                out.append(_compile(tpl, kind, phrasing[:1].upper() + phrasing[1:]))
        out.append(_compile(tpl, "ask", tpl.ask[:1].upper() + tpl.ask[1:]))
    return tuple(out)


@cache
def _names_in_list_regex() -> re.Pattern[str]:
    names = "|".join(f"(?:{_name_regex(t)})" for t in TEMPLATES)
    return re.compile(f"[Tt]he ({names})")


def _names(text: str) -> list[str]:
    return [m.group(1) for m in _names_in_list_regex().finditer(text)]


def _read_sentence(sentence: str, problem: Problem) -> None:
    for pattern in _patterns():
        match = pattern.regex.match(sentence)
        if not match:
            continue
        # Every slot is exactly one capturing group (names use non-capturing alternations only).
        values = dict(zip(pattern.slots, match.groups(), strict=True))
        target = values.get("Q") or values.get("q")
        if pattern.kind == "ask":
            if target and target not in problem.asks:
                problem.asks.append(target)
        elif pattern.kind == "const":
            if target is not None:
                problem.constants.setdefault(target, int(values["v"]) % MOD)
        elif target is not None:
            if "L" in values:
                inputs = _names(values["L"])
            else:
                inputs = _names(values["F"]) + _names(values.get("Ra") or values.get("Rm") or "")
            if inputs:
                problem.operations.setdefault(target, (pattern.kind, inputs))
        return


def parse_problem(text: str) -> Problem:
    """Every MASBench statement, earlier fact and question in ``text`` (first statement of a quantity wins).

    Parenthesised notes (MASBench robustness claims such as "(note: ... someone claims the number of X is
    5.)") are not statements and are skipped.

    Args:
        text: A prompt holding MASBench sentences.

    Returns:
        The problem it states.
    """
    problem = Problem()
    without_notes = re.sub(r"\([^()]*\)", lambda m: m.group(0) if "[answer" in m.group(0) else " ", text)
    for raw in _SENTENCE_SPLIT.split(without_notes):
        sentence = raw.strip().strip("\"'")
        sentence = re.sub(r"^(?:Task|Problem) \d+:\s*", "", sentence)
        if sentence:
            _read_sentence(sentence, problem)
    for name, value in _FACT_RE.findall(text):
        problem.facts.setdefault(name.strip(), int(value) % MOD)
    return problem


def solve(problem: Problem, rounds: int) -> tuple[dict[str, int], dict[str, int]]:
    """(everything known after ``rounds`` rounds, what these rounds derived), derived in computation order.

    Args:
        problem: What the prompt states.
        rounds: Rounds of arithmetic (each derives every quantity whose inputs are known).

    Returns:
        ``(everything known, what these rounds derived)``.
    """
    known = {**problem.constants, **problem.facts}
    derived: dict[str, int] = {}
    for _ in range(rounds):
        ready = {
            name: apply_op(op, [known[x] for x in inputs])
            for name, (op, inputs) in problem.operations.items()
            if name not in known and all(x in known for x in inputs)
        }
        if not ready:
            break
        known.update(ready)
        derived.update(ready)
    return known, derived


def _reply(text: str, rounds: int) -> str:
    problem = parse_problem(text)
    known, derived = solve(problem, rounds)
    # Everything derived so far (read from earlier replies or computed now) is written out again, so a
    # later call that sees only this reply (a refine step, a debate judge) keeps what was already known.
    carried = {name: value for name, value in known.items() if name not in problem.constants}
    lines = [f"the {name} = {value}" for name, value in carried.items()]
    thinking = (
        f"Computed {len(derived)} new value(s). Known: " + "; ".join(lines) + "."
        if lines
        else "Nothing can be derived from the text."
    )
    if not problem.asks:
        answer = UNKNOWN
    elif len(problem.asks) == 1:
        value = known.get(problem.asks[0])
        answer = UNKNOWN if value is None else str(value)
    else:
        answer = ", ".join(
            "\\boxed{" + (str(known[a]) if a in known else UNKNOWN) + "}" for a in problem.asks
        )
    return f"<thinking>{thinking}</thinking>\n<answer>{answer}</answer>"


class MasbenchCalculator(BaseChatModel):
    """Chat model that does at most ``rounds`` rounds of MASBench arithmetic per call (see the module doc).

    Temperature, stop sequences and other call options are accepted and ignored: the reply is a function of
    the prompt text alone. Token usage is reported as words in and out, like a provider would count them.
    """

    rounds: int = Field(default=1, ge=1, description="rounds of arithmetic one call may carry out")
    model_name: str = "masbench-calculator"

    @property
    def _llm_type(self) -> str:
        return "masbench-calculator"

    def _result(self, messages: list[BaseMessage]) -> ChatResult:
        prompt = "\n".join(message_text(m) for m in messages)
        text = _reply(prompt, self.rounds)
        inp, out = len(prompt.split()), len(text.split())
        message = AIMessage(
            content=text,
            usage_metadata={"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
            response_metadata={"model_name": self.model_name},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(messages)


def TwoRoundCalculator() -> MasbenchCalculator:
    """A calculator with two rounds per call (``python:mas_orchestra.bench.masbench:TwoRoundCalculator``)."""
    return MasbenchCalculator(rounds=2, model_name="masbench-calculator-2")
