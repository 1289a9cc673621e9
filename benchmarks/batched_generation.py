"""Local generation speed: batched vs one call at a time, prefix cache, jump-forward — side by side, one process.

Every "before" number is one call at a time (the engine with ``max_batch=1``, on a second loaded copy of the
weights) measured in the same run as the "after" number (concurrent calls decoded together), on the embedded
SmolLM2-135M-Instruct, greedy unless said otherwise:

* tokens/s per sequence and in aggregate at batch 1/4/8 (``--tokens`` new tokens per call, EOS suppressed by
  asking for a long story);
* time to first token of the orchestrator prompt (``mas_orchestra.prompts.orchestrator_prompt``) with and
  without the prefix cache (the cache is warmed with another question: only the question differs);
* an SC agent with 5 samples (the main job's most common concurrent pattern), wall before/after;
* a constrained orchestrator call with and without jump-forward (forward passes and wall);
* precision: the orchestrator prompt's prefill in float32 vs bf16, a decode step in float32 vs bf16 autocast,
  and whether greedy text changes (``--parts precision``);
* decode weights: tokens/s at batch 1/4/8 with decode steps on the float32 weights vs the int4-packed 4-bit
  layers (``decode_weights`` float32 vs int4, both batched), and how close the packed steps stay to float32
  (teacher-forced top-1 agreement and mean KL over a reply, next to the same numbers for bf16 autocast)
  (``--parts decode-weights``).

The throughput part's "after" uses the default ``decode_weights`` (``auto``: packed on a CPU with native bf16).

    HF_HUB_OFFLINE=1 python benchmarks/batched_generation.py [--quick] [--threads 1]

Absolute speeds depend on the machine's load; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STORY = "Write a long, detailed story about {}. Do not stop early."
TOPICS = ["a dragon who bakes bread", "a lighthouse keeper", "a lost robot", "two rival chefs",
          "a city under the sea", "a clockmaker's apprentice", "a desert caravan", "a talking cat"]


def _engine(threads: int, **options: Any) -> Any:
    from mas_orchestra.local.options import LocalEngineOptions

    return LocalEngineOptions(torch_threads=threads, **options)


def _one_at_a_time(threads: int, **fields: Any) -> Any:
    """The embedded model decoding one call at a time: a second loaded copy (hard links under another folder, so
    another engine) with ``max_batch=1``."""
    import tempfile

    from mas_orchestra.local.embedded import embedded_model_dir
    from mas_orchestra.models.hf_chat import load_hf_chat_model

    source = embedded_model_dir()
    copy = Path(tempfile.mkdtemp(prefix="one-at-a-time-")) / source.name
    copy.mkdir()
    for path in source.iterdir():
        os.link(path, copy / path.name)
    return load_hf_chat_model(copy, **fields, engine=_engine(threads, max_batch=1))


def _models(tokens: int, threads: int) -> tuple[Any, Any]:
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    common = {"temperature": 0.0, "max_new_tokens": tokens}
    return load_embedded_chat_model(**common, engine=_engine(threads)), _one_at_a_time(threads, **common)


async def _concurrently(model: Any, prompts: list[str], **kwargs: Any) -> tuple[float, list[Any]]:
    started = time.perf_counter()
    replies = await asyncio.gather(*(model.ainvoke(p, **kwargs) for p in prompts))
    return time.perf_counter() - started, list(replies)


def throughput(batched: Any, sequential: Any, sizes: list[int]) -> list[dict[str, Any]]:
    """Tokens/s per sequence and aggregate, the same prompts before (one after another) and after (batched)."""
    rows = []
    for size in sizes:
        prompts = [STORY.format(TOPICS[i % len(TOPICS)]) for i in range(size)]
        before_wall, before = asyncio.run(_concurrently(sequential, prompts))  # one at a time: max_batch=1
        after_wall, after = asyncio.run(_concurrently(batched, prompts))
        tokens_before = sum(m.usage_metadata["output_tokens"] for m in before)
        tokens_after = sum(m.usage_metadata["output_tokens"] for m in after)
        same = sum(a.content == b.content for a, b in zip(after, before, strict=True))
        rows.append({
            "batch": size, "tokens": tokens_after,
            "before_aggregate_tps": tokens_before / before_wall, "after_aggregate_tps": tokens_after / after_wall,
            # per sequence: its tokens over the time the caller waited for it (all calls start together)
            "before_per_seq_tps": tokens_before / size / before_wall, "after_per_seq_tps": tokens_after / size / after_wall,
            "ratio": (tokens_after / after_wall) / (tokens_before / before_wall), "identical_replies": f"{same}/{size}",
        })
    return rows


def time_to_first_token(threads: int, repeats: int) -> dict[str, Any]:
    """TTFT of the orchestrator prompt, prefix cache off vs on (warmed by another question)."""
    from mas_orchestra.models.hf_chat import load_embedded_chat_model
    from mas_orchestra.prompts import orchestrator_prompt

    common = {"temperature": 0.0, "max_new_tokens": 1}
    cold = load_embedded_chat_model(**common, engine=_engine(threads, prefix_caching=False))
    warm = load_embedded_chat_model(**common, engine=_engine(threads))
    warm.invoke(orchestrator_prompt("What is 12 times 7?"))  # fills the cache with the shared instructions
    off, on, cached, n_in = [], [], 0, 0
    for i in range(repeats):
        question = f"What is {i + 3} plus {i + 11}?"
        t = time.perf_counter()
        cold.invoke(orchestrator_prompt(question))
        off.append(time.perf_counter() - t)
        t = time.perf_counter()
        reply = warm.invoke(orchestrator_prompt(question))
        on.append(time.perf_counter() - t)
        cached, n_in = reply.response_metadata.get("cached_prompt_tokens", 0), reply.usage_metadata["input_tokens"]
    return {"prompt_tokens": n_in, "cached_tokens": cached, "ttft_off_s": statistics.median(off),
            "ttft_on_s": statistics.median(on), "ratio": statistics.median(on) / statistics.median(off)}


def self_consistency(threads: int, tokens: int) -> dict[str, Any]:
    """An SC agent with 5 samples (temperature 0.7, replies under the reply grammar as in the main job), wall
    one call at a time vs batched."""
    from agents.base import CallSettings
    from agents.self_consistency import SCAgent
    from mas_orchestra.models.constraints import reply_constrainer
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    common = {"temperature": 0.7, "max_new_tokens": tokens}
    task = "A farmer has 12 cows and buys 7 more. How many cows does the farmer have?"
    out: dict[str, Any] = {}
    for name, model in (("warm-up", load_embedded_chat_model(**common, engine=_engine(threads))),  # the grammar
                        ("before", _one_at_a_time(threads, **common)),
                        ("after", load_embedded_chat_model(**common, engine=_engine(threads)))):
        settings = CallSettings(max_tokens=tokens, constrain_reply=reply_constrainer("on", model))
        t = time.perf_counter()
        result = asyncio.run(SCAgent(model, samples=5, settings=settings).arun(task))
        out[f"{name}_s"] = time.perf_counter() - t
        out[f"{name}_tokens"] = result.usage.output_tokens  # sampled: the two runs' lengths differ
        out[f"{name}_calls"] = result.usage.calls
    # Per output token, so that different sample lengths do not decide the comparison.
    out["ratio"] = (out["after_s"] / out["after_tokens"]) / (out["before_s"] / out["before_tokens"])
    return out


def jump_forward(threads: int, tokens: int) -> dict[str, Any]:
    """One constrained orchestrator call (high DoM grammar) with jump-forward off vs on: forward passes and wall
    (the prompt's prefill is cached for both: only decoding differs)."""
    from mas_orchestra.models.constraints import OrchestrationConstraint
    from mas_orchestra.models.hf_chat import load_embedded_chat_model
    from mas_orchestra.prompts import orchestrator_prompt
    from mas_orchestra.registry import default_registry

    common = {"temperature": 0.0, "max_new_tokens": tokens}
    out: dict[str, Any] = {}
    for name, model in (("warm-up", load_embedded_chat_model(**common, engine=_engine(threads))),  # grammars, cache
                        ("off", load_embedded_chat_model(**common, engine=_engine(threads, jump_forward=False))),
                        ("on", load_embedded_chat_model(**common, engine=_engine(threads)))):
        t = time.perf_counter()
        constraint = OrchestrationConstraint(dom="high", registry=default_registry)
        reply = model.invoke(orchestrator_prompt("What is 12 times 7?"), constraint=constraint)
        out[f"{name}_s"] = time.perf_counter() - t
        out[f"{name}_tokens"] = reply.usage_metadata["output_tokens"]
        out[f"{name}_forced"] = reply.response_metadata["constrained"]["forced_tokens"]
        out[f"{name}_text"] = reply.content
        out[f"{name}_passes"] = reply.response_metadata["forward_passes"]
    out["same_text"] = out["on_text"] == out["off_text"]
    out["ratio"] = out["on_s"] / out["off_s"]
    return out


def precision(threads: int, tokens: int, repeats: int) -> dict[str, Any]:
    """Prefill and decode in float32 vs bf16 on this CPU: the orchestrator prompt's uncached prefill (time to
    first token) with ``prefill_precision`` float32 vs bfloat16, one-token decode steps of the raw model in
    float32 vs under bf16 autocast, and whether the greedy orchestration text stays the same."""
    import torch
    from transformers import DynamicCache

    from mas_orchestra.local.precision import cpu_has_native_bf16
    from mas_orchestra.models.hf_chat import load_embedded_chat_model
    from mas_orchestra.prompts import orchestrator_prompt

    out: dict[str, Any] = {"native_bf16": cpu_has_native_bf16()}
    texts = {}
    for name in ("float32", "bfloat16"):
        model = load_embedded_chat_model(temperature=0.0, max_new_tokens=1,
                                         engine=_engine(threads, prefix_caching=False, prefill_precision=name))
        model.invoke(orchestrator_prompt("What is 2 plus 2?"))  # warm-up
        times = []
        for i in range(repeats):
            t = time.perf_counter()
            reply = model.invoke(orchestrator_prompt(f"What is {i + 3} plus {i + 11}?"))
            times.append(time.perf_counter() - t)
        out[f"prefill_{name}_s"] = statistics.median(times)
        out["prompt_tokens"] = reply.usage_metadata["input_tokens"]
        texts[name] = model.invoke(orchestrator_prompt("What is 12 times 7?"), max_new_tokens=tokens).content
    out["prefill_ratio"] = out["prefill_bfloat16_s"] / out["prefill_float32_s"]
    out["same_greedy_text"] = texts["float32"] == texts["bfloat16"]
    raw = load_embedded_chat_model()._load().model
    with torch.inference_mode():
        for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
            cache = DynamicCache()
            raw(input_ids=torch.randint(100, 1000, (1, 512)), use_cache=True, cache=cache, logits_to_keep=1)
            steps = []
            for _ in range(16):
                token = torch.randint(100, 1000, (1, 1))
                t = time.perf_counter()
                with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                    raw(input_ids=token, use_cache=True, cache=cache, logits_to_keep=1)
                steps.append(time.perf_counter() - t)
                if dtype is not None:  # keep the cache in float32 for the next step, as decoding does
                    for layer in cache.layers:
                        layer.keys, layer.values = layer.keys.float(), layer.values.float()
            out[f"decode_{name}_ms"] = 1000 * statistics.median(steps)
    out["decode_ratio"] = out["decode_bfloat16_ms"] / out["decode_float32_ms"]
    return out


def decode_weights(threads: int, tokens: int, sizes: list[int]) -> dict[str, Any]:
    """Decode steps on float32 vs int4-packed weights: aggregate tokens/s per batch size (the same prompts, both
    batched, alternating), and the packed steps' distance from float32 on a teacher-forced reply."""
    import torch

    from mas_orchestra.local.packed_weights import packed_decoding
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    common = {"temperature": 0.0, "max_new_tokens": tokens}
    models = {name: load_embedded_chat_model(**common, engine=_engine(threads, prefix_caching=False,
                                                                      decode_weights=name))
              for name in ("float32", "int4")}
    models["int4"].invoke("Hi", max_new_tokens=2)  # packs the weights (once)
    out: dict[str, Any] = {"pack": vars(models["int4"]._load().model._mas_decode_pack)}
    for size in sizes:
        prompts = [STORY.format(TOPICS[i % len(TOPICS)]) for i in range(size)]
        for name, model in models.items():
            wall, replies = asyncio.run(_concurrently(model, prompts))
            out[f"b{size}_{name}_tok_s"] = sum(m.usage_metadata["output_tokens"] for m in replies) / wall
            out[f"b{size}_{name}_text"] = [m.content for m in replies]
        out[f"b{size}_ratio"] = out[f"b{size}_int4_tok_s"] / out[f"b{size}_float32_tok_s"]
        out[f"b{size}_same_text"] = sum(a == b for a, b in zip(out[f"b{size}_float32_text"], out[f"b{size}_int4_text"]))
    bundle = models["int4"]._load()
    reply = out[f"b{sizes[0]}_float32_text"][0]
    ids = bundle.tokenizer.apply_chat_template(
        [{"role": "user", "content": STORY.format(TOPICS[0])}, {"role": "assistant", "content": reply}],
        return_tensors="pt", return_dict=True)["input_ids"]
    start = int(ids.shape[1]) - min(tokens, int(ids.shape[1]) - 8)
    steps: dict[str, Any] = {}
    with torch.inference_mode():
        for name in ("float32", "int4"):
            cache = bundle.model(ids[:, :start], use_cache=True).past_key_values
            rows = []
            for position in range(start, int(ids.shape[1])):
                with packed_decoding(name == "int4"):
                    rows.append(bundle.model(ids[:, position:position + 1], past_key_values=cache).logits[0, -1])
            steps[name] = torch.stack(rows)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            steps["bf16_autocast"] = bundle.model(ids).logits[0, start:].float()  # position p predicts p + 1
    log_p = steps["float32"].log_softmax(-1)
    for name in ("int4", "bf16_autocast"):
        log_q = steps[name].log_softmax(-1)
        out[f"{name}_top1_agreement"] = float((steps[name].argmax(-1) == steps["float32"].argmax(-1)).float().mean())
        out[f"{name}_mean_kl"] = float((log_p.exp() * (log_p - log_q)).sum(-1).mean())
    out["positions"] = int(steps["float32"].shape[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 new tokens, batch 1/4 only, 1 TTFT repeat")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: shared machines)")
    parser.add_argument("--parts", default="throughput,ttft,sc,jump,precision,decode-weights",
                        help="comma list of the parts to run")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokens = 32 if args.quick else args.tokens
    sizes = [1, 4] if args.quick else [1, 4, 8]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; torch threads {args.threads}; "
          f"{tokens} new tokens per call", flush=True)
    parts = set(args.parts.split(","))
    batched, sequential = _models(tokens, args.threads)
    batched.invoke("Hi", max_new_tokens=2)  # load + warm up
    if "throughput" in parts:
        _print_throughput(batched, sequential, sizes)
    if "ttft" in parts:
        t = time_to_first_token(args.threads, 1 if args.quick else 3)
        print(f"\nTTFT orchestrator prompt ({t['prompt_tokens']} tokens, {t['cached_tokens']} from the cache): "
              f"{t['ttft_off_s']:.2f} s without cache, {t['ttft_on_s']:.2f} s with; ratio {t['ratio']:.2f}", flush=True)
    if "sc" in parts:
        s = self_consistency(args.threads, 2 * tokens)
        print(f"SC agent, 5 samples: {s['before_s']:.1f} s for {s['before_tokens']} tokens ({s['before_calls']} calls) "
              f"one call at a time, {s['after_s']:.1f} s for {s['after_tokens']} tokens ({s['after_calls']} calls) "
              f"batched; seconds per token ratio {s['ratio']:.2f}", flush=True)
    if "precision" in parts:
        p = precision(args.threads, tokens, 1 if args.quick else 3)
        print(f"precision (native bf16: {p['native_bf16']}): orchestrator prefill ({p['prompt_tokens']} tokens) "
              f"float32 {p['prefill_float32_s']:.2f} s, bf16 {p['prefill_bfloat16_s']:.2f} s (ratio "
              f"{p['prefill_ratio']:.2f}); decode step float32 {p['decode_float32_ms']:.0f} ms, bf16 autocast "
              f"{p['decode_bfloat16_ms']:.0f} ms (ratio {p['decode_ratio']:.2f}); same greedy text: "
              f"{p['same_greedy_text']}", flush=True)
    if "jump" in parts:
        j = jump_forward(args.threads, 3 * tokens)
        print(f"constrained orchestration: jump-forward off {j['off_s']:.2f} s, on {j['on_s']:.2f} s (ratio {j['ratio']:.2f});"
              f" forward passes {j['off_passes']} -> {j['on_passes']} for {j['on_tokens']} tokens; "
              f"same text: {j['same_text']}", flush=True)
    if "decode-weights" in parts:
        d = decode_weights(args.threads, 2 * tokens, sizes)
        pack = d["pack"]
        print(f"\ndecode weights: {pack['packed_layers']} layers int4 ({'exact' if pack['exact'] else 'rounded'}), "
              f"{pack['head_layers']} head bf16, {pack['packed_bytes'] / 1e6:.0f} MB, packed in {pack['seconds']:.2f} s")
        for size in sizes:
            print(f"  batch {size}: aggregate tokens/s float32 {d[f'b{size}_float32_tok_s']:.1f}, int4 "
                  f"{d[f'b{size}_int4_tok_s']:.1f} (ratio {d[f'b{size}_ratio']:.2f}x); greedy replies identical "
                  f"{d[f'b{size}_same_text']}/{size}")
        print(f"  vs float32 over {d['positions']} teacher-forced steps: int4 top-1 agreement "
              f"{d['int4_top1_agreement']:.3f}, mean KL {d['int4_mean_kl']:.5f}; bf16 autocast "
              f"{d['bf16_autocast_top1_agreement']:.3f}, {d['bf16_autocast_mean_kl']:.5f}", flush=True)


def _print_throughput(batched: Any, sequential: Any, sizes: list[int]) -> None:
    print("\nbatch  tokens  before agg t/s  after agg t/s  before per-seq  after per-seq  ratio  identical")
    for r in throughput(batched, sequential, sizes):
        print(f"{r['batch']:>5}  {r['tokens']:>6}  {r['before_aggregate_tps']:>13.1f}  {r['after_aggregate_tps']:>13.1f}"
              f"  {r['before_per_seq_tps']:>14.1f}  {r['after_per_seq_tps']:>13.1f}  {r['ratio']:>5.2f}x"
              f"  {r['identical_replies']:>9}", flush=True)


if __name__ == "__main__":
    main()
