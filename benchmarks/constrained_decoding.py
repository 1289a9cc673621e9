"""Constrained vs unconstrained orchestration on the embedded model, measured side by side in one run.

For each question (GSM8K and MATH-500 from ``../shared/data``) and each DoM, the embedded SmolLM2-135M
orchestrator writes one orchestration unconstrained (the product's default budget, 256 new tokens) and one
constrained (512, staged grammar), interleaved so machine noise hits both alike. Printed:

* valid-spec rate per (DoM, mode, data set) — "valid" = parses and validates against the offered agents;
* decoding speed: output tokens per second of generation for each mode and their ratio, and the share of
  constrained time spent computing masks;
* grammar compile time (xgrammar, embedded tokenizer, cache off) by agent cap, one-piece and staged.

    HF_HUB_OFFLINE=1 python benchmarks/constrained_decoding.py --n 10          # 10 GSM8K + 10 MATH-500
    HF_HUB_OFFLINE=1 python benchmarks/constrained_decoding.py --compile-only  # grammar compile times only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mas_orchestra.config import OrchestraConfig
from mas_orchestra.errors import SpecError
from mas_orchestra.local.options import LocalEngineOptions
from mas_orchestra.models.constraints import OrchestrationConstraint
from mas_orchestra.models.hf_chat import load_embedded_chat_model
from mas_orchestra.registry import offered_registry
from mas_orchestra.runtime import Orchestra
from mas_orchestra.settings import RunSettings
from mas_orchestra.spec import parse_orchestration
from mas_orchestra.spec.grammar import GrammarLimits, agent_stage_grammar, edge_grammar, thinking_grammar

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _rows(name: str, n: int) -> list[str]:
    with open(DATA / name, encoding="utf-8") as fh:
        return [json.loads(line)["question"] for _, line in zip(range(n), fh)]


def compile_times(caps: list[int]) -> list[dict[str, Any]]:
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from mas_orchestra.local.embedded import embedded_model_dir
    from mas_orchestra.spec.grammar import orchestration_grammar

    folder = embedded_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=49152)
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    registry = offered_registry()
    rows = []
    for cap in caps:
        limits = GrammarLimits(max_agents=cap)
        text = orchestration_grammar("high", registry, limits)
        t0 = time.perf_counter()
        compiler.compile_grammar(text)
        one_piece = time.perf_counter() - t0
        # staged: the thinking, one agent stage (the largest, k = cap) and the edge stage of cap agents
        agents = "".join(
            f"\n<agent>\n  <agent_id>A{k}</agent_id>\n  <agent_input>${{A{k - 1}}}</agent_input>\n</agent>"
            for k in range(1, cap + 1)
        )
        stage_texts = [thinking_grammar(limits.thinking_chars),
                       agent_stage_grammar(cap, "high", registry, limits, stop=cap == 2, edges=cap > 2)]
        if cap >= 2:
            stage_texts.append(edge_grammar(agents + "\n<edge>"))
        t0 = time.perf_counter()
        for stage in stage_texts:
            compiler.compile_grammar(stage)
        staged = time.perf_counter() - t0
        rows.append({"max_agents": cap, "grammar_chars": len(text), "one_piece_s": round(one_piece, 4),
                     "staged_stages_s": round(staged, 4)})
    return rows


async def orchestrate_both(questions: list[tuple[str, str]], doms: list[str], threads: int | None) -> dict[str, Any]:
    model = load_embedded_chat_model(engine=LocalEngineOptions(torch_threads=threads))
    registry = offered_registry()
    once = RunSettings(max_retries=0)
    free = {dom: Orchestra(model, model, config=OrchestraConfig(dom=dom, constrained=False), settings=once)
            for dom in doms}
    tied = {dom: Orchestra(model, model, config=OrchestraConfig(dom=dom, constrained=True), settings=once)
            for dom in doms}
    results: dict[tuple[str, str, str], list[bool]] = {}
    speed: dict[str, list[tuple[int, float]]] = {"unconstrained": [], "constrained": []}
    mask_s = 0.0
    for index, (source, question) in enumerate(questions):
        for dom in doms:
            for mode, orchestra in (("unconstrained", free[dom]), ("constrained", tied[dom])):
                model_call = orchestra._orchestrator_call
                prompt = orchestra.prompt(question)
                t0 = time.perf_counter()
                reply = await model_call.ainvoke(prompt, **orchestra._orchestrator_kwargs)
                elapsed = time.perf_counter() - t0
                out_tokens = int((reply.usage_metadata or {}).get("output_tokens", 0))
                speed[mode].append((out_tokens, elapsed))
                mask_s += float((reply.response_metadata.get("constrained") or {}).get("mask_seconds", 0.0))
                try:
                    parse_orchestration(str(reply.content), dom=dom, registry=registry)  # type: ignore[arg-type]
                    ok = True
                except SpecError:
                    ok = False
                results.setdefault((dom, mode, source), []).append(ok)
                print(json.dumps({"q": index, "data": source, "dom": dom, "mode": mode, "valid": ok,
                                  "output_tokens": out_tokens, "seconds": round(elapsed, 2)}), file=sys.stderr, flush=True)
    valid = [
        {"dom": dom, "mode": mode, "data": source, "n": len(v), "valid": sum(v), "valid_rate": round(sum(v) / len(v), 3)}
        for (dom, mode, source), v in sorted(results.items())
    ]
    rates = {}
    for mode, samples in speed.items():
        tokens = sum(t for t, _ in samples)
        seconds = sum(s for _, s in samples)
        rates[mode] = {"output_tokens": tokens, "seconds": round(seconds, 1), "tokens_per_s": round(tokens / seconds, 2),
                       "median_tokens": statistics.median(t for t, _ in samples)}
    return {
        "valid": valid,
        "speed": rates,
        "speed_ratio_constrained_over_unconstrained": round(
            rates["constrained"]["tokens_per_s"] / rates["unconstrained"]["tokens_per_s"], 3),
        "mask_share_of_constrained_time": round(mask_s / max(rates["constrained"]["seconds"], 1e-9), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5, help="questions per data set (GSM8K and MATH-500)")
    parser.add_argument("--doms", default="high,low")
    parser.add_argument("--caps", default="1,2,4,8,16")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for generation (1 resists other load on a 2-core machine; 0 = torch default)")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"compile": compile_times([int(c) for c in args.caps.split(",")])}
    print(json.dumps(report["compile"], indent=1), flush=True)
    if not args.compile_only:
        questions = [("gsm8k", q) for q in _rows("gsm8k_test.jsonl", args.n)]
        questions += [("math500", q) for q in _rows("math500.jsonl", args.n)]
        report.update(asyncio.run(orchestrate_both(questions, args.doms.split(","), args.threads or None)))
        print(json.dumps({k: v for k, v in report.items() if k != "compile"}, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
    # reference: the constraint's own worst-case budget for the defaults
    print("max_tokens_hint(default limits, high):",
          OrchestrationConstraint(dom="high", registry=offered_registry()).max_tokens_hint())
    return 0


if __name__ == "__main__":
    sys.exit(main())
