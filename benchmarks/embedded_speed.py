"""Speed of the embedded SmolLM2-135M-Instruct model on this machine.

Prints: the one-off GGUF -> safetensors conversion time, the cached load time, greedy
generation speed (tokens/s over 64 new tokens) and peak RSS.

    HF_HUB_OFFLINE=1 python benchmarks/embedded_speed.py            # fresh temp cache
    HF_HUB_OFFLINE=1 python benchmarks/embedded_speed.py --cache-dir ~/.cache/mas-orchestra

The cached-load / generation part also runs in a child process (``--child``) so its
peak RSS is not inflated by the conversion.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mas_orchestra.local.embedded import embedded_model_dir
from mas_orchestra.models.hf_chat import HFChatModel

PROMPT = "Write a long, detailed story about a dragon who learns to bake bread."


def _peak_rss_mib(fresh: bool = False) -> float:
    """Peak RSS of this process in MiB (``resource.getrusage``).

    ``ru_maxrss`` survives ``fork``+``exec``, so a child started after the conversion
    would report the parent's peak; with ``fresh`` the per-address-space high-water
    mark (``VmHWM``, Linux) is used instead where available.
    """
    if fresh:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def measure_cached(model_dir: Path, tokens: int, repeats: int, threads: int | None) -> dict[str, float]:
    """Load the cached model and time greedy generation of exactly ``tokens`` tokens."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401  (import cost)

    import_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    chat = HFChatModel(model_path=str(model_dir), temperature=0.0, max_new_tokens=tokens)
    bundle = chat._load()
    load_s = time.perf_counter() - t0

    tok, model = bundle.tokenizer, bundle.model
    enc = tok.apply_chat_template(
        [{"role": "user", "content": PROMPT}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    gen = {
        "max_new_tokens": tokens,
        "min_new_tokens": tokens,
        "do_sample": False,
        "pad_token_id": tok.pad_token_id,
    }
    with torch.inference_mode():
        model.generate(**enc, **{**gen, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
        times, cpu_times = [], []
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            out = model.generate(**enc, **gen)
            times.append(time.perf_counter() - t)
            cpu_times.append(time.process_time() - c)
    n_new = int(out.shape[1] - enc["input_ids"].shape[1])
    t = time.perf_counter()
    msg = chat.invoke(PROMPT)  # the same through the LangChain path
    invoke_s = time.perf_counter() - t
    return {
        "import_s": import_s,
        "load_s": load_s,
        "prompt_tokens": int(enc["input_ids"].shape[1]),
        "new_tokens": n_new,
        "gen_s_median": statistics.median(times),
        "tokens_per_s": n_new / statistics.median(times),
        "cpu_s_median": statistics.median(cpu_times),
        "invoke_tokens_per_s": msg.usage_metadata["output_tokens"] / invoke_s,
        "torch_threads": torch.get_num_threads(),
        "peak_rss_mib": _peak_rss_mib(fresh=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", help="cache root to use (default: a fresh temporary one)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--child", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if args.child:
        print(json.dumps(measure_cached(Path(args.child), args.tokens, args.repeats, args.threads)))
        return

    tmp = None if args.cache_dir else tempfile.mkdtemp(prefix="mas-orchestra-bench-")
    root = Path(args.cache_dir or tmp)
    try:
        t0 = time.perf_counter()
        model_dir = embedded_model_dir(root)
        convert_s = time.perf_counter() - t0
        convert_rss = _peak_rss_mib()
        size_mib = sum(p.stat().st_size for p in model_dir.iterdir()) / 2**20
        print(f"model dir:           {model_dir} ({size_mib:.0f} MiB)")
        print(f"conversion (first):  {convert_s:.1f} s   (0 if the cache already existed)")
        print(f"peak RSS after conv: {convert_rss:.0f} MiB")

        t0 = time.perf_counter()
        embedded_model_dir(root)
        print(f"cache lookup:        {(time.perf_counter() - t0) * 1000:.2f} ms")

        child = subprocess.run(
            [sys.executable, __file__, "--child", str(model_dir), "--tokens", str(args.tokens),
             "--repeats", str(args.repeats), "--threads", str(args.threads)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        r = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"cached load:         {r['load_s']:.2f} s   (fresh process; + {r['import_s']:.2f} s importing)")
        print(
            f"greedy generation:   {r['new_tokens']} tokens in {r['gen_s_median']:.2f} s (median of "
            f"{args.repeats}) = {r['tokens_per_s']:.1f} tokens/s  [prompt {r['prompt_tokens']} tokens, "
            f"{r['torch_threads']} torch threads]"
        )
        print(
            f"                     CPU time {r['cpu_s_median']:.2f} s per run; load average now "
            f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (other processes slow this down)"
        )
        print(f"via HFChatModel:     {r['invoke_tokens_per_s']:.1f} tokens/s (invoke, incl. templating)")
        print(f"peak RSS (load+gen): {r['peak_rss_mib']:.0f} MiB")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
