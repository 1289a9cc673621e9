"""Constrained vs unconstrained orchestration on the embedded model, measured side by side in one run.

For each question (GSM8K and MATH-500 from ``../shared/data``) and each DoM, the embedded SmolLM2-135M
orchestrator writes one orchestration unconstrained (the product's default budget, 256 new tokens) and one
constrained (512, staged grammar), interleaved so machine noise hits both alike. Printed:

* valid-spec rate per (DoM, mode, data set) — "valid" = parses and validates against the offered agents;
* decoding speed: output tokens per second of generation for each mode and their ratio, and the share of
  constrained time spent computing masks;
* grammar compile time (xgrammar, embedded tokenizer, cache off) by agent cap, one-piece and staged;
* with ``--input-masks``: mask time per token while writing chains of 2-4 agents whose inputs reference the
  previous agent (``${A1}``), under the one-piece grammar and under the staged decoder (stage compiles
  included), and their ratio. Inputs with references were the slow part of constrained GRPO rollouts.

    HF_HUB_OFFLINE=1 python benchmarks/constrained_decoding.py --n 10          # 10 GSM8K + 10 MATH-500
    HF_HUB_OFFLINE=1 python benchmarks/constrained_decoding.py --compile-only  # grammar compile times only
    HF_HUB_OFFLINE=1 python benchmarks/constrained_decoding.py --input-masks   # referencing inputs only
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
from mas_orchestra.spec import parse_orchestration, spec_from_data
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


def _chain(n: int) -> str:
    """A wired chain of n CoT agents, each input referencing the previous agent's result."""
    nodes = [{"id": f"A{k}", "agent": "cot", "description": f"Step {k}", "params": {"temperature": 0.5},
              "input": (f"Given ${{A{k - 1}}}, work out the next intermediate result the task needs." if k > 1
                        else "Work out the intermediate result the task needs first.")} for k in range(1, n + 1)]
    edges = [{"source": f"A{k}", "target": f"A{k + 1}"} for k in range(1, n)]
    return spec_from_data({"thinking": "Chain the steps.", "nodes": nodes, "edges": edges}).to_xml()


def input_mask_times(chains: list[int], repeats: int, max_new_tokens: int = 1024) -> list[dict[str, Any]]:
    """Mask milliseconds per token while writing wired chains: one-piece grammar vs the staged decoder."""
    import torch
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from mas_orchestra.local.decoding import ConstrainedLogitsProcessor
    from mas_orchestra.local.embedded import embedded_model_dir
    from mas_orchestra.spec.grammar import orchestration_grammar

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=49152, stop_token_ids=[tokenizer.eos_token_id])
    registry = offered_registry(None, agents=["cot", "sc"])
    limits = GrammarLimits(max_agents=4, direct_answer=False)
    rows = []
    for n in chains:
        text = _chain(n)
        # Tokenized in pieces split after each reference, as the decoder writes them (a reference's "}" is a
        # token of its own: under the grammar it is forced, or it ends a stage).
        pieces = text.replace("}", "}\x00").split("\x00")
        ids = [t for piece in pieces for t in tokenizer.encode(piece)]
        one_piece: list[float] = []
        staged: list[float] = []
        for _ in range(repeats):  # interleaved, so machine noise hits both alike
            compiler = xgr.GrammarCompiler(info, cache_enabled=False)
            t0 = time.perf_counter()
            matcher = xgr.GrammarMatcher(compiler.compile_grammar(orchestration_grammar("high", registry, limits)))
            bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
            for token in ids:
                matcher.fill_next_token_bitmask(bitmask, 0)
                if not matcher.accept_token(token):
                    raise RuntimeError(f"one-piece grammar rejected {tokenizer.decode([token])!r}")
            one_piece.append((time.perf_counter() - t0) / len(ids))
            compiler = xgr.GrammarCompiler(info, cache_enabled=False)
            constraint = OrchestrationConstraint(dom="high", registry=registry, limits=limits)
            processor = ConstrainedLogitsProcessor(constraint, tokenizer, compiler, max_new_tokens=max_new_tokens)
            so_far = torch.zeros((1, 1), dtype=torch.long)
            scores = torch.zeros((1, 49152))
            t0 = time.perf_counter()
            for token in ids:
                processor(so_far, scores)
                so_far = torch.cat([so_far, torch.tensor([[token]])], dim=1)
            staged.append((time.perf_counter() - t0) / len(ids))
            if processor.stats.rejected_tokens:
                raise RuntimeError("the staged decoder rejected a token of the chain")
        a, b = statistics.median(one_piece) * 1e3, statistics.median(staged) * 1e3
        rows.append({"agents": n, "tokens": len(ids), "one_piece_ms_per_token": round(a, 3),
                     "staged_ms_per_token": round(b, 3), "staged_over_one_piece": round(b / a, 4)})
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
    parser.add_argument("--input-masks", action="store_true",
                        help="only the mask time of wired chains, one-piece grammar vs staged decoder")
    parser.add_argument("--repeats", type=int, default=3, help="--input-masks: runs per chain (median reported)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for generation (1 resists other load on a 2-core machine; 0 = torch default)")
    args = parser.parse_args(argv)
    if args.input_masks:
        rows = input_mask_times([2, 3, 4], args.repeats)
        print(json.dumps(rows, indent=1))
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"input_masks": rows}, indent=2))
        return 0
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
