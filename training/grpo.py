"""``python -m training.grpo``: train an orchestrator with GRPO + LoRA on executed multi-agent outcomes.

With no flags on a CPU machine this is a smoke run (about a minute per step on two idle cores): the embedded
SmolLM2-135M-Instruct is the orchestrator AND the sub-agent model, the data are 8 MASBench depth-2 problems,
2 GRPO steps of one prompt x 4 rollouts of at most 128 tokens (low DoM, micro-batches of 1). The reward
parses, compiles and runs every completion's graph on the sub-agent model; each MAS may run
``--reward-timeout`` seconds. Output (``--output-dir``, default ``runs/grpo-smoke``):
``adapter_config.json``, ``adapter_model.safetensors``, the tokenizer, ``trainer_state.json`` (whose
``log_history`` holds TRL's ``reward``/``kl``/... next to ours: ``valid_spec_rate``, ``status/<s>``,
``agents_per_spec``, ``delegation_share``…), ``orchestra_config.yaml`` (the resolved config),
``checkpoint-<n>/`` every ``--save-steps``, ``merged/`` with ``--merge``, ``reward_curve.png`` (redrawn at every
checkpoint; ``mas-orchestra plot-training DIR``) and ``rollouts.jsonl`` (every sampled orchestration).

``--val-dataset`` (same forms as ``--dataset``) adds validation as the original's recipe has it: Avg@k over
``--val-samples`` completions per question at ``--val-temperature``, before training (``--val-before-train``),
every ``--eval-steps`` steps and after the last one, as ``val/*`` entries in ``log_history``, the printed
summary and the reward-curve picture (:mod:`training.validation`).

A CPU run whose reward rises: ``--config recipes/cpu_learning.yaml`` (under 20 minutes, see training/README.md).
GPU recipes: ``recipes/single_gpu_qwen1_5b.yaml``, ``recipes/paper_qwen7b.yaml`` (see training/README.md).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from mas_orchestra.errors import install_command
from mas_orchestra.offers import PoolError
from training.config import OrchestraGRPOConfig, parse_config
from training.distributed import (
    TINY_RANDOM,
    LaunchError,
    WorldSizeMismatchError,
    check_launch,
    check_resume_world_size,
    tiny_random_model,
    world_size,
)

__all__ = ["main", "resolve_orchestrator", "run"]

log = logging.getLogger("training.grpo")

VLLM_INSTALL_HINT = install_command("vllm")


def resolve_orchestrator(model: str) -> str:
    """The path or model id GRPOTrainer loads: ``embedded`` → the cached SmolLM2 folder.

    Args:
        model: ``embedded``, the tiny random test model's name, a local path (``~`` expanded) or a Hugging Face
            model id (an ``hf:`` prefix is dropped).

    Returns:
        The local folder, or the model id when no such path exists.
    """
    text = model.strip()
    if text.lower() == "embedded":
        from mas_orchestra.local.embedded import embedded_model_dir

        return str(embedded_model_dir())
    if text.lower() == TINY_RANDOM:
        return str(tiny_random_model())
    if text.lower().startswith("hf:"):
        text = text[3:]
    expanded = Path(text).expanduser()
    return str(expanded) if expanded.exists() else text


def _subagent(cfg: OrchestraGRPOConfig, text: str | None = None) -> Any:
    """The sub-agent model of ``text`` (default ``cfg.subagent``), capped at ``subagent_max_tokens``."""
    from mas_orchestra.models import resolve_model

    text = cfg.subagent if text is None else text
    kwargs: dict[str, Any] = {}
    if cfg.subagent_max_tokens:
        head = text.strip().lower()
        if head == "embedded" or head.startswith("hf:"):
            kwargs["max_new_tokens"] = cfg.subagent_max_tokens
        elif head.startswith(("openai:", "vllm:", "together:")):
            kwargs["max_tokens"] = cfg.subagent_max_tokens
        else:
            log.warning("--subagent-max-tokens is ignored for %s", text)
    return resolve_model(text, **kwargs)


def _check_vllm(cfg: OrchestraGRPOConfig) -> None:
    if importlib.util.find_spec("vllm") is None:
        raise SystemExit(f"--use-vllm needs vLLM, which is not installed: {VLLM_INSTALL_HINT}")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--use-vllm needs a CUDA GPU; on CPU, transformers generates the rollouts (drop --use-vllm)")


def _orchestration_constraint(cfg: OrchestraGRPOConfig, registry: Any) -> Any:
    from mas_orchestra.models.constraints import OrchestrationConstraint

    config = cfg.orchestra_config()
    constraint = OrchestrationConstraint(dom=config.dom, registry=registry, limits=config.grammar_limits,
                                         direct_answers=config.grammar_limits.direct_answer)
    constraint.grammar()  # a kind the grammar cannot express fails here, before any model loads
    return constraint


def _validation_callback(cfg: OrchestraGRPOConfig, reward_kwargs: dict[str, Any], registry: Any,
                         tokenizer: Any) -> Any:
    """The validation callback of ``--val-dataset`` (None without one); its reward is separate from training's."""
    if not cfg.val_dataset:
        return None
    from training.data import build_dataset, filter_long_prompts
    from training.rewards import make_outcome_reward
    from training.validation import ValidationCallback, ValidationRunner

    rows = filter_long_prompts(
        build_dataset(cfg.val_dataset, cfg.dom, registry=registry, limit=cfg.val_limit, prompt=cfg.prompt), tokenizer,
        cfg.max_prompt_length,
    )
    runner = ValidationRunner(
        list(rows), make_outcome_reward(**reward_kwargs), tokenizer, samples=cfg.val_samples,
        temperature=cfg.val_temperature, max_new_tokens=int(cfg.max_completion_length or 0), top_p=cfg.top_p,
    )
    log.info("validation: %d questions x %d samples at temperature %g, before training: %s, every %d steps",
             len(rows), cfg.val_samples, cfg.val_temperature, cfg.val_before_train, cfg.eval_steps)
    return ValidationCallback(runner, every=int(cfg.eval_steps or 0), before_train=cfg.val_before_train)


def _resume_checkpoint(cfg: OrchestraGRPOConfig) -> str | None:
    wanted = cfg.resume_from
    if wanted is False:
        return None
    if wanted is True:
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(cfg.output_path)) if cfg.output_path.is_dir() else None
        if last is None:
            log.warning("--resume: no checkpoint-* folder in %s; starting from scratch", cfg.output_dir)
        return last
    if not Path(str(wanted)).is_dir():
        raise SystemExit(f"--resume {wanted}: no such checkpoint folder")
    return str(wanted)


def _checked_resume_checkpoint(cfg: OrchestraGRPOConfig) -> str | None:
    checkpoint = _resume_checkpoint(cfg)
    if checkpoint is not None:
        check_resume_world_size(checkpoint)  # before any model loads: a clear error, not a silent other curve
    return checkpoint


def _save_config(cfg: OrchestraGRPOConfig, path: Path) -> None:
    """The resolved config (every field, ``auto`` options decided) as YAML; secrets are redacted by TRL."""
    import yaml

    path.write_text(yaml.safe_dump(json.loads(cfg.to_json_string()), sort_keys=False), encoding="utf-8")


def lora_config(cfg: OrchestraGRPOConfig, model_path: str) -> Any:
    """PEFT's ``LoraConfig`` for the run; with ``lora_layers``, the adapters go on the model's last N decoder layers.

    PEFT takes a layer list only with module names, so ``all-linear`` is spelled out there: the names of the
    linear layers inside the decoder layers of the model's architecture (built on the meta device: no weights).

    Args:
        cfg: The training config.
        model_path: The orchestrator's folder (its ``config.json`` gives the layer count).

    Returns:
        The ``LoraConfig``.

    Raises:
        ValueError: ``lora_layers`` above the model's layer count, or target modules not in its decoder layers.
    """
    from peft import LoraConfig

    targets = cfg.lora_target_modules
    layers = None
    if cfg.lora_layers is not None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        model_config = AutoConfig.from_pretrained(model_path)
        count = int(model_config.num_hidden_layers)
        if cfg.lora_layers > count:
            raise ValueError(f"lora_layers={cfg.lora_layers}: {model_path} has {count} decoder layers; give 1 to "
                             f"{count}, or null for all of them")
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(model_config)
        in_layers = {name.rsplit(".", 1)[-1] for name, module in skeleton.named_modules()
                     if isinstance(module, torch.nn.Linear) and ".layers." in name}
        if targets == "all-linear":
            targets = sorted(in_layers)
        elif missing := sorted(set(targets) - in_layers):
            raise ValueError(f"lora_target: {', '.join(missing)} not among the decoder layers' linear modules of "
                             f"{model_path} ({', '.join(sorted(in_layers))})")
        layers = list(range(count - cfg.lora_layers, count))
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, layers_to_transform=layers, task_type="CAUSAL_LM")


def run(cfg: OrchestraGRPOConfig) -> dict[str, Any]:
    """Train as configured; returns a summary (paths, per-step metrics, step times, peak memory).

    Args:
        cfg: The training config.

    Returns:
        The run's summary.
    """
    from mas_orchestra import environment

    environment.prefer_library_default("TOKENIZERS_PARALLELISM", "false")
    from mas_orchestra.local.precision import bound_kernel_caches

    bound_kernel_caches()  # before any bf16 product: every step's new sequence lengths would grow them
    started = time.perf_counter()
    if cfg.use_vllm:
        _check_vllm(cfg)
    import torch
    from transformers import AutoTokenizer

    from mas_orchestra.bench.training_curve import compare_windows, curve_from_history
    from training.data import build_dataset, filter_long_prompts
    from training.pools import pooled_subagents
    from training.rewards import make_outcome_reward, orchestra_registry
    from training.trainer import CurvePlotter, HeapTrimmer, OrchestraGRPOTrainer, StepTimer, peak_rss_mb

    checkpoint = _checked_resume_checkpoint(cfg)
    cuda = torch.cuda.is_available()
    model_path = resolve_orchestrator(cfg.model)
    search = None
    if cfg.search:
        from agents.search import make_backend
        from mas_orchestra import environment

        search = make_backend(cfg.search, cache_path=environment.search_cache_path())
    subagent, registry = pooled_subagents(
        cfg, orchestra_registry(search, agents=cfg.agent_kinds), lambda text: _subagent(cfg, text))
    reward_kwargs: dict[str, Any] = dict(
        subagent=subagent, config=cfg.orchestra_config(), settings=cfg.run_settings(), grader=cfg.grader,
        judge=cfg.judge, search=search, registry=registry, concurrency=cfg.reward_concurrency,
        cost_weight=cfg.cost_weight, cost_metric=cfg.cost_metric, cost_reward=cfg.cost_reward,
        final_answer_weight=cfg.final_answer_weight, execution_success_weight=cfg.execution_success_weight,
        partial_credit_weight=cfg.partial_credit_weight, partial_credit_scope=cfg.partial_credit_scope,
    )
    reward = make_outcome_reward(**reward_kwargs)
    constraint = _orchestration_constraint(cfg, registry) if cfg.constrained else None
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = filter_long_prompts(
        build_dataset(cfg.dataset, cfg.dom, registry=registry, limit=cfg.limit, prompt=cfg.prompt),
        tokenizer, cfg.max_prompt_length,
    )
    peft_config = lora_config(cfg, model_path)
    timer = StepTimer()
    callbacks: list[Any] = [timer]
    if cfg.release_memory and not cuda:  # before the model loads: its blocks too are returned when freed
        from training.allocator import release_freed_memory

        if release_freed_memory():
            callbacks.append(HeapTrimmer())
    plotter = CurvePlotter(cfg.output_path)
    log.info("orchestrator %s, sub-agents %s, %d prompts, device %s", model_path, cfg.subagent, len(dataset),
             "cuda" if cuda else "cpu")
    validation = _validation_callback(cfg, reward_kwargs, registry, tokenizer)
    trainer = OrchestraGRPOTrainer(
        model=model_path, reward_funcs=[reward], args=cfg, train_dataset=dataset, processing_class=tokenizer,
        peft_config=peft_config, callbacks=[*callbacks, plotter], constraint=constraint, validation=validation,
        rollout_log=cfg.output_path / "rollouts.jsonl" if cfg.log_rollouts else None,
    )  # its __init__ installs the config's features (training.hooks)
    trainer.train(resume_from_checkpoint=checkpoint)

    out = cfg.output_path
    out.mkdir(parents=True, exist_ok=True)
    trainer.save_model(str(out))  # adapter_config.json + adapter_model.safetensors (+ tokenizer); rank 0 writes
    main_process = trainer.is_world_process_zero()
    if main_process:  # with several processes, one writer per file
        trainer.state.save_to_json(str(out / "trainer_state.json"))
        _save_config(cfg, out / "orchestra_config.yaml")
    merged_dir = None
    if cfg.merge and main_process:
        merged_dir = out / "merged"
        model = trainer.accelerator.unwrap_model(trainer.model)
        merged = model.merge_and_unload()
        merged.save_pretrained(str(merged_dir), safe_serialization=True)
        tokenizer.save_pretrained(str(merged_dir))
    steps = [
        {k: e.get(k) for k in ("step", "reward", "reward_std", "valid_spec_rate", "correct_rate", "kl",
                               "agents_per_spec", "delegation_share", "subagent_calls")}
        for e in trainer.state.log_history if "valid_spec_rate" in e
    ]
    validated = [{k: e[k] for k in ("step", "val/avg_at_k", "val/pass_at_k", "val/valid_rate", "val/samples")}
                 for e in trainer.state.log_history if "val/avg_at_k" in e]
    curve = curve_from_history(trainer.state.log_history)
    rise = compare_windows(curve) if curve else None
    summary = {
        "output_dir": str(out.resolve()),
        "adapter": str((out / "adapter_model.safetensors").resolve()),
        "trainer_state": str((out / "trainer_state.json").resolve()),
        "merged": str(merged_dir.resolve()) if merged_dir else None,
        "resumed_from": checkpoint,
        "steps": steps,
        "first_vs_last_20pct": None if rise is None else {
            "window": rise.window, "first_reward": rise.first_reward, "last_reward": rise.last_reward,
            "first_valid_spec_rate": rise.first_valid, "last_valid_spec_rate": rise.last_valid,
        },
        "validation": validated,
        "reward_curve": str(plotter.written.resolve()) if plotter.written else None,
        "rollouts": str((out / "rollouts.jsonl").resolve()) if cfg.log_rollouts else None,
        "step_times": timer.steps,
        # the profiler resets the kernel's peak mark at every phase: its own record is then the run's peak
        "peak_rss_mb": max(peak_rss_mb(), trainer.profiler.overall_peak_mb if trainer.profiler else 0.0),
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "wall_s": time.perf_counter() - started,
        "device": "cuda" if cuda else "cpu",
        # what the training forward and backward ran in: the weights' dtype, and autocast's (None: off)
        "precision": {"weights": init.get("dtype") if isinstance(init := cfg.model_init_kwargs, dict) else None,
                      "autocast": "bfloat16" if cfg.bf16 else None},
        "processes": world_size(),
        "torch_threads": torch.get_num_threads(),
        "is_main_process": main_process,
    }
    if main_process:
        (out / "run_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _print_summary(summary: dict[str, Any]) -> None:
    print(f"\noutput dir:     {summary['output_dir']}")
    print(f"adapter:        {summary['adapter']}")
    print(f"trainer state:  {summary['trainer_state']}")
    if summary["merged"]:
        print(f"merged model:   {summary['merged']}")
    print(f"{'step':>5} {'reward':>8} {'valid':>7} {'correct':>8} {'agents':>7} {'wall s':>8} {'cpu s':>8}")
    times = {t["step"]: t for t in summary["step_times"]}
    for s in summary["steps"]:
        t = times.get(s["step"], {})

        def fmt(v: Any, spec: str = ".3f") -> str:
            return format(v, spec) if isinstance(v, (int, float)) else "-"

        print(f"{s['step']:>5} {fmt(s['reward']):>8} {fmt(s['valid_spec_rate']):>7} {fmt(s['correct_rate']):>8} "
              f"{fmt(s['agents_per_spec'], '.2f'):>7} {fmt(t.get('wall_s'), '.1f'):>8} {fmt(t.get('cpu_s'), '.1f'):>8}")
    rise = summary.get("first_vs_last_20pct")
    if rise:
        print(f"first {rise['window']} step(s) vs last {rise['window']}: reward {rise['first_reward']:.3f} -> "
              f"{rise['last_reward']:.3f}, valid-spec rate {rise['first_valid_spec_rate']:.3f} -> "
              f"{rise['last_valid_spec_rate']:.3f}")
    for entry in summary.get("validation") or []:
        print(f"validation at step {entry['step']}: Avg@k {entry['val/avg_at_k']:.3f}, pass@k "
              f"{entry['val/pass_at_k']:.3f}, valid {entry['val/valid_rate']:.2f} over "
              f"{entry['val/samples']:.0f} samples")
    if summary.get("reward_curve"):
        print(f"reward curve:   {summary['reward_curve']}")
    peak_gpu = summary["peak_cuda_mb"]
    print(f"peak RSS {summary['peak_rss_mb']:.0f} MiB" + (f", peak GPU {peak_gpu:.0f} MiB" if peak_gpu else "")
          + f", total {summary['wall_s']:.0f} s on {summary['device']}"
          + (f" (bf16 autocast over {summary['precision']['weights']} weights)" if summary["precision"]["autocast"]
             else ""))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train as the config from ``argv`` says; returns the run's summary (metrics, paths).

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The summary :func:`run` returned (printed on the main process).

    Raises:
        SystemExit: A launch, world-size or model-pool error (the message, no traceback).
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                            stream=sys.stderr)
    try:
        check_launch()  # before the config sets up the process group
        cfg = parse_config(argv)
        summary = run(cfg)
    except (LaunchError, WorldSizeMismatchError, PoolError) as exc:  # every rank says it, exits non-zero; no traceback
        raise SystemExit(f"error: {exc}") from None
    if summary["is_main_process"]:
        _print_summary(summary)
    return summary


if __name__ == "__main__":
    main()
