"""``mas-orchestra run``: orchestrate and run one question, print what happened."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_cli", "add_constrained_flag", "format_outcome"]


def add_constrained_flag(parser: argparse.ArgumentParser) -> None:
    """``--constrained`` / ``--no-constrained`` / ``--constrained-auto`` into ``args.constrained``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--constrained", dest="constrained", action="store_const", const=True, default=None,
                       help="decode orchestrations and sub-agent replies under grammars (default: on for "
                       "embedded/hf: models, off otherwise); an unsupported backend is an error")
    group.add_argument("--no-constrained", dest="constrained", action="store_const", const=False,
                       help="never constrain decoding")
    group.add_argument("--constrained-auto", dest="constrained", action="store_const", const="auto",
                       help="constrain where the backend can, fall back with a warning elsewhere")


def _usage_table(outcome: Any) -> str:
    u = outcome.usage
    rows = [
        ("llm calls", f"{u.llm_calls} (orchestrator {u.orchestrator_calls}, sub-agents {u.subagent_calls}, "
                      f"format re-asks {u.format_retries})"),
        ("tokens", f"{u.total_tokens:,} (in {u.input_tokens:,}, out {u.output_tokens:,})"),
        ("cost", f"${u.cost_usd:.6f}" + (f" (unpriced: {', '.join(u.unpriced_models)})" if u.unpriced_models else "")),
        ("wall", f"{u.wall_s:.2f} s"),
    ]
    for name, used in u.by_model.items():
        rows.append((f"  {name}", f"{used.calls} calls, {used.input_tokens + used.output_tokens:,} tokens"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def format_outcome(outcome: Any, *, show_orchestration: bool = True) -> str:
    """Human-readable report of an Outcome."""
    parts = []
    if show_orchestration:
        parts.append("== orchestration ==\n" + (outcome.orchestration.strip() or "(empty)"))
    if outcome.spec is not None:
        parts.append("== spec ==\n" + outcome.spec.to_mermaid())
    for node_id, result in outcome.node_results.items():
        parts.append(f"-- {node_id} ({result.agent}) → {result.answer[:200]}")
    parts.append(f"== status == {outcome.status.value}")
    if outcome.error:
        parts.append(f"error: {outcome.error}")
    parts.append(f"answer: {outcome.answer if outcome.answer is not None else '(none)'}")
    parts.append("== usage ==\n" + _usage_table(outcome))
    return "\n".join(parts)


def _cmd_run(args: argparse.Namespace) -> int:
    from mas_orchestra.errors import ConstrainedDecodingError, MissingExtraError
    from mas_orchestra.models import MissingCredentialsError
    from mas_orchestra.runtime import Orchestra

    search = None
    try:
        if args.search:
            from agents.search import make_backend

            search = make_backend(args.search)
        orchestra = Orchestra(
            orchestrator=args.orchestrator, subagent=args.subagent, dom=args.dom, search=search,
            timeout=args.timeout, call_timeout=args.call_timeout, max_retries=args.max_retries,
            max_concurrency=args.concurrency, orchestrator_temperature=args.temperature,
            orchestrator_max_tokens=args.max_tokens, requests_per_second=args.rps, constrained=args.constrained,
        )
    except (MissingExtraError, MissingCredentialsError, ConstrainedDecodingError, ValueError, FileNotFoundError,
            ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcome = orchestra.run(args.question)
    if args.json:
        print(outcome.model_dump_json(indent=2))
    else:
        print(format_outcome(outcome))
    return 0 if outcome.ok else 1


def add_cli(sub: Any) -> None:
    """Register ``run`` on the main parser's subcommands."""
    p = sub.add_parser("run", help="orchestrate a multi-agent system for a question and run it")
    p.add_argument("question")
    p.add_argument("--orchestrator", default="embedded", help="model string (default: embedded)")
    p.add_argument("--subagent", default="embedded", help="model string for sub-agents (default: embedded)")
    p.add_argument("--dom", choices=["high", "low"], default="high", help="degree of MAS (default high)")
    p.add_argument("--search", default=None, help="search backend: bm25:<corpus.jsonl> | ddg | tavily")
    p.add_argument("--timeout", type=float, default=None, help="bound on the whole run, seconds")
    p.add_argument("--call-timeout", type=float, default=None, help="bound on one sub-agent call, seconds")
    p.add_argument("--max-retries", type=int, default=3, help="retries of transient model errors")
    p.add_argument("--concurrency", type=int, default=32, help="model calls in flight at most")
    p.add_argument("--temperature", type=float, default=None, help="orchestrator sampling temperature")
    p.add_argument("--max-tokens", type=int, default=None, help="orchestrator max new tokens")
    p.add_argument("--rps", type=float, default=None, help="rate limit for API models, requests per second")
    add_constrained_flag(p)
    p.add_argument("--json", action="store_true", help="print the Outcome as JSON")
    p.set_defaults(func=_cmd_run)


if __name__ == "__main__":  # pragma: no cover
    from mas_orchestra.cli import main

    sys.exit(main(["run", *sys.argv[1:]]))
