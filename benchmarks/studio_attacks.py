"""The attacks of issue 31 on the studio before and after its access checks, side by side in one run.

Each side is a real ``python -m mas_orchestra studio`` process on 127.0.0.1 (its documented command, plus
``--allow-python-models`` for the slow test sub-agent): "before" runs the code of ``--before`` (a git ref,
exported to a temporary folder), "after" this checkout. For each attack it prints the server's answer, and the
server's resident memory (VmRSS now / VmHWM peak, MiB) after the 64 MB body, the 100 concurrent starts and the
200 event-stream clients.

    python benchmarks/studio_attacks.py [--before 65cc555] [--starts 100] [--streams 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from tests import studio_attacks as attacks  # noqa: E402
from tests.studio_server import wait_state  # noqa: E402


def _mib(kib: int) -> float:
    return round(kib / 1024, 1)


def run_side(code: Path, db: Path, starts: int, streams: int) -> dict[str, Any]:
    """Every attack against one studio process running the code under ``code``."""
    out: dict[str, Any] = {}
    with attacks.start_studio(db, pythonpath=str(code), cwd=code) as studio:
        out["printed URL has a token"] = studio.token is not None
        out["no token: /api/config, /api/runs, /"] = attacks.no_token(studio)
        out["Host: attacker.example"] = attacks.foreign_host(studio)
        status, added = attacks.cross_site_text_plain(studio)
        out["cross-site text/plain POST (status, runs started)"] = (status, added)
        status, added = attacks.foreign_origin_with_token(studio)
        out["token + Origin attacker.example (status, runs started)"] = (status, added)
        out["vllm: URL off this machine"] = attacks.remote_vllm(studio)
        out["page headers"] = attacks.page_headers(studio)
        out["db file mode"] = oct(db.stat().st_mode & 0o777)
        big = attacks.body_too_large(studio)
        now, peak = studio.rss_kib()
        out["64 MB body (status, MB sent, s)"] = (big["status"], round(big["bytes_sent"] / 2**20, 1), big["seconds"])
        out["  server MiB after it (now / peak)"] = (_mib(now), _mib(peak))
        result = attacks.concurrent_starts(studio, starts)
        out[f"{starts} concurrent starts (answers)"] = result["codes"]
        out["  accepted runs that finished"] = f"{result['finished']}/{result['accepted']}"
        out["  server MiB after them (now / peak)"] = tuple(_mib(k) for k in result["rss_kib"])
        with studio.client() as c:
            thread = c.post("/api/runs", json=attacks.RUN).json()["thread_id"]
            wait_state(c, thread, ("finished",), timeout=120)
        held = attacks.many_streams(studio, thread, streams)
        out[f"{streams} event-stream clients (answers)"] = held["codes"]
        out["  server MiB before / while open / peak"] = (
            _mib(held["rss_before_kib"]), _mib(held["rss_open_kib"]), _mib(held["peak_kib"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="65cc555", help="git ref of the code before the fix (65cc555)")
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--streams", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="studio-attacks-") as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        sides = {"before": run_side(before, Path(tmp) / "before.sqlite", args.starts, args.streams),
                 "after": run_side(ROOT, Path(tmp) / "after.sqlite", args.starts, args.streams)}
    width = max(len(k) for k in sides["after"])
    print(f"{'attack':<{width}}  {'before (' + args.before + ')':<40}  after (this checkout)")
    for key in sides["after"]:
        left = json.dumps(sides["before"].get(key), default=str)
        right = json.dumps(sides["after"][key], default=str)
        print(f"{key:<{width}}  {left:<40}  {right}")


if __name__ == "__main__":
    main()
