"""The main job against raw ``model.generate``: is a whole orchestrated run faster than its calls one by one?

In one process, on the embedded SmolLM2-135M-Instruct:

1. the main job — what ``mas-orchestra run QUESTION`` does (embedded orchestrator, embedded sub-agents,
   constrained decoding on, batched generation, prefix cache) — runs with a fixed seed; a callback records every
   model call's messages, output tokens, start and end;
2. the same calls are replayed with raw transformers ``model.generate`` on the same loaded model, one after
   another, greedy, each producing exactly the call's recorded number of output tokens
   (``min_new_tokens = max_new_tokens``);
3. it prints calls, output tokens, the job's wall, the replay's wall and their ratio (the target is ≤ 0.5), plus
   where the job's time went: summed call time against the wall (overlap), the most calls in flight at once,
   prompt tokens served from the prefix cache, tokens the grammar forced and forward passes.

    HF_HUB_OFFLINE=1 python benchmarks/main_job.py [--question Q] [--repeat N] [--threads T] [--seed S]

Absolute seconds depend on the machine's load; the ratio, measured side by side, is what to compare.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.callbacks import BaseCallbackHandler

DEFAULT_QUESTION = "What is 12 times 7?"


class CallRecorder(BaseCallbackHandler):
    """Every chat-model call of a run: its messages, output tokens, batching metadata, start and end."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._open: dict[UUID, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: UUID,
                            tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        from mas_orchestra.runtime.usage import ORCHESTRATOR_TAG

        node = "orchestrator" if ORCHESTRATOR_TAG in (tags or []) else str((metadata or {}).get("langgraph_node", "?"))
        with self._lock:
            self._open[run_id] = {"messages": messages[0], "node": node, "start": time.perf_counter()}

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        end = time.perf_counter()
        with self._lock:
            call = self._open.pop(run_id, None)
        if call is None:
            return
        message = response.generations[0][0].message
        usage = message.usage_metadata or {}
        meta = message.response_metadata or {}
        call.update(end=end, input_tokens=int(usage.get("input_tokens", 0)),
                    output_tokens=int(usage.get("output_tokens", 0)),
                    cached=int(meta.get("cached_prompt_tokens", 0)), passes=int(meta.get("forward_passes", 0)),
                    forced=int((meta.get("constrained") or {}).get("forced_tokens", 0)))
        with self._lock:
            self.calls.append(call)


def _most_in_flight(calls: list[dict[str, Any]]) -> int:
    events = sorted([(c["start"], 1) for c in calls] + [(c["end"], -1) for c in calls])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def run_job(question: str, seed: int) -> tuple[float, list[dict[str, Any]], Any]:
    """The CLI's ``run`` path: an :class:`Orchestra` over embedded models with the CLI's defaults."""
    import torch

    from mas_orchestra.offers import subagent_from_args
    from mas_orchestra.runtime.orchestra import Orchestra
    from mas_orchestra.settings import RunSettings

    random.seed(seed)
    torch.manual_seed(seed)
    orchestra = Orchestra("embedded", subagent_from_args(None), settings=RunSettings())
    recorder = CallRecorder()
    started = time.perf_counter()
    outcome = orchestra.run(question, callbacks=[recorder])
    wall = time.perf_counter() - started
    recorder.calls.sort(key=lambda c: c["start"])
    return wall, recorder.calls, outcome


def replay(bundle: Any, calls: list[dict[str, Any]]) -> tuple[float, int]:
    """Raw ``model.generate`` of each call's prompt, one after another, exactly its output token count (each
    call's seconds go to ``call["replay_s"]``)."""
    import torch

    from mas_orchestra.models.hf_chat import _to_chat_dicts

    tok, model = bundle.tokenizer, bundle.model
    total, produced = 0.0, 0
    for call in calls:
        enc = tok.apply_chat_template(_to_chat_dicts(call["messages"]), add_generation_prompt=True,
                                      return_dict=True, return_tensors="pt")
        n = max(1, call["output_tokens"])  # an empty reply still cost a prefill and one step
        with torch.inference_mode():
            started = time.perf_counter()
            out = model.generate(**enc, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
            call["replay_s"] = time.perf_counter() - started
            total += call["replay_s"]
        produced += int(out.shape[1] - enc["input_ids"].shape[1])
    return total, produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--question", default=DEFAULT_QUESTION, help=f"the question (default {DEFAULT_QUESTION!r})")
    parser.add_argument("--repeat", type=int, default=1, help="jobs (each followed by its replay) to run")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads for job and replay (default: the runtime's rule, MAS_TORCH_THREADS)")
    parser.add_argument("--seed", type=int, default=0, help="torch/random seed set before each job")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        os.environ["MAS_TORCH_THREADS"] = str(args.threads)

    import torch

    from mas_orchestra.local.threads import default_torch_threads
    from mas_orchestra.models.hf_chat import load_embedded_chat_model

    threads = default_torch_threads()
    torch.set_num_threads(threads)  # the replay's threads; the job's calls use the same rule
    bundle = load_embedded_chat_model()._load()  # the Orchestra's embedded models share this loaded model
    with torch.inference_mode():  # warm-up: the first forward pass pays one-off costs
        enc = bundle.tokenizer("warm up", return_tensors="pt")
        bundle.model.generate(**enc, max_new_tokens=2, do_sample=False, pad_token_id=bundle.tokenizer.pad_token_id)
    print(f"question {args.question!r}, torch threads {threads}, load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    ratios = []
    for index in range(args.repeat):
        wall, calls, outcome = run_job(args.question, args.seed + index)
        replay_wall, replay_tokens = replay(bundle, calls)
        tokens = sum(c["output_tokens"] for c in calls)
        busy = sum(c["end"] - c["start"] for c in calls)
        ratio = wall / replay_wall if replay_wall else float("nan")
        ratios.append(ratio)
        kinds = ", ".join(f"{k}x{n}" for k, n in outcome.spec.agent_counts().items()) if outcome.spec else "no spec"
        print(f"\n[{index + 1}/{args.repeat}] status {outcome.status.value}, answer {outcome.answer!r}, agents: "
              f"{kinds or 'direct answer'}")
        print(f"  calls {len(calls)}, output tokens {tokens} (replay produced {replay_tokens}), "
              f"prompt tokens {sum(c['input_tokens'] for c in calls)} "
              f"({sum(c['cached'] for c in calls)} from the prefix cache)")
        print(f"  job wall {wall:.1f} s, replay wall {replay_wall:.1f} s, ratio job/replay {ratio:.2f} "
              "(target <= 0.5)")
        print(f"  summed call time {busy:.1f} s = {busy / wall:.2f}x the job wall; at most "
              f"{_most_in_flight(calls)} calls in flight; forward passes {sum(c['passes'] for c in calls)}, "
              f"grammar-forced tokens {sum(c['forced'] for c in calls)}")
        for n, call in enumerate(calls):
            print(f"    call {n} {call['node']:<12} +{call['start'] - calls[0]['start']:6.1f} s, "
                  f"{call['end'] - call['start']:5.1f} s (replay {call['replay_s']:5.1f} s), "
                  f"in {call['input_tokens']:5d} (cached {call['cached']:5d}), out {call['output_tokens']:4d}, "
                  f"passes {call['passes']:4d}, forced {call['forced']:4d}")
    if len(ratios) > 1:
        print(f"\nmedian ratio job/replay over {len(ratios)} jobs: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
