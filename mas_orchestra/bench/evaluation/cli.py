"""``mas-orchestra eval`` and ``mas-orchestra pareto`` (registered by :func:`add_cli`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mas_orchestra.bench.evaluation.common import BASELINE_KINDS, GRADERS, PARETO_FILE, SUMMARY_FILE, EvalInputError
from mas_orchestra.bench.masbench.official import is_official_source, parse_official_source
from mas_orchestra.errors import MissingExtraError

__all__ = ["add_cli"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _default_out(data: str) -> Path:
    stem = Path(data).stem
    if is_official_source(data):
        _, subset, split = parse_official_source(data)
        stem = "-".join(p for p in ("masbench-official", subset, split) if p)
    return Path("runs") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def _input_errors() -> tuple[type[BaseException], ...]:
    """What bad input raises: printed as one line with exit 2, never a traceback."""
    from mas_orchestra.errors import ConstrainedDecodingError
    from mas_orchestra.models import MissingCredentialsError

    return (EvalInputError, MissingCredentialsError, MissingExtraError, ConstrainedDecodingError, ValueError,
            FileNotFoundError, ImportError, TypeError, KeyError)


def _cmd_eval(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else _default_out(args.data)
    info = sys.stderr if args.json else sys.stdout  # --json keeps stdout pure JSON
    print(f"run directory: {out}", file=info, flush=True)
    from mas_orchestra.bench.evaluation.runner import evaluate
    from mas_orchestra.bench.evaluation.summary import format_summary
    from mas_orchestra.config import OrchestraConfig
    from mas_orchestra.offers import subagent_from_args
    from mas_orchestra.runtime.cli import settings_from_args
    from mas_orchestra.spec.grammar import GrammarLimits

    errors = _input_errors()
    try:
        limits = {"direct_answer": not args.no_direct_answer}
        if args.max_agents is not None:
            limits["max_agents"] = args.max_agents
        config = OrchestraConfig(
            dom=args.dom, orchestrator_temperature=args.temperature, constrained=args.constrained,
            agents=tuple(a.strip() for a in args.agents.split(",") if a.strip()) if args.agents else None,
            grammar_limits=GrammarLimits(**limits), orchestrator_max_tokens=args.max_tokens, strict=args.strict,
            prompt=args.prompt, whole_response_fallback=args.whole_response_fallback,
        )
        kwargs = {} if args.concurrency is None else {"concurrency": args.concurrency}  # else aevaluate's default
        summary = evaluate(
            args.data, orchestrator=args.orchestrator, subagent=subagent_from_args(args.subagent), config=config,
            settings=settings_from_args(args), samples=args.samples, limit=args.limit, grader=args.grader,
            judge=args.judge_model, out_dir=out, baseline=args.baseline, search=args.search,
            progress=not args.no_progress and sys.stderr.isatty(), force=args.force, control=args.control,
            **kwargs,
        )
    except errors as exc:
        # KeyError's str() quotes its message (an unknown agent kind in --agents); print the message itself.
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(format_summary(summary))
    return 0


def _cmd_pareto(args: argparse.Namespace) -> int:
    from mas_orchestra.bench.evaluation.plots import pareto_plot

    dirs = [Path(d) for d in args.dirs]
    missing = [str(d) for d in dirs if not (d / SUMMARY_FILE).is_file()]
    if missing:
        print(f"error: no {SUMMARY_FILE} in {', '.join(missing)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else dirs[0] / PARETO_FILE
    try:
        path = pareto_plot(dirs, out)
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def add_cli(sub: Any) -> None:
    """Register ``eval`` and ``pareto`` on the main parser's subcommands.

    Args:
        sub: The main parser's subcommands (what ``add_subparsers`` returned).
    """
    p = sub.add_parser("eval", help="evaluate an orchestrator or a baseline over a JSONL data set")
    p.add_argument("--data", required=True, help="JSONL file with id, question, answer per row, or a local copy "
                   "of the official MASBench: masbench-official:<path>[:<subset>][:split=train|test]")
    p.add_argument("--orchestrator", default="embedded", help="orchestrator model string (default: embedded)")
    p.add_argument("--subagent", action="append", default=None, metavar="MODEL | NAME=MODEL",
                   help="sub-agent model string (default: embedded); repeat as NAME=MODEL for a model pool")
    p.add_argument("--dom", choices=["high", "low"], default="high", help="degree of MAS (default high)")
    p.add_argument("--samples", type=_positive_int, default=1, help="runs per question, k of avg@k (default 1)")
    p.add_argument("--limit", type=_positive_int, default=None, help="evaluate only the first N rows")
    p.add_argument("--concurrency", type=_positive_int, default=None,
                   help="question-samples in flight (default: aevaluate's, 8)")
    p.add_argument("--grader", choices=GRADERS, default="math", help="how answers are graded (default math)")
    p.add_argument("--judge-model", default=None, help="model string of the judge for --grader judge")
    p.add_argument("--out", default=None, help="run directory (default runs/<data-stem>-<timestamp>)")
    p.add_argument("--baseline", choices=BASELINE_KINDS, default=None,
                   help="run this single-agent block instead of an orchestrator")
    p.add_argument("--search", default=None, help="search backend: bm25:<corpus.jsonl> | ddg | tavily")
    p.add_argument("--temperature", type=float, default=None,
                   help="orchestrator temperature (the block's temperature with --baseline)")
    p.add_argument("--agents", default=None,
                   help="comma list of agent kinds offered to the orchestrator, e.g. cot,reflexion (default: all; "
                        "use the kinds a trained orchestrator was trained with)")
    p.add_argument("--max-agents", type=_positive_int, default=None,
                   help="most agents a constrained orchestration may declare (default: GrammarLimits')")
    p.add_argument("--max-tokens", type=_positive_int, default=None,
                   help="orchestrator tokens per orchestration (default 512 when constrained; evaluate a trained "
                        "orchestrator with its max_completion_length)")
    from mas_orchestra.runtime.cli import add_constrained_flag, add_fidelity_flags, add_settings_flags

    add_settings_flags(p, concurrency=False, rps=False, grade_timeout=True)
    add_constrained_flag(p)
    add_fidelity_flags(p)
    p.add_argument("--whole-response-fallback", action="store_true",
                   help="grade an orchestration with no agent and no <answer> on its whole text, as the "
                        "original reward did (off by default)")
    p.add_argument("--no-direct-answer", action="store_true",
                   help="a constrained high-DoM orchestration must declare agents (as in training's grammar: evaluate "
                        "a trained orchestrator with it)")
    controls = p.add_mutually_exclusive_group()
    controls.add_argument("--ablate-wiring", dest="control", action="store_const", const="ablate-wiring",
                          help="causal control (high DoM): remove every ${id} reference from the plan's inputs before "
                               "it runs; the edges stay")
    controls.add_argument("--random-graph", dest="control", action="store_const", const="random-graph",
                          help="causal control (high DoM): run a random valid graph with as many agents as the plan")
    p.add_argument("--json", action="store_true", help="print summary.json on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when stderr is no TTY)")
    p.add_argument("--force", action="store_true", help="add to a run directory written with other arguments")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("pareto", help="plot accuracy against cost and LLM calls for eval run directories")
    p.add_argument("dirs", nargs="+", help="run directories holding summary.json")
    p.add_argument("--out", default=None, help="PNG path (default DIR/pareto.png of the first directory)")
    p.set_defaults(func=_cmd_pareto)
