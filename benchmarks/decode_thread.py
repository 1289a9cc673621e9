"""Decoding on the thread that trains against decoding on a worker thread (embedded SmolLM2-135M, CPU).

GRPO alternates a training step (forward and backward: OpenMP parallel regions on the main thread) with rollout
decoding. The batched decoder used to decode on a worker thread of its own; this benchmark runs the same decode
passes both ways, side by side in one process, alternating rounds:

* ``worker``: each round's passes run on a new thread (as a ``GenerationBatcher`` worker did per rollout call);
* ``caller``: the passes run on the main thread (``GenerationBatcher.run``, what the rollouts use now).

Each round first runs a training-like forward + backward on the main thread, then the decode passes (4 rows
at a ~900-token context, the CPU learning recipe's rollout shape), then the forward + backward again, and
reports the median decode pass and the median forward + backward time after each kind of decoding.

    HF_HUB_OFFLINE=1 python benchmarks/decode_thread.py [--rounds 4] [--passes 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _decode(model: Any, rows: int, context: int, passes: int, seed: int) -> list[float]:
    """``passes`` single-token decode passes of ``rows`` rows over a ``context``-token prompt; seconds each."""
    import torch
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        cache = DynamicCache()
        prompt = torch.randint(100, 40000, (1, context), generator=generator)
        model(input_ids=prompt, use_cache=True, past_key_values=cache, logits_to_keep=1)
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.repeat(rows, 1, 1, 1), layer.values.repeat(rows, 1, 1, 1)
        mask = torch.ones(rows, context, dtype=torch.long)
        times = []
        for _ in range(passes):
            mask = torch.cat([mask, torch.ones(rows, 1, dtype=torch.long)], dim=1)
            started = time.perf_counter()
            model(input_ids=torch.randint(100, 40000, (rows, 1), generator=generator), attention_mask=mask,
                  position_ids=torch.full((rows, 1), mask.shape[1] - 1), use_cache=True, past_key_values=cache,
                  logits_to_keep=1)
            times.append(time.perf_counter() - started)
    return times


def _train_step(model: Any, tokens: int) -> float:
    """A forward + backward over ``tokens`` tokens on the calling thread (gradients discarded); seconds."""
    import torch

    ids = torch.randint(100, 40000, (1, tokens), generator=torch.Generator().manual_seed(0))
    started = time.perf_counter()
    loss = model(input_ids=ids, logits_to_keep=64).logits.logsumexp(-1).mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per kind")
    parser.add_argument("--passes", type=int, default=20, help="decode passes per round")
    parser.add_argument("--rows", type=int, default=4, help="rows decoded together")
    parser.add_argument("--context", type=int, default=900, help="prompt tokens before decoding")
    parser.add_argument("--train-tokens", type=int, default=512, help="tokens of the forward + backward")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from mas_orchestra.local.embedded import embedded_model_dir

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(embedded_model_dir()))
    for parameter in model.parameters():  # like LoRA: a few trainable tensors, the rest frozen
        parameter.requires_grad_(False)
    for layer in model.model.layers:
        layer.self_attn.q_proj.weight.requires_grad_(True)
    decode: dict[str, list[float]] = {"worker": [], "caller": []}
    train: dict[str, list[float]] = {"worker": [], "caller": []}
    for round_index in range(args.rounds):
        for kind in ("worker", "caller"):
            _train_step(model, args.train_tokens)
            model.eval()
            if kind == "caller":
                decode[kind] += _decode(model, args.rows, args.context, args.passes, round_index)
            else:
                box: list[list[float]] = []

                def on_worker(out: list[list[float]] = box, seed: int = round_index) -> None:
                    out.append(_decode(model, args.rows, args.context, args.passes, seed))

                worker = threading.Thread(target=on_worker)
                worker.start()
                worker.join()
                decode[kind] += box[0]
            model.train()
            train[kind].append(_train_step(model, args.train_tokens))
    print(f"{args.rows} rows at a {args.context}-token context, {args.threads} torch threads, "
          f"{args.rounds} rounds x {args.passes} passes")
    print(f"{'decoding on':<12} {'decode pass ms (median)':>24} {'forward+backward s after (median)':>34}")
    for kind in ("worker", "caller"):
        print(f"{kind:<12} {1000 * statistics.median(decode[kind]):>24.1f} {statistics.median(train[kind]):>34.2f}")
    print(f"caller / worker: decode pass {statistics.median(decode['caller']) / statistics.median(decode['worker']):.2f}x,"
          f" forward+backward {statistics.median(train['caller']) / statistics.median(train['worker']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
