"""The benchmark entry point runs and writes its JSON (numbers are reported, never asserted)."""

from __future__ import annotations

import json

from benchmarks.__main__ import main
from benchmarks.concurrency import critical_path_calls, shapes, total_calls


def test_critical_path_and_call_counts():
    s = shapes()
    assert critical_path_calls(s["chain-4"]) == 4 and total_calls(s["chain-4"]) == 4
    assert critical_path_calls(s["fan-in-8"]) == 2 and total_calls(s["fan-in-8"]) == 9
    assert critical_path_calls(s["debate-3x2 (internal)"]) == 3 and total_calls(s["debate-3x2 (internal)"]) == 7


def test_entry_point_writes_rows(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["--quick", "--only", "concurrency", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    cases = {row["case"] for row in data["rows"]}
    assert {"chain-4", "diamond-4", "fan-in-8"} <= cases
    assert all(row["ratio"] > 0 and row["sequential_s"] > 0 for row in data["rows"])
    assert "ratio" in capsys.readouterr().out
