"""How a run is bounded and retried: one frozen settings object, validated once and passed whole.

``RunSettings`` is to a multi-agent run what LangGraph's ``RetryPolicy`` is to a node: built (and checked)
where the caller states it — :class:`~mas_orchestra.runtime.Orchestra`, :func:`~mas_orchestra.runtime.execute_spec`,
an eval, the training reward, the served graph's context — and handed on unchanged to
:func:`~mas_orchestra.compile.compile_spec` and the sub-agent calls.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RunSettings"]


class RunSettings(BaseModel):
    """Bounds and retries of one run, validated once and passed whole.

    Frozen; an invalid value raises ``pydantic.ValidationError`` (a ``ValueError``) naming the field.
    ``Orchestra``, ``execute_spec``, ``compile_spec``, ``aevaluate``, the training reward and the served graph's
    context all take it. How the orchestrator plans is :class:`~mas_orchestra.config.OrchestraConfig`.

    Attributes:
        timeout: Seconds a whole run (orchestration and execution) may take (``None``: no bound).
        call_timeout: Seconds one sub-agent call may take (``None``: no bound).
        max_retries: Retries of a transient model error (time-outs, connection errors, 429, 5xx), with
            exponential backoff and jitter.
        retry_initial_delay: Seconds before the first retry.
        max_concurrency: Model calls in flight in one run (``None``: no bound).
        requests_per_second: Rate limit of API models given as model strings (LangChain's
            ``InMemoryRateLimiter``; ``None``: none).
        grade_timeout: Seconds Math-Verify may spend grading one answer, in an eval and in the training reward
            (a check that runs out of time grades False).

    Example:
        ```python
        settings = RunSettings(timeout=300, call_timeout=60, max_retries=3)
        orch = Orchestra("embedded", "embedded", settings=settings)
        ```
    """

    # strict: "10" is not a timeout and 1.5 is not a retry count (ints are accepted for the float fields).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    timeout: float | None = Field(default=None, gt=0, description="Seconds one whole run may take (None: no bound).")
    call_timeout: float | None = Field(default=None, gt=0, description="Seconds one sub-agent call may take.")
    max_retries: int = Field(default=3, ge=0, description="Retries of a transient model error.")
    retry_initial_delay: float = Field(default=1.0, ge=0, description="First backoff delay of a retry, seconds.")
    max_concurrency: int | None = Field(default=32, ge=1, description="Model calls in flight in a run (None: none).")
    requests_per_second: float | None = Field(
        default=None, gt=0, description="Rate limit of API models given as strings (None: none).")
    grade_timeout: float = Field(
        default=10.0, gt=0, description="Seconds Math-Verify may spend grading one answer (evals, training reward).")

    def merged(self, **overrides: Any) -> RunSettings:
        """These settings with the ``overrides`` that are not ``None``, validated again.

        Args:
            **overrides: Field values; ``None`` means not given.

        Returns:
            New settings (``self`` when nothing is overridden).

        Raises:
            pydantic.ValidationError: An override is not a valid value of its field.
        """
        given = {name: value for name, value in overrides.items() if value is not None}
        return self if not given else RunSettings.model_validate({**self.model_dump(), **given})

    @classmethod
    def of(cls, settings: RunSettings | None = None, **overrides: Any) -> RunSettings:
        """``settings`` (default: the defaults) with the keyword arguments a caller gave (``None`` = not given).

        What the entry points that still take the separate keywords (``execute_spec(max_retries=…)``) build
        their settings with.

        Args:
            settings: The base settings (default: the defaults).
            **overrides: Field values; ``None`` means not given.

        Returns:
            The merged settings.

        Raises:
            TypeError: ``settings`` is not a ``RunSettings``.
            pydantic.ValidationError: An override is not a valid value of its field.
        """
        if settings is not None and not isinstance(settings, RunSettings):
            raise TypeError(f"settings must be a RunSettings, got {type(settings).__name__}")
        return (settings or cls()).merged(**overrides)

