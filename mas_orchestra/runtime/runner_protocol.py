"""What the end-to-end graph and the thread runner need from the object that runs them: :class:`PipelineRunner`.

:mod:`mas_orchestra.runtime.pipeline` and :mod:`mas_orchestra.runtime.threads` are used by
:class:`~mas_orchestra.runtime.orchestra.Orchestra` (which imports them), so they must not import it back, not even
for type hints: they depend on this protocol instead, which ``Orchestra`` satisfies structurally (a test keeps
it so, and mypy checks every place an ``Orchestra`` is passed as one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from langchain_core.runnables import Runnable

    from mas_orchestra.registry import AgentRegistry
    from mas_orchestra.settings import RunSettings
    from mas_orchestra.spec import GraphSpec

__all__ = ["PipelineRunner"]


class PipelineRunner(Protocol):
    """The part of an orchestra the end-to-end graph reads: its models, settings, registry and checkpointing."""

    @property
    def orchestrator(self) -> Runnable:
        """The orchestrator model."""
        ...

    @property
    def subagent(self) -> Runnable:
        """The (first) sub-agent model; the one the setup records."""
        ...

    @property
    def dom(self) -> str:
        """The degree of multi-agentness (``high`` or ``low``)."""
        ...

    @property
    def registry(self) -> AgentRegistry:
        """The agent kinds offered, which specs are checked against."""
        ...

    @property
    def search(self) -> Any:
        """The search backend of search nodes (``None``: none)."""
        ...

    @property
    def settings(self) -> RunSettings:
        """Retries, timeouts and concurrency of a run."""
        ...

    @property
    def constrain_reply(self) -> Any:
        """The sub-agents' reply-constraint hook (``None`` when off)."""
        ...

    @property
    def plain_replies(self) -> bool:
        """Whether step-by-step attempts are asked as plain calls (see :func:`mas_orchestra.compile.compile_spec`)."""
        ...

    @property
    def checkpointer(self) -> Any:
        """Where threads are checkpointed: a saver, a SQLite path or a PostgreSQL URL."""
        ...

    @property
    def interrupt_before_execute(self) -> bool:
        """Whether a run pauses for approval of its spec."""
        ...

    async def aorchestrate(self, question: str, *, callbacks: Any = None) -> str:
        """The orchestrator's raw reply to ``question``.

        Args:
            question: The question.
            callbacks: LangChain callbacks of the orchestrator call.
        """
        ...

    def parse(self, text: str) -> GraphSpec:
        """The spec in an orchestrator reply (or an edited one).

        Args:
            text: The reply.
        """
        ...
