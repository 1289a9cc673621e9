"""The studio's start-up, first plan and browsing of a large training log, measured on a real server process.

``python -m benchmarks.studio_browse [--rows 10000] [--out FILE]``

1. writes a synthetic ``rollouts.jsonl`` of ``--rows`` lines (the keys the GRPO trainer writes, a real
   orchestration text per line) into a temporary folder (deleted afterwards; never committed);
2. starts ``mas-orchestra studio --runs <that folder>`` and times the first page served;
3. opens the folder (the first request indexes the file), pages through it (first, middle, last page),
   filters, searches, opens the last record and draws the per-step curve, timing each request and reading
   the server's resident memory (``/proc/<pid>/status``) before and after;
4. side by side, the naive way: the whole file parsed into a list in a fresh process (time and peak memory);
5. a live run on the offline demo models: time from the POST to the plan (``spec``) event.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ORCHESTRATION = """<thinking>Solve, then check.</thinking>
<agent><agent_id>A</agent_id><agent_name>CoTAgent</agent_name><agent_description>Solve</agent_description>
<required_arguments><agent_input>Solve the problem step by step.</agent_input></required_arguments></agent>
<agent><agent_id>FINAL</agent_id><agent_name>SCAgent</agent_name><agent_description>Check</agent_description>
<required_arguments><agent_input>Check ${A} and give the final answer.</agent_input></required_arguments></agent>
<edge><from>A</from><to>FINAL</to></edge>
"""
KINDS = ("cot", "sc", "reflexion", "debate")


def write_rollouts(path: Path, rows: int, per_step: int = 64, seed: int = 0) -> int:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for i in range(rows):
            valid = rng.random() < 0.85
            kind = rng.choice(KINDS)
            correct = valid and rng.random() < 0.5
            out.write(json.dumps({
                "step": 1 + i // per_step, "train": True, "index": i % per_step,
                "status": "ok" if valid else "invalid_spec", "reward": float(correct), "correct": correct,
                "agents": 2 if valid else None, "agent_counts": {"cot": 1, kind: 1 + (kind == "cot")} if valid else {},
                "subagent_calls": 2 if valid else 0, "total_tokens": 300 + i % 97, "cost_usd": 0.0, "wall_s": 0.4,
                "answer": str(i % 23), "error": None if valid else "agent 'A': unknown agent 'OracleAgent'",
                "question": f"Problem {i}: " + "the number of owls in Maple Zoo equals 3 times the foxes; " * 4,
                "completion": ORCHESTRATION,
            }) + "\n")
    return path.stat().st_size


def _rss_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


#: The studio's token for this benchmark's server (given with $MAS_STUDIO_TOKEN; every API request carries it).
TOKEN = secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _get(url: str, data: Any = None) -> tuple[float, Any]:
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **AUTH})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        raw = response.read()
    elapsed = time.perf_counter() - started
    return elapsed, json.loads(raw) if raw[:1] in (b"{", b"[") else raw


def _naive_load(path: Path) -> dict[str, float]:
    code = ("import json, resource, sys, time; t = time.perf_counter(); "
            "rows = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]; "
            "print(json.dumps({'seconds': time.perf_counter() - t, 'rows': len(rows), "
            "'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    naive = dict(json.loads(proc.stdout))
    # The same interpreter with json imported and nothing read: what the list itself adds is the difference.
    empty = subprocess.run([sys.executable, "-c", code.replace("open(sys.argv[1], encoding='utf-8')", "[]")],
                           capture_output=True, text=True, check=True)
    naive["added_mb"] = round(naive["peak_rss_mb"] - json.loads(empty.stdout)["peak_rss_mb"], 1)
    return naive


def _traced_mb(path: Path) -> dict[str, float]:
    """Python heap held after indexing the file (the studio's index) vs after parsing it whole into a list,
    each measured with tracemalloc in a fresh process."""
    code = ("import json, sys, time, tracemalloc; from pathlib import Path; "
            "from mas_orchestra.studio.browse import RunFile; "
            "tracemalloc.start(); t = time.perf_counter(); "
            "held = RunFile(Path(sys.argv[1]), 'training') if sys.argv[2] == 'index' else None; "
            "held.refresh() if held else None; "
            "held = held or [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]; "
            "s = time.perf_counter() - t; cur, peak = tracemalloc.get_traced_memory(); "
            "print(json.dumps({'seconds': s, 'held_mb': cur / 2**20, 'peak_mb': peak / 2**20}))")
    out = {}
    for mode in ("index", "whole"):
        proc = subprocess.run([sys.executable, "-c", code, str(path), mode], capture_output=True, text=True, check=True)
        out[mode] = {k: round(v, 3) for k, v in json.loads(proc.stdout).items()}
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure(rows: int) -> dict[str, Any]:
    result: dict[str, Any] = {"rows": rows}
    with tempfile.TemporaryDirectory(prefix="studio-bench-") as tmp:
        run = Path(tmp) / "grpo-run"
        run.mkdir()
        result["file_mb"] = round(write_rollouts(run / "rollouts.jsonl", rows) / 2**20, 2)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        started = time.perf_counter()
        server = subprocess.Popen(
            [sys.executable, "-m", "mas_orchestra", "studio", "--port", str(port), "--runs", str(run),
             "--db", str(Path(tmp) / "studio.sqlite")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            env={**os.environ, "MAS_STUDIO_TOKEN": TOKEN},
        )
        try:
            while True:
                try:
                    _get(f"{base}/api/config")
                    urllib.request.urlopen(urllib.request.Request(f"{base}/", headers=AUTH), timeout=5).read()
                    break
                except OSError:
                    if server.poll() is not None:
                        raise RuntimeError(server.stderr.read().decode() if server.stderr else "studio exited") from None
                    time.sleep(0.02)
            result["start_to_first_page_s"] = round(time.perf_counter() - started, 3)
            result["rss_after_start_mb"] = round(_rss_mb(server.pid)["VmRSS"], 1)
            timings: dict[str, float] = {}
            timings["open_folder (indexes the file)"], summary = _get(f"{base}/api/folders/0")
            assert summary["rows"] == rows, summary
            for name, query in (("page first 50", "offset=0&limit=50"), ("page middle 50", f"offset={rows // 2}&limit=50"),
                                ("page last 50", f"offset={rows - 50}&limit=50"),
                                ("filter invalid_spec", "status=invalid_spec&limit=50"),
                                ("filter step + kind", "step=3&kind=debate&limit=50"),
                                ("text search", f"q=problem%20{rows - 1}:&limit=50"),
                                ("reopen folder (no change on disk)", None)):
                url = f"{base}/api/folders/0" if query is None else f"{base}/api/folders/0/rows?{query}"
                timings[name], _ = _get(url)
            timings["open last record"], sample = _get(f"{base}/api/folders/0/rows/{rows - 1}")
            assert sample["graph"] is not None
            timings["curve from rollouts (reads agent_counts per row)"], curve = _get(f"{base}/api/folders/0/curve")
            result["steps"] = len(curve["points"])
            result["requests_s"] = {k: round(v, 4) for k, v in timings.items()}
            memory = _rss_mb(server.pid)
            result["rss_after_browsing_mb"] = round(memory["VmRSS"], 1)
            result["peak_rss_mb"] = round(memory["VmHWM"], 1)
            result["browsing_added_mb"] = round(memory["VmHWM"] - result["rss_after_start_mb"], 1)
            started = time.perf_counter()
            _, created = _get(f"{base}/api/runs", {
                "question": "What is 2 + 3?", "orchestrator": "python:mas_orchestra.studio.demo:orchestrator",
                "subagent": "scripted:5"})
            while True:
                events = urllib.request.Request(f"{base}/api/runs/{created['thread_id']}/events?follow=0", headers=AUTH)
                with urllib.request.urlopen(events) as response:
                    if b'"type": "spec"' in response.read():
                        break
                time.sleep(0.01)
            result["run_post_to_plan_event_s"] = round(time.perf_counter() - started, 3)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        result["naive_whole_file_load"] = _naive_load(run / "rollouts.jsonl")
        result["python_heap_index_vs_whole"] = _traced_mb(run / "rollouts.jsonl")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--out", default=None, help="write the numbers as JSON here too")
    args = parser.parse_args(argv)
    result = measure(args.rows)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
