"""The GRPO reward: parse, compile and run every completion's multi-agent system, grade its answer.

:func:`make_outcome_reward` returns an :class:`OutcomeReward`, an object with an ``async __call__`` in TRL's
reward-function signature ``reward(prompts, completions, answer, **kwargs) -> list[float]``. TRL (>= 1.x)
runs async reward functions on its own event loop thread and passes every dataset column as a keyword
list, one item per completion (``answer``, ``question``, ``id``…), plus ``trainer_state``/``log_metric``/
``log_extra``, which we ignore.

Status → reward (DESIGN §6; the paper's runs used ``final_answer_weight=1``, ``execution_success_weight=0``,
``cost_weight=0``):

===================================  ===========================================================
status                               reward
===================================  ===========================================================
``invalid_spec`` (SpecError)         0
``compile_error``                    0
``exec_error`` / ``timeout``         0 (the MAS did not execute successfully: no execution bonus)
``crash`` (any other exception)      0, logged with its traceback; the rest of the batch goes on
``ok``, wrong answer                 ``execution_success_weight`` (+ ``partial_credit_weight`` × the share of
                                     the row's ``intermediates`` the final agent states, when given)
``ok``, correct answer               ``execution_success_weight + max(0, final_answer_weight -
                                     cost_weight × cost)``
===================================  ===========================================================

``cost`` is, per ``cost_metric``: ``"subagent_calls"`` (default: the number of sub-agent LLM calls the MAS
made), ``"total_tokens"`` (sub-agent tokens, in thousands) or ``"cost_usd"`` (priced cost in dollars).
The cost penalty only reduces the reward of *correct* answers and never below 0, so a cheap wrong or
invalid orchestration can never outscore a correct one. With ``cost_reward="group"`` the penalty is relative
instead (the form ToolOrchestra trains with): among the correct rollouts of one prompt, cost is normalised to
[0, 1] (cheapest 0, dearest 1) and a correct rollout gets ``execution_success_weight + final_answer_weight ×
(1 − cost_weight × normalised cost)``, so the scale of the cost metric does not matter and only a cheaper way
to the same right answer is preferred (:func:`group_cost_rewards`).

Every call leaves its per-completion :class:`RolloutRecord` list and summary in ``reward.last_batch``, logs
the summary through :mod:`logging` (logger ``training.rewards``), and queues the records so the trainer
(:class:`training.trainer.OrchestraGRPOTrainer`) can put the metrics of each logging step into TRL's
``log_history`` next to its own (``valid_spec_rate``, ``status/<s>``, ``agents_per_spec``…; see
:func:`summarize`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from agents.base import message_text
from mas_orchestra.bench.grading import VALID_KINDS, agrade
from mas_orchestra.config import OrchestraConfig
from mas_orchestra.errors import SpecError
from mas_orchestra.models import resolve_model
from mas_orchestra.registry import AgentRegistry, offered_registry
from mas_orchestra.runtime import Status, execute_spec, whole_response_answer
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import count_warnings, parse_orchestration
from mas_orchestra.spec.structure import structure_of
from training.records import RolloutRecord, summarize
from training.shaping import group_cost_rewards, stated_share

__all__ = [
    "COST_METRICS",
    "COST_REWARDS",
    "PARTIAL_CREDIT_SCOPES",
    "REWARD_QUANTUM",
    "REWARD_SETTINGS",
    "OutcomeReward",
    "completion_text",
    "exact_group_reward",
    "make_outcome_reward",
    "orchestra_registry",
    "question_from_prompt",
]

log = logging.getLogger(__name__)

COST_METRICS = ("subagent_calls", "total_tokens", "cost_usd")
#: How cost enters a correct answer's reward (see :meth:`OutcomeReward.reward_for` and :func:`group_cost_rewards`).
COST_REWARDS = ("linear", "group")
#: Whose text earns the partial credit of a wrong answer (``partial_credit_scope``).
PARTIAL_CREDIT_SCOPES = ("final", "system")
#: How each rollout's MAS runs when the reward is given no settings: RunSettings' defaults, with a 120 s bound on
#: a whole run (a hung MAS must not stall a training step; training's ``reward_timeout`` sets its own).
REWARD_SETTINGS = RunSettings(timeout=120.0)
#: The orchestrator prompt ends with this heading followed by the question (mas_orchestra/prompts/*.txt).
_TASK_HEADING = "# Task"


def orchestra_registry(
    search: Any = None, registry: AgentRegistry | None = None, agents: Iterable[str] | None = None
) -> AgentRegistry:
    """The agent kinds offered to the orchestrator, as :class:`mas_orchestra.Orchestra` filters them:
    ``agents`` (names or aliases) if given, and without a search backend the search agent is not offered.

    Args:
        search: The search backend, or ``None``.
        registry: The registry to filter (default: the default registry).
        agents: Agent kind names or aliases to offer (default: all).
    """
    return offered_registry(registry, search=search, agents=agents)


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a plain string, or conversational ``[{"role": "assistant", ...}]``
    (the assistant messages' contents joined; content may be a list of text parts).

    Args:
        completion: A string, one message, or a list of messages (without assistant messages: all of them).

    Raises:
        TypeError: ``completion`` is none of these.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return message_text(completion)
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
        return "\n".join(message_text(m) for m in assistant)
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def question_from_prompt(prompt: Any) -> str:
    """Recover the task from an orchestrator prompt (used only when the dataset has no ``question`` column):
    the text after the last ``# Task`` heading of the last user message, else that whole message.

    Args:
        prompt: The prompt as a string or as chat messages (without a user message: the last message).
    """
    if isinstance(prompt, str):
        text = prompt
    else:
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"] or list(prompt)
        text = message_text(users[-1]) if users else ""
    head, sep, tail = text.rpartition(_TASK_HEADING)
    del head
    return tail.strip() if sep else text.strip()


def _truths(value: Any) -> str | list[str]:
    """One ground truth from the ``answer`` column: a string, or a list (multi-answer) of strings."""
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, Sequence):
        items = [str(v) for v in value]
        return items[0] if len(items) == 1 else items
    raise TypeError(f"answer must be a string or a list of strings, got {type(value).__name__}")



#: Rewards are multiples of this (2^-16, about 1.5e-5): see :func:`exact_group_reward`.
REWARD_QUANTUM = 2.0 ** -16


def exact_group_reward(value: float) -> float:
    """``value`` rounded to a multiple of :data:`REWARD_QUANTUM`.

    TRL averages a group's rewards in float32. Eight equal rewards of 1/3 (a wrong answer with partial credit)
    then differ from their mean by a rounding error, the group's advantages are ~1e-4 instead of zero, and
    the step runs its full forward and backward for nothing (the zero-advantage skip sees non-zero values).
    Multiples of 2^-16 of magnitude below 2 sum exactly in float32 in groups of up to 128 rows (every partial
    sum fits float32's 24-bit significand), and the mean divides an exact sum, so equal rewards have exactly
    zero advantage; the rounding moves a reward by at most 8e-6.

    Args:
        value: The reward.
    """
    return round(value / REWARD_QUANTUM) * REWARD_QUANTUM


class OutcomeReward:
    """Async GRPO reward over executed multi-agent systems; build it with :func:`make_outcome_reward`.

    Each completion's orchestration is parsed, compiled and run, and its answer graded; the module docstring's
    table turns the outcome into the reward. Use it as ``GRPOTrainer(reward_funcs=[reward])``.

    Args:
        subagent: The model every sub-agent runs on (a chat model or a model string).
        config: How completions are read, as evaluation and :class:`mas_orchestra.Orchestra` read them
            (:class:`~mas_orchestra.config.OrchestraConfig`): its ``dom`` (the parser mode), ``agents`` (the kinds
            offered), ``strict``, ``whole_response_fallback`` and ``constrained`` (sub-agent replies under the
            reply grammar; ``None``: local models only).
        settings: How each MAS runs and how long grading may take (:class:`~mas_orchestra.settings.RunSettings`;
            default :data:`REWARD_SETTINGS`).
        grader: A :func:`mas_orchestra.bench.grading.grade` kind.
        judge: The model for ``grader="judge"``.
        search: A search backend for WebSearchAgent nodes (without one the agent is not offered).
        registry: The agent registry (default: the built-in kinds).
        concurrency: Multi-agent systems executed at once across the batch (the paper ran 128).
        cost_weight: Penalty per unit of cost on a correct answer's reward (never below 0).
        cost_metric: ``subagent_calls`` | ``total_tokens`` (thousands) | ``cost_usd`` (priced).
        cost_reward: ``linear`` (``cost_weight`` × cost off a correct answer) | ``group`` (cost normalised among
            a prompt's correct rollouts, see :func:`group_cost_rewards`; ``cost_weight`` in [0, 1)).
        final_answer_weight: Reward of a correct answer.
        execution_success_weight: Reward of a system that ran to its end, correct or not.
        partial_credit_weight: A wrong but executed answer earns this times the share of the row's
            ``intermediates`` its final agent states (:func:`stated_share`); 0 = off, below
            ``final_answer_weight``.
        partial_credit_scope: ``final``: the facts the final agent states; ``system``: the facts any agent
            states (how far up the chain the system got, wherever).

    Raises:
        ValueError: An unknown grader or cost metric, no ``judge`` for the judge grader, or a bad setting.

    Attributes:
        last_batch: ``{"records", "metrics", "n", "wall_s"}`` of the latest call, or ``None``.
        history: The metrics of every call.
        calls: How many batches were scored.
    """

    __name__ = "outcome_reward"

    def __init__(
        self,
        *,
        subagent: Any = "embedded",
        config: OrchestraConfig | None = None,
        settings: RunSettings | None = None,
        grader: str = "math",
        judge: Any = None,
        search: Any = None,
        registry: AgentRegistry | None = None,
        concurrency: int = 128,
        cost_weight: float = 0.0,
        cost_metric: str = "subagent_calls",
        cost_reward: str = "linear",
        final_answer_weight: float = 1.0,
        execution_success_weight: float = 0.0,
        partial_credit_weight: float = 0.0,
        partial_credit_scope: str = "final",
    ) -> None:
        if config is not None and not isinstance(config, OrchestraConfig):
            raise TypeError(f"config must be an OrchestraConfig, got {type(config).__name__}")
        #: How completions are read (the same object an eval and an Orchestra take).
        self.config: OrchestraConfig = config or OrchestraConfig()
        self.dom = self.config.dom
        if grader not in VALID_KINDS:
            raise ValueError(f"unknown grader {grader!r}; valid: {', '.join(VALID_KINDS)}")
        if grader == "judge" and judge is None:
            raise ValueError("grader='judge' needs judge=<a chat model or model string>")
        if cost_metric not in COST_METRICS:
            raise ValueError(f"unknown cost_metric {cost_metric!r}; valid: {', '.join(COST_METRICS)}")
        if cost_reward not in COST_REWARDS:
            raise ValueError(f"unknown cost_reward {cost_reward!r}; valid: {', '.join(COST_REWARDS)}")
        if cost_reward == "group" and not 0 <= cost_weight < 1:
            raise ValueError(f"cost_weight={cost_weight!r}: with cost_reward='group' it must be in [0, 1)")
        if partial_credit_weight and not 0 < partial_credit_weight < final_answer_weight:
            raise ValueError(f"partial_credit_weight={partial_credit_weight!r} must be in [0, final_answer_weight="
                                 f"{final_answer_weight!r}): a wrong answer must never score like a right one")
        if partial_credit_scope not in PARTIAL_CREDIT_SCOPES:
            raise ValueError(f"unknown partial_credit_scope {partial_credit_scope!r}; valid: "
                             f"{', '.join(PARTIAL_CREDIT_SCOPES)}")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        #: How each multi-agent system runs (validated once, handed whole to every execute_spec) and grading's bound.
        self.settings: RunSettings = RunSettings.of(settings) if settings is not None else REWARD_SETTINGS
        self.subagent = resolve_model(subagent)
        self.judge = resolve_model(judge) if judge is not None else None
        self.grader = grader
        self.search = search
        self.registry = orchestra_registry(search, registry, agents=self.config.agents)
        self.kinds = [k.name for k in self.registry.kinds()]
        self.cost_weight = float(cost_weight)
        self.cost_metric = cost_metric
        self.cost_reward = cost_reward
        self.final_answer_weight = float(final_answer_weight)
        self.execution_success_weight = float(execution_success_weight)
        self.concurrency = concurrency
        self.partial_credit_weight = float(partial_credit_weight)
        self.partial_credit_scope = partial_credit_scope
        self.last_batch: dict[str, Any] | None = None
        self.history: list[dict[str, float]] = []
        self.calls = 0
        self._pending: list[RolloutRecord] = []
        self._lock = threading.Lock()

    # -- TRL entry point ------------------------------------------------------------------------

    async def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float]:
        """Score a batch of completions (TRL's reward-function signature).

        Args:
            prompts: The prompts (the question is read from them without a ``question`` column).
            completions: The orchestrator's completions (text or chat messages).
            answer: The ground truth of each completion's question (the dataset's ``answer`` column).
            **kwargs: Other dataset columns (``question`` is used) and TRL's extras (ignored).

        Returns:
            One reward per completion.

        Raises:
            ValueError: No ``answer`` column, or lists of different lengths.
        """
        n = len(completions)
        if answer is None:
            raise ValueError("the dataset needs an 'answer' column (the ground truth) for the outcome reward")
        if len(answer) != n or len(prompts) != n:
            raise ValueError(f"{n} completions but {len(prompts)} prompts and {len(answer)} answers")
        questions = kwargs.get("question")
        if questions is None or len(questions) != n:
            questions = [question_from_prompt(p) for p in prompts]
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(self.concurrency)
        facts = kwargs.get("intermediates")
        if facts is None or len(facts) != n:
            facts = [None] * n
        records = await asyncio.gather(
            *(self._rollout(i, completions[i], questions[i], answer[i], semaphore, facts[i]) for i in range(n))
        )
        if self.cost_reward == "group" and self.cost_weight:
            ids = kwargs.get("id")
            keys = [str(ids[i]) if ids is not None and len(ids) == n else str(questions[i]) for i in range(n)]
            for record, value in zip(records, group_cost_rewards(records, keys, self), strict=True):
                record.reward = value
        for record in records:
            record.reward = exact_group_reward(record.reward)
        wall = time.perf_counter() - started
        metrics = summarize(records, self.kinds)
        with self._lock:
            self.calls += 1
            self._pending.extend(records)
            self.history.append(metrics)
            self.last_batch = {"records": list(records), "metrics": metrics, "n": n, "wall_s": wall}
        log.info(
            "reward batch %d: %d completions in %.2fs (%.1f/s): reward %.3f±%.3f, valid %.2f, ok %.2f, "
            "invalid %.2f, exec_error %.2f, timeout %.2f, crash %.2f, agents/spec %.2f, delegation %.2f, "
            "sub-agent calls %.1f, tokens %.0f",
            self.calls, n, wall, n / wall if wall > 0 else math.inf, metrics["outcome_reward/mean"],
            metrics["outcome_reward/std"], metrics["valid_spec_rate"], metrics["status/ok"],
            metrics["status/invalid_spec"], metrics["status/exec_error"], metrics["status/timeout"],
            metrics["status/crash"], metrics["agents_per_spec"], metrics["delegation_share"],
            metrics["subagent_calls"], metrics["subagent_tokens"],
        )
        return [r.reward for r in records]

    # -- one rollout ----------------------------------------------------------------------------

    async def _rollout(
        self, index: int, completion: Any, question: Any, truth: Any, semaphore: asyncio.Semaphore,
        facts: Sequence[str] | None = None,
    ) -> RolloutRecord:
        record = RolloutRecord(index=index)
        started = time.perf_counter()
        try:
            async with semaphore:
                await self._score(record, completion, question, truth, facts)
        except Exception as exc:  # one broken rollout scores 0; the step goes on
            record.status, record.reward, record.correct = "crash", 0.0, False
            record.error = f"{type(exc).__name__}: {exc}"
            log.error("rollout %d crashed; reward 0: %s", index, record.error, exc_info=True)
        record.wall_s = time.perf_counter() - started
        return record

    async def _score(self, record: RolloutRecord, completion: Any, question: Any, truth: Any,
                     facts: Sequence[str] | None = None) -> None:
        text = completion_text(completion)
        record.question, record.completion = str(question), text
        truths = _truths(truth)
        try:
            spec = parse_orchestration(text, dom=self.dom, registry=self.registry, strict=self.config.strict)
        except SpecError as exc:
            record.status, record.error = Status.INVALID_SPEC.value, str(exc)
            fallback = (whole_response_answer(record.status, record.error, text)
                        if self.config.whole_response_fallback else None)
            if fallback is not None:  # the original reward graded such a completion as a direct answer
                record.whole_response = True
                record.correct = bool(
                    await agrade(fallback, truths, self.grader, question=str(question), judge=self.judge,
                                 timeout=self.settings.grade_timeout)
                )
                record.reward = self.final_answer_weight if record.correct else 0.0
            return
        record.spec_warnings = count_warnings(spec.warnings)
        record.agents = len(spec.nodes)
        record.agent_counts = spec.agent_counts()
        record.structure = structure_of(spec).as_dict()
        outcome = await execute_spec(
            spec, str(question), model=self.subagent, search=self.search, registry=self.registry,
            settings=self.settings, orchestration=text, constrained=self.config.constrained,
        )
        usage = outcome.usage
        record.status = outcome.status.value
        record.subagent_calls = usage.subagent_calls
        record.total_tokens = usage.total_tokens
        record.cost_usd = usage.cost_usd
        record.error = outcome.error
        if outcome.status is not Status.OK:
            record.reward = 0.0
            return
        record.answer = outcome.answer
        record.correct = bool(
            await agrade(outcome.answer or "", truths, self.grader, question=str(question), judge=self.judge,
                         timeout=self.settings.grade_timeout)
        )
        if facts is not None and len(facts) and spec.sink in outcome.node_results:
            texts = ([result.text() for result in outcome.node_results.values()]
                     if self.partial_credit_scope == "system" else outcome.node_results[spec.sink].text())
            record.partial = stated_share(texts, facts)
        record.reward = self.reward_for(record)

    def cost_of(self, record: RolloutRecord) -> float:
        """The rollout's cost in ``cost_metric`` units (tokens in thousands).

        Args:
            record: The rollout.
        """
        return {
            "subagent_calls": float(record.subagent_calls),
            "total_tokens": record.total_tokens / 1000.0,
            "cost_usd": record.cost_usd,
        }[self.cost_metric]

    def reward_for(self, record: RolloutRecord) -> float:
        """The number for an executed (``ok``) rollout on its own; see the module docstring (with
        ``cost_reward="group"`` the cost is applied per group afterwards, so this is the full reward).

        Args:
            record: The rollout; anything but ``ok`` gets 0.

        Returns:
            ``execution_success_weight``, plus the final-answer weight (less the linear cost penalty, not below
            0) when correct, or the partial-credit weight times ``record.partial`` when not.
        """
        if record.status != Status.OK.value:
            return 0.0
        reward = self.execution_success_weight
        if record.correct:
            penalty = self.cost_weight * self.cost_of(record) if self.cost_reward == "linear" else 0.0
            reward += max(0.0, self.final_answer_weight - penalty)
        elif record.partial is not None:
            reward += self.partial_credit_weight * record.partial
        return float(reward)

    # -- metrics for the trainer ----------------------------------------------------------------

    def pop_records(self) -> list[RolloutRecord]:
        """The records of every call since the last pop (the trainer's logging step), and forget them."""
        with self._lock:
            records, self._pending = self._pending, []
        return records

    def pop_metrics(self) -> dict[str, float]:
        """:func:`summarize` of the records since the last pop; ``{}`` if there were none."""
        records = self.pop_records()
        return summarize(records, self.kinds) if records else {}

    @staticmethod
    def record_dicts(records: Sequence[RolloutRecord]) -> list[dict[str, Any]]:
        """The records as plain dicts (for ``rollouts.jsonl``).

        Args:
            records: The rollouts.
        """
        return [asdict(r) for r in records]

    def __repr__(self) -> str:
        return (
            f"OutcomeReward(dom={self.dom!r}, grader={self.grader!r}, subagent={type(self.subagent).__name__}, "
            f"concurrency={self.concurrency}, timeout={self.settings.timeout})"
        )


def make_outcome_reward(**kwargs: Any) -> OutcomeReward:
    """The outcome reward for ``GRPOTrainer(reward_funcs=[...])``.

    Args:
        **kwargs: :class:`OutcomeReward`'s keyword arguments (documented there; its defaults apply).

    Returns:
        The reward object.

    Raises:
        ValueError: As :class:`OutcomeReward` raises it.
    """
    return OutcomeReward(**kwargs)
