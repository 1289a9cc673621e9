"""What a run produced: the :class:`Outcome`, and the record a run in progress keeps to build it.

A bad orchestration is an outcome, not a crash: every way a run can end has a :class:`Status`, and the
outcome carries the error, the finished nodes and the usage even when the run failed or timed out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, field_validator

from agents.base import AgentResult
from mas_orchestra.runtime.usage import RunUsage, UsageCallback
from mas_orchestra.spec import GraphSpec, count_warnings
from mas_orchestra.spec.xml_format import NO_ORCHESTRATION
from mas_orchestra.status import Status

__all__ = ["Outcome", "RunRecord", "Status", "node_events", "whole_response_answer"]


class Outcome(BaseModel):
    """Everything about one run. No status is an exception: a run always ends in an ``Outcome``.

    Attributes:
        status: How the run ended.
        question: The task.
        answer: The sink's answer (``None`` unless the graph ran to its end).
        spec: The spec the orchestrator wrote, when it parsed.
        orchestration: The orchestrator's raw text.
        node_results: Each finished node's result, by node id (restored ones included).
        finished_nodes: The ids of the nodes that finished (on a time-out: those that had).
        error: The message, for every status but ``ok``.
        failed_node: The node that failed, when one did.
        usage: Model calls, tokens, cost and wall time of this invocation.
        thread_id: The checkpointed thread this run lives on (``None`` without a checkpointer).
        interrupt: What the approval interrupt shows, when the status is ``interrupted``.
    """

    status: Status
    question: str
    answer: str | None = None
    spec: GraphSpec | None = None
    orchestration: str = ""
    node_results: dict[str, AgentResult] = Field(default_factory=dict)
    finished_nodes: list[str] = Field(default_factory=list)
    error: str | None = None
    failed_node: str | None = None
    usage: RunUsage = Field(default_factory=RunUsage)
    thread_id: str | None = None  # the checkpointed thread this run lives on (None without a checkpointer)
    interrupt: dict[str, Any] | None = None  # what the approval interrupt shows, when status is interrupted

    @field_validator("spec", mode="wrap")
    @classmethod
    def _keep_validated_spec(cls, value: Any, handler: Any) -> Any:
        # A GraphSpec instance was validated when it was built, possibly against a user registry;
        # re-running its checks here (default registry) would reject user-registered agent kinds.
        return value if isinstance(value, GraphSpec) else handler(value)

    @property
    def ok(self) -> bool:
        """The status is ``ok``."""
        return self.status is Status.OK

    @property
    def spec_warnings(self) -> dict[str, int]:
        """How many leniencies of each kind reading the orchestration needed.

        ``{}`` for a clean text or no spec; see :class:`~mas_orchestra.spec.SpecWarning`.
        """
        return count_warnings(self.spec.warnings) if self.spec is not None else {}

    @property
    def valid(self) -> bool:
        """The orchestration parsed, validated and compiled (whatever happened when it ran)."""
        return self.status in (Status.OK, Status.EXEC_ERROR, Status.TIMEOUT) and self.spec is not None




def whole_response_answer(status: Status | str, error: str | None, orchestration: str) -> str | None:
    """The original reward's fallback: an orchestration with no agent and no ``<answer>`` is graded as a
    direct answer, the whole response being the answer (so a ``\\boxed{}`` in it can still score).

    Returns the text to grade for such a run, ``None`` for any other (off by default in eval and training:
    ``whole_response_fallback=True`` turns it on).

    Args:
        status: The run's status.
        error: The run's error message.
        orchestration: The orchestrator's whole reply.

    Returns:
        The text to grade, or ``None``.
    """
    invalid = status in (Status.INVALID_SPEC, Status.INVALID_SPEC.value)
    if invalid and error and error.startswith(NO_ORCHESTRATION) and orchestration.strip():
        return orchestration
    return None


class RunRecord:
    """Mutable record of a run in progress, so a timeout can still report what finished.

    Args:
        question: The run's question.
    """

    def __init__(self, question: str) -> None:
        self.question = question
        self.started = time.perf_counter()
        self.orchestration = ""
        self.spec: GraphSpec | None = None
        self.results: dict[str, AgentResult] = {}
        self.answer: str | None = None
        self.usage = UsageCallback()
        self.thread_id: str | None = None
        self.interrupt: dict[str, Any] | None = None

    def outcome(self, status: Status, *, error: str | None = None, failed_node: str | None = None) -> Outcome:
        """The run's :class:`Outcome` with ``status``: answer, spec, node results and usage so far.

        Args:
            status: How the run ended.
            error: The message, for every status but ``ok``.
            failed_node: The node that failed, when one did.

        Returns:
            The outcome.
        """
        return Outcome(
            status=status,
            question=self.question,
            answer=self.answer if status is Status.OK else None,
            spec=self.spec,
            orchestration=self.orchestration,
            node_results=dict(self.results),
            finished_nodes=list(self.results),
            error=error,
            failed_node=failed_node,
            usage=self.usage.snapshot(time.perf_counter() - self.started),
            thread_id=self.thread_id,
            interrupt=self.interrupt,
        )




def node_events(run: RunRecord, mode: str, chunk: Any) -> list[dict[str, Any]]:
    """The node events of one ``tasks``/``updates`` stream chunk of a compiled spec graph; records finished
    nodes' results (and the final answer) in ``run``.

    Args:
        run: The run being recorded.
        mode: The stream mode of the chunk (``tasks`` or ``updates``).
        chunk: The chunk.

    Returns:
        ``node_start`` / ``node_end`` events.
    """
    if mode == "tasks":
        started = "result" not in chunk and "error" not in chunk
        return [{"type": "node_start", "node": chunk["name"]}] if started else []
    events = []
    for update in (chunk or {}).values():
        if not isinstance(update, Mapping):
            continue
        for done_id, result in (update.get("results") or {}).items():
            run.results[done_id] = result
            events.append({"type": "node_end", "node": done_id, "agent": result.agent, "answer": result.answer})
        if "final_answer" in update:
            run.answer = update["final_answer"]
    return events


