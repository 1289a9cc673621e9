"""The ``mas-orchestra`` command line (also ``python -m mas_orchestra``)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from mas_orchestra.bench.training_curve import CURVE_FILE
from mas_orchestra.errors import MissingExtraError, SpecError

log = logging.getLogger("mas_orchestra")


def _load(path: str, dom: str | None, strict: bool = False):
    from mas_orchestra.spec import GraphSpec

    if path == "-":
        return GraphSpec.from_text(sys.stdin.read(), dom=dom, strict=strict)  # type: ignore[arg-type]
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return GraphSpec.from_file(file, dom=dom, strict=strict)  # type: ignore[arg-type]


def _cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            spec = _load(path, args.dom, args.strict)
        except (SpecError, FileNotFoundError, UnicodeDecodeError) as exc:
            failed += 1
            problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
            print(f"{path}: INVALID ({len(problems)} problem{'s' if len(problems) != 1 else ''})", file=sys.stderr)
            for problem in problems:
                print(f"  - {problem}", file=sys.stderr)
            continue
        kinds = ", ".join(f"{k}×{n}" for k, n in spec.agent_counts().items()) or "direct answer"
        warned = f"; {len(spec.warnings)} warning(s)" if spec.warnings else ""
        print(f"{path}: ok ({len(spec.nodes)} agents: {kinds}; sink {spec.sink}; hash {spec.spec_hash()}{warned})")
        for warning in spec.warnings:
            print(f"  warning: {warning}")
    return 1 if failed else 0


def _cmd_draw(args: argparse.Namespace) -> int:
    try:
        spec = _load(args.file, args.dom)
    except (SpecError, FileNotFoundError) as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 1
    print(spec.to_mermaid())
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from mas_orchestra.spec import GraphSpec

    print(json.dumps(GraphSpec.model_json_schema(), indent=2))
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    try:
        spec = _load(args.file, args.dom)
    except (SpecError, FileNotFoundError) as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 1
    print(spec.model_dump_json(indent=2) if args.to == "json" else spec.to_xml())
    return 0


def _cmd_plot_training(args: argparse.Namespace) -> int:
    from mas_orchestra.bench.training_curve import (
        TrainingCurveError,
        compare_windows,
        find_trainer_state,
        format_curve,
        format_validation,
        load_curve,
        load_validation,
        plot_training,
    )

    try:
        state = find_trainer_state(args.run)
        curve = load_curve(state)
        validation = load_validation(state)
        comparison = compare_windows(curve, args.fraction)
    except (TrainingCurveError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{state} ({len(curve)} steps)")
    print(format_curve(curve))
    print(f"first vs last {args.fraction:.0%} of the steps ({comparison.window} each): {comparison.describe()}")
    if validation:
        print(f"validation ({len(validation)} passes):")
        print(format_validation(validation))
    if args.no_plot:
        return 0
    # By default next to trainer_state.json; a run still going gets it in its own folder, not a checkpoint's.
    folder = Path(args.run) if Path(args.run).is_dir() else state.parent
    out = Path(args.out) if args.out else folder / CURVE_FILE
    try:
        written = plot_training(curve, out, validation=validation)
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``mas-orchestra`` argument parser with every subcommand (the CLI reference is rendered from it)."""
    parser = argparse.ArgumentParser(
        prog="mas-orchestra",
        description="Holistic multi-agent orchestration compiled to LangGraph.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check orchestration files (JSON spec or orchestration text)")
    p.add_argument("files", nargs="+", help="spec files (.json, .xml, .txt) or - for stdin")
    p.add_argument("--dom", choices=["high", "low"], default=None, help="DoM of text files (default high)")
    p.add_argument("--strict", action="store_true", help="report any leniency (spec warning) as a problem")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("draw", help="print a spec as a Mermaid flowchart")
    p.add_argument("file")
    p.add_argument("--dom", choices=["high", "low"], default=None)
    p.set_defaults(func=_cmd_draw)

    p = sub.add_parser("convert", help="convert a spec between JSON and orchestration text")
    p.add_argument("file")
    p.add_argument("--to", choices=["json", "xml"], default="json")
    p.add_argument("--dom", choices=["high", "low"], default=None)
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("schema", help="print the GraphSpec JSON schema (usable as a tool schema)")
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser(
        "plot-training", help="print and plot a GRPO run's reward curve (from its trainer_state.json)",
        description="Reads <run>/trainer_state.json (or the newest checkpoint-*/ of a run still going), prints "
        "reward, valid-spec rate, agents per spec and delegation share per step, compares the first and last "
        "steps and writes the reward-curve PNG.",
    )
    p.add_argument("run", help="the --output-dir of `python -m training.grpo`, a checkpoint or a trainer_state.json")
    p.add_argument("--out", default=None, help=f"PNG to write (default <run>/{CURVE_FILE})")
    p.add_argument("--fraction", type=float, default=0.2, help="share of steps in the first/last window (0.2)")
    p.add_argument("--no-plot", action="store_true", help="print the table only")
    p.set_defaults(func=_cmd_plot_training)

    # The subcommands of the other parts, imported here so that ``import mas_orchestra.cli`` stays cheap.
    from mas_orchestra.bench.evaluation.cli import add_cli as add_eval_cli
    from mas_orchestra.bench.masbench.cli import add_cli as add_masbench_cli
    from mas_orchestra.runtime.cli import add_cli as add_run_cli
    from mas_orchestra.studio.cli import add_cli as add_studio_cli

    for add_cli in (add_run_cli, add_eval_cli, add_masbench_cli, add_studio_cli):
        add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mas-orchestra`` with ``argv`` (default ``sys.argv[1:]``) and return the exit status.

    Args:
        argv: The command-line arguments.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
