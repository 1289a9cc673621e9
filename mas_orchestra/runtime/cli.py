"""``mas-orchestra run``: orchestrate and run one question, print what happened."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_cli", "add_constrained_flag", "add_fidelity_flags", "add_settings_flags", "format_outcome",
           "settings_from_args"]


def add_fidelity_flags(parser: argparse.ArgumentParser) -> None:
    """``--strict`` and ``--prompt DIR``: how orchestrations are read, and the orchestrator's prompt template.

    Args:
        parser: The subcommand's parser.
    """
    parser.add_argument("--strict", action="store_true",
                        help="any leniency in reading an orchestration (spec warnings) makes it invalid_spec")
    parser.add_argument("--prompt", default=None, metavar="DIR",
                        help="orchestrator prompt template folder (system.txt, user.txt, second_user.txt, or "
                        "high/ and low/ sub-folders; default: ours)")


def add_constrained_flag(parser: argparse.ArgumentParser) -> None:
    """``--constrained`` / ``--no-constrained`` / ``--constrained-auto`` into ``args.constrained``.

    Args:
        parser: The subcommand's parser.
    """
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
    """Human-readable report of an Outcome.

    Args:
        outcome: The run's outcome.
        show_orchestration: Include the orchestrator's raw text.

    Returns:
        The report text.
    """
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
    if getattr(outcome, "thread_id", None):
        parts.append(f"thread: {outcome.thread_id}")
    parts.append("== usage ==\n" + _usage_table(outcome))
    return "\n".join(parts)


DEFAULT_DB = "runs.sqlite"
EXIT_INTERRUPTED = 3  # paused for approval: not a failure, not done


def _thread_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for Orchestra.run from --thread/--fork/--resume (empty without them)."""
    import uuid

    options: dict[str, Any] = {}
    if args.fork is not None:
        if not args.thread:
            raise ValueError("--fork needs --thread ID (the thread to fork)")
        options["fork_from"] = args.thread
        options["thread_id"] = args.fork or f"{args.thread}-fork-{uuid.uuid4().hex[:6]}"
    elif args.thread:
        options["thread_id"] = args.thread
    if args.resume is not None:
        if not args.thread:
            raise ValueError("--resume needs --thread ID (the thread waiting for approval)")
        value: Any = args.resume
        if value.startswith("@"):
            path = Path(value[1:])
            if not path.is_file():
                raise FileNotFoundError(f"--resume {value}: no such file")
            value = {"spec": path.read_text(encoding="utf-8")}
        elif value.lower().startswith("reject:"):
            value = {"action": "reject", "reason": value.split(":", 1)[1].strip()}
        options["resume"] = value
    return options


def _print_interrupt(outcome: Any, args: argparse.Namespace) -> None:
    payload = outcome.interrupt or {}
    print("== waiting for approval ==")
    if payload.get("error"):
        print(f"error: {payload['error']}")
    print(payload.get("spec_text", ""))
    from mas_orchestra.runtime.postgres import redact_url

    print(
        f"resume: mas-orchestra run {args.question!r} --thread {outcome.thread_id} "
        f"--db {redact_url(args.db or DEFAULT_DB)} "
        "--resume approve | --resume 'reject:why' | --resume @edited_spec.json"
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from agents.tools import McpServerError
    from mas_orchestra.config import OrchestraConfig
    from mas_orchestra.errors import (
        CheckpointError,
        ConstrainedDecodingError,
        MissingExtraError,
        ThreadMismatchError,
    )
    from mas_orchestra.models import MissingCredentialsError
    from mas_orchestra.offers import subagent_from_args
    from mas_orchestra.runtime import Orchestra

    search = None
    try:
        if args.search:
            from agents.search import make_backend
            from mas_orchestra import environment

            search = make_backend(args.search, cache_path=environment.search_cache_path())
        checkpointer = _checkpointer(args)
        config = OrchestraConfig(
            dom=args.dom, subagent_defaults=dict(_pairs(args.subagent_default, "--subagent-default")) or None,
            orchestrator_temperature=args.temperature, orchestrator_max_tokens=args.max_tokens,
            constrained=args.constrained, strict=args.strict, prompt=args.prompt,
            interrupt_before_execute=checkpointer is not None and bool(args.approve),
        )
        orchestra = Orchestra(
            args.orchestrator, subagent_from_args(args.subagent), config=config, settings=settings_from_args(args),
            search=search, mcp=args.mcp, checkpointer=checkpointer,
        )
        thread = _thread_options(args)
    except (MissingExtraError, MissingCredentialsError, ConstrainedDecodingError, ValueError, FileNotFoundError,
            ImportError, McpServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        outcome = orchestra.run(args.question, **thread)
    except (ThreadMismatchError, CheckpointError, MissingExtraError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(outcome.model_dump_json(indent=2))
    else:
        print(format_outcome(outcome))
        if outcome.status.value == "interrupted":
            _print_interrupt(outcome, args)
    if outcome.status.value == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if outcome.ok else 1


def _pairs(values: list[str] | None, option: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` items of a repeated option."""
    pairs = []
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise ValueError(f"{option} {value!r}: write KEY=VALUE")
        pairs.append((key.strip(), val.strip()))
    return pairs


def _checkpointer(args: argparse.Namespace) -> str | None:
    """The checkpoint store of --db/--thread/--approve/--fork (a SQLite file by default), or None without them."""
    if not (args.thread or args.db or args.approve or args.fork is not None):
        return None
    return str(args.db or DEFAULT_DB)


def settings_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~mas_orchestra.settings.RunSettings` of the flags :func:`add_settings_flags` added.

    Args:
        args: Parsed arguments; a flag not given (``None``) keeps the field's default.

    Returns:
        The settings.

    Raises:
        pydantic.ValidationError: A value out of its field's range (a ``ValueError`` naming the field).
    """
    from mas_orchestra.settings import RunSettings

    given = {field: getattr(args, dest, None) for dest, field in _SETTINGS_FLAGS.items()}
    return RunSettings.model_validate({k: v for k, v in given.items() if v is not None})


# argparse dest -> RunSettings field, for the flags add_settings_flags adds.
_SETTINGS_FLAGS = {"timeout": "timeout", "call_timeout": "call_timeout", "max_retries": "max_retries",
                   "max_concurrency": "max_concurrency", "rps": "requests_per_second", "grade_timeout": "grade_timeout"}


def add_settings_flags(parser: argparse.ArgumentParser, *, concurrency: bool = True, rps: bool = True,
                       grade_timeout: bool = False) -> None:
    """The :class:`~mas_orchestra.settings.RunSettings` flags; a flag not given keeps the field's default.

    The defaults are not repeated here (nor imported: ``--help`` loads no pydantic); the help names the field.

    Args:
        parser: The subcommand's parser.
        concurrency: Add ``--concurrency`` (model calls in flight in one run).
        rps: Add ``--rps`` (the rate limit of API models).
        grade_timeout: Add ``--grade-timeout``.
    """
    default = "(default: RunSettings.{})".format
    parser.add_argument("--timeout", type=float, default=None, help="bound on one whole run, seconds "
                        + default("timeout"))
    parser.add_argument("--call-timeout", type=float, default=None, help="bound on one sub-agent call, seconds "
                        + default("call_timeout"))
    parser.add_argument("--max-retries", type=int, default=None, help="retries of transient model errors "
                        + default("max_retries"))
    if concurrency:
        parser.add_argument("--concurrency", dest="max_concurrency", type=int, default=None,
                            help="model calls in flight at most " + default("max_concurrency"))
    if rps:
        parser.add_argument("--rps", type=float, default=None, help="rate limit for API models, requests per "
                            "second " + default("requests_per_second"))
    if grade_timeout:
        parser.add_argument("--grade-timeout", type=float, default=None, help="seconds Math-Verify may spend on "
                            "one answer " + default("grade_timeout"))


def add_cli(sub: Any) -> None:
    """Register ``run`` on the main parser's subcommands.

    Args:
        sub: The main parser's subcommands (what ``add_subparsers`` returned).
    """
    p = sub.add_parser("run", help="orchestrate a multi-agent system for a question and run it")
    p.add_argument("question")
    p.add_argument("--orchestrator", default="embedded", help="model string (default: embedded)")
    p.add_argument("--subagent", action="append", default=None, metavar="MODEL | NAME=MODEL",
                   help="model string for sub-agents (default: embedded); repeat as NAME=MODEL for a pool the "
                   "orchestrator picks from per agent (the first is the default)")
    p.add_argument("--subagent-default", action="append", default=None, metavar="KIND=NAME",
                   help="pool model an agent kind uses unless the orchestrator names one (e.g. debate=strong)")
    p.add_argument("--mcp", default=None, metavar="FILE",
                   help='MCP servers whose tools are offered to tool agents ({"mcpServers": {...}} JSON)')
    p.add_argument("--dom", choices=["high", "low"], default="high", help="degree of MAS (default high)")
    p.add_argument("--search", default=None, help="search backend: bm25:<corpus.jsonl> | ddg | tavily")
    add_settings_flags(p)
    p.add_argument("--temperature", type=float, default=None, help="orchestrator sampling temperature")
    p.add_argument("--max-tokens", type=int, default=None, help="orchestrator max new tokens")
    add_constrained_flag(p)
    add_fidelity_flags(p)
    p.add_argument("--json", action="store_true", help="print the Outcome as JSON")
    p.add_argument("--thread", default=None, metavar="ID",
                   help="run on checkpointed thread ID; an unfinished thread resumes where it stopped")
    p.add_argument("--db", default=None, metavar="FILE|URL",
                   help=f"checkpoint store for --thread/--approve: a SQLite file (default {DEFAULT_DB}) or a "
                        "postgresql://user:password@host:5432/db URL shared by several workers (postgres extra)")
    p.add_argument("--fork", nargs="?", const="", default=None, metavar="NEW_ID",
                   help="fork --thread ID into NEW_ID (default ID-fork-xxxxxx): keep its orchestration, rerun "
                        "its nodes with these models")
    p.add_argument("--approve", action="store_true",
                   help="pause after orchestration for approval of the spec (exit 3; resume with --resume)")
    p.add_argument("--resume", default=None, metavar="VALUE",
                   help="answer the approval of --thread: approve | reject:REASON | @FILE (edited spec)")
    p.set_defaults(func=_cmd_run)

