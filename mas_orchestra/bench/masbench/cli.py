"""MASBench files and the ``mas-orchestra masbench generate|verify`` command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mas_orchestra.bench.masbench.generation import generate
from mas_orchestra.bench.masbench.graph import AXES, SPLITS
from mas_orchestra.bench.masbench.verification import verify

__all__ = ["add_cli", "read_jsonl", "write_jsonl"]

def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write one JSON object per line (UTF-8, key order kept); returns the number of rows.

    Args:
        rows: The rows.
        path: The file (replaced).

    Returns:
        The number of rows written.
    """
    count = 0
    with Path(path).open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file written by ``write_jsonl`` (blank lines are skipped).

    Args:
        path: The file.

    Returns:
        The rows.
    """
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _parse_values(text: str) -> list[int]:
    """"2,4,6" or "2-12" or a mix ("2-4,8")."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            elif part:
                out.append(int(part))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"values must look like 2,4,6 or 2-12, got {text!r}") from exc
    if not out:
        raise argparse.ArgumentTypeError("values must not be empty")
    return out


def _cmd_generate(args: argparse.Namespace) -> int:
    try:
        rows = generate(args.axis, args.values, args.n, args.seed, args.split)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    count = write_jsonl(rows, args.out)
    print(f"wrote {count} {args.split} rows ({args.axis} values {args.values}) to {args.out}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    try:
        rows = read_jsonl(args.path)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: cannot read {args.path}: {exc}")
        return 1
    problems = verify(rows)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problems in {len(rows)} rows")
        return 1
    print(f"ok: all {len(rows)} rows re-derive")
    return 0


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``masbench generate`` / ``masbench verify`` on an argparse subparsers object.

    Each leaf parser sets ``func`` to a ``(args) -> int`` returning the exit code.

    Args:
        subparsers: The main parser's subcommands (what ``add_subparsers`` returned).

    Returns:
        The ``masbench`` parser.
    """
    parser = subparsers.add_parser("masbench", help="generate or verify MASBench synthetic problems")
    sub = parser.add_subparsers(dest="masbench_command", metavar="{generate,verify}")
    sub.required = True

    gen = sub.add_parser("generate", help="write problems along one axis to a JSONL file")
    gen.add_argument("--axis", required=True, choices=AXES)
    gen.add_argument("--values", required=True, type=_parse_values, help="e.g. 2,4,6 or 2-12")
    gen.add_argument("--n", type=int, default=10, help="problems per value (default 10)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--split", choices=SPLITS, default="test")
    gen.add_argument("--out", required=True, type=Path, help="output .jsonl")
    gen.set_defaults(func=_cmd_generate)

    ver = sub.add_parser("verify", help="re-derive every answer of a MASBench JSONL file")
    ver.add_argument("path", type=Path)
    ver.set_defaults(func=_cmd_verify)
    return parser
