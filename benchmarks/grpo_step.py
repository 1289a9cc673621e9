"""A CPU GRPO step before and after the training-side speed work: seconds and peak RSS per phase, side by side.

Both cases run ``recipes/cpu_learning.yaml`` (embedded SmolLM2-135M, LoRA, constrained rollouts, the MASBench
calculator as sub-agent) for ``--steps`` steps with ``--profile-phases``, one after the other, alternating for
``--rounds`` rounds, on the same machine:

* ``before``: ``model.generate`` rollouts, every row's whole prompt in the forward, LoRA dropout 0.05, no
  gradient checkpointing, two completions per micro-batch, glibc's default allocator behaviour, key/values copied
  per query head (``TRANSFORMERS_SDPA_FORCE_GQA=0``) — the recipe as it was;
* ``unmerged``: the recipe as it is, but rollouts sampled through the unmerged LoRA adapter in the trainer's
  mode (``--no-merged-sampling``, how the batched rollouts sampled before ``sampling_policy``);
* ``float32``: the recipe as it is, but the training forward and backward in float32 (``--bf16 false``; the
  same as ``after`` on a CPU without native bf16);
* ``unchunked``: the recipe as it is, but the output head scores every completion token in one piece
  (``--head-chunk-logits 0``: the batch's vocabulary-sized log-softmax is kept for backward) instead of in
  checkpointed chunks;
* ``f32decode``: the recipe as it is, but rollout decode steps on the float32 weights with LoRA merged
  (``MAS_DECODE_WEIGHTS=float32``) instead of the packed int4 base layers with LoRA beside them;
* ``padded``: the recipe as it is, but the rollouts' decode batch in the padded layout
  (``MAS_BATCH_LAYOUT=padded``: every row fed as many columns as the longest pending run, the group's prompt held
  once per row) instead of the ragged one (:mod:`mas_orchestra.local.ragged`);
* ``concatkv``: the padded layout, and its key/values concatenated anew at every decode step and
  jump-forward padding kept (as before :mod:`mas_orchestra.local.batch_cache`; ``benchmarks/grpo_variant.py``);
* ``heapreuse``: the recipe as it is, but while decoding the heap serves blocks below 32 MiB (mmap threshold
  lifted too, as ``reuse_freed_memory`` did before; ``benchmarks/grpo_variant.py``);
* ``densemask``: the recipe as it is, but the shared-prefix forward's attention under the dense ``[T, T]`` mask
  instead of by segment (:mod:`training.segmented_attention`; ``benchmarks/grpo_variant.py``);
* ``decodepass``: the recipe as it is, but each ragged decode pass as before its four changes (own-column
  attention padded to the longest pending run, the shared prompt's attention as plain products, PEFT's forward
  for each LoRA layer over its packed base, packed layers for at most 32 positions; ``benchmarks/grpo_variant.py``);
* ``nopromptgrad``: the recipe with its prompts outside the gradient (``--prompt-grad false``: each prompt's
  key/values taken from the rollouts' prefill);
* ``promptrun``: the same, but the training forward runs each prompt itself without gradient instead of taking
  the rollouts' key/values (``benchmarks/grpo_variant.py``);
* ``kcache1024``: the recipe with PyTorch's ideep and oneDNN kernel caches at their library default of 1024
  entries each instead of :data:`mas_orchestra.local.precision.KERNEL_CACHE_ENTRIES` (run ``--cases
  after,kcache1024``);
* ``recomputeattn``: the recipe with each layer's attention recomputed in backward under checkpointing
  (``--checkpoint-keeps-attention false``) instead of kept from the forward (:func:`training.hooks.keep_attention_outputs`);
* ``top15``, ``top10``: the recipe with its adapters on the last 15 or 10 decoder layers only
  (``--lora-layers N``; the backward stops at the lowest adapted layer) instead of the recipe's setting (run them
  with ``--cases after,top15,top10``: each is compared with the first case run);
* ``keep4``: the recipe training on the 4 most varied of each group's rollouts (``--downsample-generations 4``,
  :mod:`training.downsampling`; run ``--cases after,keep4``: the training phases see half the rows, the rollouts
  are sampled as before);
* ``after``: the recipe as it is (batched rollouts sampled in eval mode from merged LoRA weights with freed
  heap memory reused while decoding, shared-prefix packed forward of each completion up to its end, no
  dropout, gradient checkpointing, whole group in one micro-batch, heap released, grouped-query attention in
  place, rollouts decoded on the training thread in the ragged layout, the output head scored in checkpointed
  chunks, and on a CPU with native bf16 the forward and backward under
  bf16 autocast, the rollouts' prompts prefilled in bf16 and their decode steps on the int4-packed base layers).

Per case: mean seconds per phase over the steps after the first (the first carries one-off warm-up), the highest
peak RSS of each phase, the step wall, and ``ratio`` = case / the first case run; the last lines compare
``after`` with ``unmerged``, ``float32``, ``unchunked``, ``f32decode``, ``padded``, ``concatkv``, ``heapreuse``,
``densemask``, ``decodepass``, ``nopromptgrad``, ``promptrun`` and ``recomputeattn`` phase by phase. ``--recipe`` runs
another recipe (e.g. ``recipes/cpu_wiring.yaml``, whose eight ~300-token completions per step make the head's
memory show).

    python benchmarks/grpo_step.py [--steps 3] [--rounds 1] [--cases before,unmerged,float32,after]
    python benchmarks/grpo_step.py --recipe recipes/cpu_wiring.yaml --cases unchunked,after
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "cpu_learning.yaml"
PHASES = ("generate", "reward", "forward", "backward", "optimizer")
CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "before": ([
        "--batched-rollouts", "false", "--shared-prefix", "false", "--no-release-memory", "--lora-dropout", "0.05",
        "--gradient-checkpointing", "false", "--per-device-train-batch-size", "2",
        "--gradient-accumulation-steps", "2", "--head-chunk-logits", "0",
    ], {"TRANSFORMERS_SDPA_FORCE_GQA": "0"}),
    "unmerged": (["--no-merged-sampling"], {}),
    "float32": (["--bf16", "false"], {}),
    "unchunked": (["--head-chunk-logits", "0"], {}),
    "f32decode": ([], {"MAS_DECODE_WEIGHTS": "float32"}),
    "padded": ([], {"MAS_BATCH_LAYOUT": "padded"}),
    "concatkv": ([], {"MAS_BATCH_LAYOUT": "padded"}),
    "heapreuse": ([], {}),
    "densemask": ([], {}),
    "decodepass": ([], {}),
    "nopromptgrad": (["--prompt-grad", "false"], {}),
    "promptrun": (["--prompt-grad", "false"], {}),
    "kcache1024": ([], {"LRU_CACHE_CAPACITY": "1024", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"}),
    "top15": (["--lora-layers", "15"], {}),
    "top10": (["--lora-layers", "10"], {}),
    "recomputeattn": (["--checkpoint-keeps-attention", "false"], {}),
    "keep4": (["--downsample-generations", "4"], {}),
    "after": ([], {}),
}
#: Cases whose "before" is no flag any more: run through benchmarks/grpo_variant.py, which undoes the change.
VARIANT_CASES = ("concatkv", "heapreuse", "densemask", "decodepass", "promptrun")


def _one(case: str, steps: int, out: Path, recipe: Path = RECIPE) -> dict[str, Any]:
    flags, extra_env = CASES[case]
    runner = [str(ROOT / "benchmarks" / "grpo_variant.py"), case] if case in VARIANT_CASES else ["-m", "training.grpo"]
    command = [sys.executable, *runner, "--config", str(recipe), "--output-dir", str(out),
               "--max-steps", str(steps), "--save-steps", "1000", "--no-merge", "--profile-phases", *flags]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra_env}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{case} run failed:\n{done.stderr[-3000:]}")
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logs = [entry for entry in history if "profile/generate_s" in entry]
    summary = json.loads((out / "run_summary.json").read_text())
    return {"logs": logs, "walls": [s["wall_s"] for s in summary["step_times"]], "peak_rss_mb": summary["peak_rss_mb"]}


def run(steps: int = 3, rounds: int = 1, cases: tuple[str, ...] = tuple(CASES), recipe: Path = RECIPE
        ) -> list[dict[str, Any]]:
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(rounds):
            for case in cases:
                runs[case].append(_one(case, steps, Path(tmp) / f"{case}-{index}", recipe))
    rows = []
    for case, results in runs.items():
        later = [log for r in results for log in r["logs"][1:]] or [log for r in results for log in r["logs"]]
        walls = [w for r in results for w in r["walls"][1:]] or [w for r in results for w in r["walls"]]
        row: dict[str, Any] = {"benchmark": "grpo_step", "case": case, "steps_measured": len(walls),
                               "wall_s_per_step": round(statistics.mean(walls), 2),
                               "peak_rss_mb": round(max(r["peak_rss_mb"] for r in results))}
        for phase in PHASES:
            row[f"{phase}_s"] = round(statistics.mean(float(log.get(f"profile/{phase}_s", 0.0)) for log in later), 2)
            row[f"{phase}_peak_rss_mb"] = round(max(float(log.get(f"profile/{phase}_peak_rss_mb", 0.0))
                                                    for r in results for log in r["logs"]))
        rows.append(row)
    base = rows[0]
    for row in rows:
        _ratios(row, base)
    return rows


def _ratios(row: dict[str, Any], base: dict[str, Any], prefix: str = "") -> None:
    row[f"{prefix}ratio"] = round(row["wall_s_per_step"] / base["wall_s_per_step"], 3)
    row[f"{prefix}peak_rss_ratio"] = round(row["peak_rss_mb"] / base["peak_rss_mb"], 3)
    for phase in PHASES:
        if base[f"{phase}_s"]:
            row[f"{prefix}{phase}_ratio"] = round(row[f"{phase}_s"] / base[f"{phase}_s"], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--recipe", type=Path, default=RECIPE, help="the recipe every case runs")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, in run order: " + ", ".join(CASES))
    args = parser.parse_args()
    cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    rows = run(args.steps, args.rounds, cases, args.recipe.resolve())
    print(f"{'case':<9} {'s/step':>7} {'peak MiB':>9}  " + "  ".join(f"{p:>16}" for p in PHASES))
    for row in rows:
        cells = "  ".join(f"{row[f'{p}_s']:>6.2f}s {row[f'{p}_peak_rss_mb']:>6}M" for p in PHASES)
        print(f"{row['case']:<9} {row['wall_s_per_step']:>7.2f} {row['peak_rss_mb']:>9}  {cells}")
    by_case = {row["case"]: row for row in rows}
    for row in rows[1:]:
        print(f"{row['case']}/{rows[0]['case']}: step {row['ratio']}, peak RSS {row['peak_rss_ratio']}, "
              + ", ".join(f"{p} {row[f'{p}_ratio']}" for p in PHASES if f"{p}_ratio" in row))
    for other in ("unmerged", "float32", "unchunked", "f32decode", "padded", "concatkv", "heapreuse", "densemask",
                  "decodepass", "nopromptgrad", "promptrun", "recomputeattn"):  # the one change each case leaves out, against the recipe as it is
        if "after" in by_case and other in by_case and rows[0]["case"] != other:
            after = by_case["after"]
            _ratios(after, by_case[other], prefix=f"vs_{other}_")
            print(f"after/{other}: step {after[f'vs_{other}_ratio']}, peak RSS {after[f'vs_{other}_peak_rss_ratio']}, "
                  + ", ".join(f"{p} {after[f'vs_{other}_{p}_ratio']}" for p in PHASES
                              if f"vs_{other}_{p}_ratio" in after))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
