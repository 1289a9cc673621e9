#!/usr/bin/env bash
# GPU smoke test of the training path with vLLM colocated on one GPU (written for an H200; any CUDA GPU with
# >= 24 GB works at these sizes). Prints the per-step wall time and the peak GPU memory.
#
#   bash scripts/gpu_smoke.sh                                   # embedded SmolLM2-135M, scripted sub-agents
#   MODEL=Qwen/Qwen2.5-0.5B-Instruct STEPS=5 bash scripts/gpu_smoke.sh
#   SUBAGENT='vllm:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8001/v1' bash scripts/gpu_smoke.sh
#
# Env: PYTHON (default: .venv/bin/python if present, else python), MODEL (default embedded), SUBAGENT
# (default scripted:4: graphs really compile and run, the sub-agent answers instantly, so the step time is
# the orchestrator's: vLLM generation + the LoRA update), STEPS (3), GENERATIONS (8), COMPLETION_TOKENS (256),
# OUT_DIR (runs/gpu-smoke), MEM_UTIL (vLLM share of GPU memory, 0.3), TIMEOUT_S (900 for the whole run).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python; fi
fi
MODEL=${MODEL:-embedded}
SUBAGENT=${SUBAGENT:-scripted:4}
STEPS=${STEPS:-3}
GENERATIONS=${GENERATIONS:-8}
COMPLETION_TOKENS=${COMPLETION_TOKENS:-256}
OUT_DIR=${OUT_DIR:-runs/gpu-smoke}
MEM_UTIL=${MEM_UTIL:-0.3}
TIMEOUT_S=${TIMEOUT_S:-900}

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
if ! "$PY" -c "import vllm, trl, peft" 2>/dev/null; then
  echo "installing the train + vllm extras (pip install -e '.[train,vllm]')" >&2
  "$PY" -m pip install -e ".[train,vllm]"
fi
"$PY" - <<'PYEOF'
import torch, vllm, trl, peft, transformers
print(f"torch {torch.__version__} (cuda {torch.version.cuda}), vllm {vllm.__version__}, trl {trl.__version__}, "
      f"peft {peft.__version__}, transformers {transformers.__version__}; GPU: {torch.cuda.get_device_name(0)}")
PYEOF

rm -rf "$OUT_DIR"
# One process, one GPU: TRL sets RANK/WORLD_SIZE/MASTER_* for vLLM's external launcher itself.
timeout "$TIMEOUT_S" "$PY" -m training.grpo \
  --model "$MODEL" --subagent "$SUBAGENT" --dom high --dataset "masbench:depth:2,3:n=8:seed=0:split=train" \
  --use-vllm --vllm-mode colocate --vllm-gpu-memory-utilization "$MEM_UTIL" \
  --max-steps "$STEPS" --num-generations "$GENERATIONS" --per-device-train-batch-size "$GENERATIONS" \
  --gradient-accumulation-steps 1 --max-completion-length "$COMPLETION_TOKENS" --max-prompt-length 2048 \
  --reward-timeout 60 --save-steps 1000 --output-dir "$OUT_DIR"

# run_summary.json is written by training.grpo: step times from a TrainerCallback, peak memory from
# torch.cuda.max_memory_allocated() (the training process's PyTorch allocations, vLLM's included: it runs in
# the same process) and the peak RSS.
"$PY" - "$OUT_DIR" <<'PYEOF'
import json, sys
s = json.load(open(f"{sys.argv[1]}/run_summary.json"))
times = [t["wall_s"] for t in s["step_times"]]
print("step wall s:", ", ".join(f"{t:.1f}" for t in times))
if len(times) > 1:
    print(f"mean step time after the first: {sum(times[1:]) / len(times[1:]):.1f} s")
print(f"peak GPU memory (torch.cuda.max_memory_allocated): {s['peak_cuda_mb'] / 1024:.1f} GiB")
print(f"peak RSS: {s['peak_rss_mb'] / 1024:.1f} GiB; total {s['wall_s']:.0f} s")
for step in s["steps"]:
    print(f"step {step['step']}: reward {step['reward']:.3f}, valid_spec_rate {step['valid_spec_rate']:.3f}")
PYEOF
