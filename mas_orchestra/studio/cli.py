"""``mas-orchestra studio``: serve the studio on 127.0.0.1 (see :mod:`mas_orchestra.studio`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_cli"]


def _cmd_studio(args: argparse.Namespace) -> int:
    from mas_orchestra.errors import MissingExtraError
    from mas_orchestra.studio.common import StudioInputError

    try:
        import uvicorn

        from mas_orchestra.studio.app import create_app
    except ImportError as exc:
        missing = MissingExtraError("the studio web app", "studio", "uvicorn")
        error = exc if isinstance(exc, MissingExtraError) else missing
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        app = create_app(args.runs, args.db, args.data, allow_python_models=args.allow_python_models)
    except StudioInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}: anyone who can reach it can start runs on your models",
              file=sys.stderr)
    print(f"mas-orchestra studio on http://{args.host}:{args.port}/ (threads in {args.db}; Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def add_cli(sub: Any) -> None:
    """Register ``studio`` on the ``mas-orchestra`` subcommand parser."""
    p = sub.add_parser(
        "studio", help="a local web app: watch and steer live runs, browse eval and training outputs",
        description="Serves the studio page: run a question and watch its plan execute (approve or edit it "
        "first with --approval in the page), and browse eval folders (results.jsonl) and training folders "
        "(rollouts.jsonl, trainer_state.json). Everything is served locally; nothing is fetched from the network.",
    )
    p.add_argument("--port", type=int, default=8123, help="port (8123)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1: this machine only)")
    p.add_argument("--runs", nargs="*", default=[], metavar="DIR",
                   help="eval or training output folders to browse (or folders of them)")
    p.add_argument("--db", default="studio.sqlite", help="SQLite file of the live threads (studio.sqlite)")
    p.add_argument("--data", nargs="*", default=[], metavar="FILE",
                   help="JSONL files (question, answer) whose rows the live view offers as samples")
    p.add_argument("--allow-python-models", action="store_true",
                   help="accept python:<module>:<attr> model strings from the page (they import code)")
    p.set_defaults(func=_cmd_studio)
