"""The checks of :meth:`training.config.OrchestraGRPOConfig.validate`: every bad value, named with what is valid."""

from __future__ import annotations

from typing import Any

from mas_orchestra.bench.grading import VALID_KINDS

__all__ = ["problems"]


def problems(cfg: Any) -> list[str]:
    """What is wrong with ``cfg``: one line per bad field (its name, its value, what would be valid).

    Args:
        cfg: The :class:`~training.config.OrchestraGRPOConfig`, with its ``auto`` options already resolved.

    Returns:
        The problems; empty when every value is valid.
    """
    found: list[str] = []

    def choice(name: str, valid: tuple[str, ...]) -> None:
        if getattr(cfg, name) not in valid:
            found.append(f"{name}={getattr(cfg, name)!r}: valid values are {', '.join(valid)}")

    choice("dom", ("high", "low"))
    choice("grader", VALID_KINDS)
    choice("cost_metric", ("subagent_calls", "total_tokens", "cost_usd"))
    choice("cost_reward", ("linear", "group"))
    choice("partial_credit_scope", ("final", "system"))
    if cfg.partial_credit_weight and not 0 < cfg.partial_credit_weight < cfg.final_answer_weight:
        found.append(f"partial_credit_weight={cfg.partial_credit_weight!r}: must be in [0, "
                        f"final_answer_weight={cfg.final_answer_weight!r})")
    if cfg.cost_reward == "group" and not 0 <= cfg.cost_weight < 1:
        found.append(f"cost_weight={cfg.cost_weight!r}: with cost_reward group it must be in [0, 1), so a "
                        "correct answer always outscores a wrong one")
    for name, parse in (("subagent", lambda: cfg.subagent_pool), ("subagent_defaults",
                        lambda: cfg.subagent_default_map), ("prices", lambda: cfg.price_table)):
        try:
            parse()
        except ValueError as exc:
            found.append(f"{name}: {exc}")
    reporters = [cfg.report_to] if isinstance(cfg.report_to, str) else list(cfg.report_to or [])
    if any(r not in ("none", "tensorboard", "wandb") for r in reporters):
        found.append(f"report_to={cfg.report_to!r}: valid values are none, tensorboard, wandb")
    choice("vllm_mode", ("colocate", "server"))
    for name in ("max_steps", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "max_completion_length", "lora_r", "lora_alpha", "reward_concurrency",
                 "vllm_tensor_parallel_size", "checkpoint_every_n_layers", "eval_steps", "val_samples"):
        if (getattr(cfg, name) or 0) < 1:
            found.append(f"{name}={getattr(cfg, name)!r}: must be >= 1")
    if cfg.lora_layers is not None and cfg.lora_layers < 1:
        found.append(f"lora_layers={cfg.lora_layers!r}: must be >= 1 (or null: every decoder layer)")
    for name in ("logging_steps", "save_steps"):  # below 1: a share of max_steps (TrainingArguments)
        if not getattr(cfg, name) > 0:
            found.append(f"{name}={getattr(cfg, name)!r}: must be > 0 (>= 1: every N steps)")
    if cfg.eval_steps and cfg.eval_steps != int(cfg.eval_steps):
        found.append(f"eval_steps={cfg.eval_steps!r}: must be a whole number of steps")
    if (cfg.num_generations or 0) < 2:
        found.append("num_generations must be >= 2 (GRPO compares completions within a group)")
    completions = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    if cfg.num_generations and completions % cfg.num_generations:
        found.append(
            f"per_device_train_batch_size x gradient_accumulation_steps = {completions} completions per device "
            f"and step must be a multiple of num_generations={cfg.num_generations}"
        )
    if cfg.downsample_generations is not None:
        keep = cfg.downsample_generations
        per_step = cfg.steps_per_generation or cfg.gradient_accumulation_steps
        if not 2 <= keep < (cfg.num_generations or 0):
            found.append(f"downsample_generations={keep!r}: must be in [2, num_generations={cfg.num_generations!r}) "
                         "(2: the least a group compares; null: train on every rollout)")
        elif cfg.num_generations and (cfg.per_device_train_batch_size * per_step // cfg.num_generations * keep
                                      ) % per_step:
            found.append(f"downsample_generations={keep!r}: the kept rollouts of a generation batch "
                         f"({cfg.per_device_train_batch_size * per_step // cfg.num_generations} groups x {keep}) "
                         f"must split evenly into steps_per_generation={per_step} micro-batches")
        if cfg.multi_objective_aggregation != "sum_then_normalize":
            found.append("downsample_generations: the kept rollouts are chosen by their summed reward; use "
                         "multi_objective_aggregation: sum_then_normalize")
    if cfg.reward_timeout <= 0:
        found.append("reward_timeout must be > 0")
    if cfg.head_chunk_logits < 0:
        found.append(f"head_chunk_logits={cfg.head_chunk_logits!r}: must be >= 0 (0 = the output head in one piece)")
    if not cfg.prompt_grad and cfg.shared_prefix is False:
        found.append("prompt_grad=false: the prompt runs without gradient only in the shared-prefix forward; "
                     "set shared_prefix: true (or leave it unset on a CPU), or drop prompt_grad")
    if not cfg.forced_token_loss and (cfg.use_vllm or cfg.batched_rollouts is False or not cfg.constrained):
        found.append("forced_token_loss=false: the forced tokens are known only to the batched decoder under the "
                     "grammar; use constrained: true with batched rollouts (batched_rollouts unset on a CPU, or "
                     "true; not vLLM), or drop forced_token_loss")
    if not 0 < cfg.vllm_gpu_memory_utilization <= 1:
        found.append("vllm_gpu_memory_utilization must be in (0, 1]")
    if cfg.vllm_mode == "server" and cfg.use_vllm and not cfg.vllm_server_base_url:
        found.append("--vllm-mode server needs --vllm-server-base-url")
    if cfg.grader == "judge" and not cfg.judge:
        found.append("--grader judge needs --judge <model string>")
    if cfg.agent_kinds is not None:
        from mas_orchestra.registry import default_registry

        unknown = [name for name in cfg.agent_kinds if name not in default_registry]
        if unknown:
            found.append(f"agents: unknown kind(s) {', '.join(unknown)}; valid: "
                            f"{', '.join(k.name for k in default_registry.kinds())}")
    if cfg.limit is not None and cfg.limit < 1:
        found.append("limit must be >= 1")
    if cfg.val_limit is not None and cfg.val_limit < 1:
        found.append("val_limit must be >= 1")
    if cfg.val_temperature < 0:
        found.append("val_temperature must be >= 0 (0 = greedy)")
    return found
