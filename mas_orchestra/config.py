"""How the orchestrator plans: one frozen configuration object, validated once and passed whole.

:class:`OrchestraConfig` holds what shapes the plan and how it is read: the degree of MAS, the agent kinds
offered, constrained decoding and its grammar limits, the prompt template, the orchestrator call's budget and
temperature, strictness, the sub-agent pool's defaults and sampling caps. It is data only (no model objects):
it round-trips through ``model_dump()`` / ``model_validate()`` and JSON, so a run's configuration can be
written next to its results and read back, and the served graph receives it as its LangGraph context.

:class:`~mas_orchestra.runtime.Orchestra`, :func:`~mas_orchestra.bench.evaluation.aevaluate`, the training
reward (``training.rewards.OutcomeReward``), ``mas-orchestra run`` / ``eval`` and the served graph all take it.
How long a run may take, its retries and its concurrency are :class:`~mas_orchestra.settings.RunSettings`.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from mas_orchestra.caps import SamplingCaps
from mas_orchestra.spec.grammar import GrammarLimits

__all__ = ["OrchestraConfig"]

_Temperature = Annotated[StrictFloat | StrictInt, Field(ge=0)]
_Tokens = Annotated[StrictInt, Field(ge=1)]


class OrchestraConfig(BaseModel):
    """What describes how the orchestrator plans, validated once and passed whole.

    Frozen; an unknown field or a value of the wrong type raises ``pydantic.ValidationError`` (a ``ValueError``)
    naming the field. Nested :class:`~mas_orchestra.spec.grammar.GrammarLimits` and
    :class:`~mas_orchestra.caps.SamplingCaps` may be given as mappings. Agent kind names are checked against
    the registry when an :class:`~mas_orchestra.runtime.Orchestra` is built (an unknown one lists the valid
    kinds), since a registry may hold kinds registered later.

    Example:
        ```python
        config = OrchestraConfig(dom="low", agents=("cot", "reflexion"), orchestrator_max_tokens=320)
        orch = Orchestra("embedded", "embedded", config=config, settings=RunSettings(timeout=300))
        OrchestraConfig.model_validate_json(config.model_dump_json()) == config  # True
        ```
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dom: Literal["high", "low"] = Field(
        default="high",
        description="Degree of MAS: 'high' (any DAG of agents) or 'low' (answer directly or delegate to one agent).",
    )
    agents: tuple[StrictStr, ...] | None = Field(
        default=None,
        description="The agent kinds offered to the orchestrator (names or aliases); None: every registered kind "
                    "(the search agent only with a search backend).",
    )
    constrained: Literal["auto"] | StrictBool | None = Field(
        default=None,
        description="Decode the orchestration and the sub-agent replies under grammars generated from the "
                    "registry. None: on for local models (embedded, hf:), off for others; True: on (a backend that "
                    "cannot is an error); False: off; 'auto': on where the backend can, off with a warning elsewhere.",
    )
    grammar_limits: GrammarLimits = Field(
        default_factory=GrammarLimits,
        description="Bounds of a constrained orchestration: agents, text lengths, whether a high-DoM plan may be "
                    "a direct answer (False for an orchestrator trained without that option).",
    )
    orchestrator_max_tokens: _Tokens | None = Field(
        default=None,
        description="New tokens of the orchestrator call; None: 512 when constrained, else the model's own "
                    "(evaluate a trained orchestrator with its max_completion_length).",
    )
    orchestrator_temperature: _Temperature | None = Field(
        default=None,
        description="Sampling temperature of the orchestrator call (an eval's baseline block uses it too); "
                    "None: the model's own.",
    )
    prompt: StrictStr | None = Field(
        default=None,
        description="The orchestrator's prompt template folder (mas_orchestra.prompt_templates); None: ours.",
    )
    strict: StrictBool = Field(
        default=False,
        description="Any leniency the parser would apply to an orchestration (a spec warning, a parameter above "
                    "a cap) makes it invalid_spec instead.",
    )
    whole_response_fallback: StrictBool = Field(
        default=False,
        description="Grade an orchestration with no agent and no <answer> on its whole text, as the original "
                    "reward did (evaluation and the training reward).",
    )
    subagent_defaults: dict[StrictStr, StrictStr] | None = Field(
        default=None,
        description="With a sub-agent pool: the pool model each agent kind uses when the plan names none, e.g. "
                    "{'debate': 'strong'}; None: the pool's first.",
    )
    caps: SamplingCaps | None = Field(
        default=None,
        description="The most a plan may ask of the sub-agents (temperature, samples, rounds, agents); None: the "
                    "sub-agent model's own caps (the tightest over a pool).",
    )
    plain_replies: StrictBool | None = Field(
        default=None,
        description="Ask step-by-step attempts as one plain call and read the reply as the answer; None: on when "
                    "every sub-agent model asks plainly (the embedded model).",
    )
    interrupt_before_execute: StrictBool = Field(
        default=False,
        description="Pause each run after orchestration until the plan is approved, edited or rejected (needs "
                    "a checkpointer).",
    )

    @field_validator("prompt", mode="before")
    @classmethod
    def _path_text(cls, value: Any) -> Any:
        """A folder given as a ``Path`` is kept as its text (the config stays plain data)."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value
