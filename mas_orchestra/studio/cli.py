"""``mas-orchestra studio``: serve the studio on 127.0.0.1 (see :mod:`mas_orchestra.studio`).

It prints ``http://127.0.0.1:<port>/?token=<token>``: opening that URL is how the owner gets in (see
:mod:`mas_orchestra.studio.security` for what is kept out and the flags below for every bound).
"""

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

        from mas_orchestra import environment
        from mas_orchestra.studio.app import create_app
        from mas_orchestra.studio.security import TOKEN_ENV, StudioLimits, is_loopback_host, studio_model_policy
    except ImportError as exc:
        missing = MissingExtraError("the studio web app", "studio", "uvicorn")
        error = exc if isinstance(exc, MissingExtraError) else missing
        print(f"error: {error}", file=sys.stderr)
        return 2
    token = args.token or environment.text(TOKEN_ENV)
    local = is_loopback_host(args.host)
    if not local and token is None:
        print(f"error: --host {args.host} serves the studio to other machines; give it a token you chose "
              f"(--token or ${TOKEN_ENV}) so that only the people you give it to get in", file=sys.stderr)
        return 2
    hosts = list(args.allow_host)
    if not local and args.host not in ("0.0.0.0", "::", ""):
        hosts.append(args.host)
    try:
        limits = StudioLimits(max_body_bytes=args.max_body_bytes, max_live_runs=args.max_live_runs,
                              max_streams=args.max_streams, max_run_timeout_s=args.max_run_timeout,
                              keep_finished=args.keep_finished)
        models = studio_model_policy(args.allow_model, allow_python_models=args.allow_python_models,
                                        allow_remote_vllm=args.allow_remote_vllm, allow_hf_paths=args.allow_hf_paths)
        app = create_app(args.runs, args.db, args.data, token=token, allowed_hosts=hosts, models=models,
                         limits=limits)
    except StudioInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not local:
        print(f"warning: serving on {args.host}: anyone who can reach it and has the token can start runs on "
              "your models", file=sys.stderr)
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else (f"[{args.host}]" if ":" in args.host else args.host)
    print(f"mas-orchestra studio on http://{shown}:{args.port}/?token={app.state.token} "
          f"(threads in {args.db}; Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def add_cli(sub: Any) -> None:
    """Register ``studio`` on the ``mas-orchestra`` subcommand parser.

    Args:
        sub: The main parser's subcommands (what ``add_subparsers`` returned).
    """
    p = sub.add_parser(
        "studio", help="a local web app: watch and steer live runs, browse eval and training outputs",
        description="Serves the studio page: run a question and watch its plan execute (approve or edit it "
        "first with --approval in the page), and browse eval folders (results.jsonl) and training folders "
        "(rollouts.jsonl, trainer_state.json). Everything is served locally; nothing is fetched from the network. "
        "Open the printed URL (it carries this start's token); other pages and users get 401/403.",
    )
    p.add_argument("--port", type=int, default=8123, help="port (8123)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (127.0.0.1: this machine only); any other needs --token")
    p.add_argument("--runs", nargs="*", default=[], metavar="DIR",
                   help="eval or training output folders to browse (or folders of them)")
    p.add_argument("--db", default="studio.sqlite",
                   help="SQLite file of the live threads (studio.sqlite, created 0600)")
    p.add_argument("--data", nargs="*", default=[], metavar="FILE",
                   help="JSONL files (question, answer) whose rows the live view offers as samples")
    access = p.add_argument_group("access (see docs/guides/studio-security.md)")
    access.add_argument("--token", default=None,
                        help="the token the URL and every API request carry (default: $MAS_STUDIO_TOKEN, else a "
                             "random one per start)")
    access.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a Host name to serve besides 127.0.0.1, localhost and [::1] (repeatable)")
    access.add_argument("--allow-model", action="append", default=[], metavar="PATTERN",
                        help="model strings the page may name, fnmatch style, e.g. 'openai:*' (repeatable; "
                             "always allowed: embedded, scripted:*, the demo, $MAS_ORCHESTRATOR/$MAS_SUBAGENT)")
    access.add_argument("--allow-python-models", action="store_true",
                        help="accept python:<module>:<attr> model strings from the page (they import code)")
    access.add_argument("--allow-remote-vllm", action="store_true",
                        help="accept vllm:<model>@<url> with a URL off this machine (never sent $VLLM_API_KEY)")
    access.add_argument("--allow-hf-paths", action="store_true",
                        help="accept hf:<path> model strings (a model directory on this machine)")
    limits = p.add_argument_group("limits")
    limits.add_argument("--max-body-bytes", type=int, default=1 << 20,
                        help="largest request body; larger ones get 413 before being read (1048576)")
    limits.add_argument("--max-live-runs", type=int, default=4,
                        help="runs executing at once; one more gets 429 (4)")
    limits.add_argument("--max-streams", type=int, default=32,
                        help="open event streams (browser tabs watching runs); one more gets 429 (32)")
    limits.add_argument("--max-run-timeout", type=float, default=900.0, metavar="SECONDS",
                        help="ceiling of a run's time-out; runs without one get it (900)")
    limits.add_argument("--keep-finished", type=int, default=100,
                        help="finished threads kept in memory; older ones are reopened from --db (100)")
    p.set_defaults(func=_cmd_studio)
