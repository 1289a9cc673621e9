"""The command line: validate / draw / schema / convert."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mas_orchestra.cli import main
from tests.conftest import REPO, SPECS


def test_validate_ok_and_invalid(capsys):
    assert main(["validate", str(SPECS / "diamond.xml"), str(SPECS / "low_reflexion.xml")]) == 0
    out = capsys.readouterr().out
    assert "diamond.xml: ok (3 agents" in out and "low_reflexion.xml: ok (1 agents" in out
    assert main(["validate", str(SPECS / "invalid_cycle.xml")]) == 1
    err = capsys.readouterr().err
    assert "INVALID (2 problems)" in err
    assert "unknown agent 'OracleAgent'; valid: CoTAgent" in err and "cycle: A -> B -> A" in err
    assert "Traceback" not in err


def test_validate_missing_file(capsys):
    assert main(["validate", "nope.xml"]) == 1
    assert "nope.xml: no such file" in capsys.readouterr().err


def test_draw_schema_convert(capsys):
    assert main(["draw", str(SPECS / "diamond.xml")]) == 0
    assert "P1 --> FINAL" in capsys.readouterr().out
    assert main(["schema"]) == 0
    assert "nodes" in json.loads(capsys.readouterr().out)["properties"]
    assert main(["convert", str(SPECS / "diamond.xml"), "--to", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["sink"] == "FINAL"


def test_module_entry_point_runs_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "mas_orchestra", "validate", str(SPECS / "invalid_cycle.xml")],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )
    assert proc.returncode == 1
    assert "cycle: A -> B -> A" in proc.stderr and "Traceback" not in proc.stderr


def test_run_constrained_flags(capsys):
    # A scripted model cannot decode under a grammar: --constrained is a clear error, exit 2, no traceback.
    assert main(["run", "What is 6*7?", "--orchestrator", "scripted:42", "--subagent", "scripted:42",
                 "--constrained"]) == 2
    err = capsys.readouterr().err
    assert "ScriptedChatModel cannot decode under a grammar" in err and "--no-constrained" in err
    assert "Traceback" not in err
    # --constrained-auto falls back (with a warning) and runs: the scripted reply is a direct answer.
    assert main(["run", "What is 6*7?", "--orchestrator", "scripted:42", "--subagent", "scripted:42",
                 "--constrained-auto"]) == 0
    out = capsys.readouterr().out
    assert "== status == ok" in out and "answer: 42" in out


def test_eval_unknown_offered_agent_is_one_line_error(capsys, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "What is 1+1?", "answer": "2"}) + "\n", encoding="utf-8")
    code = main(["eval", "--data", str(data), "--agents", "cot,nope", "--subagent", "scripted:2",
                 "--orchestrator", "scripted:2", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: unknown agent 'nope'; valid: CoTAgent" in err and "Traceback" not in err


def test_eval_max_tokens_reaches_the_orchestrator_and_is_part_of_the_run_identity(capsys, tmp_path, monkeypatch):
    import mas_orchestra.runtime as runtime

    seen: list[int | None] = []

    class Recording(runtime.Orchestra):
        def __init__(self, *args, **kwargs):
            seen.append(kwargs["config"].orchestrator_max_tokens)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(runtime, "Orchestra", Recording)
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "What is 1+1?", "answer": "2"}) + "\n", encoding="utf-8")
    common = ["eval", "--data", str(data), "--subagent", "scripted:2", "--orchestrator", "scripted:2",
              "--out", str(tmp_path / "run"), "--no-progress", "--no-constrained"]
    assert main([*common, "--max-tokens", "144"]) == 0
    assert seen == [144]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["max_tokens"] == 144
    capsys.readouterr()
    assert main([*common, "--max-tokens", "512"]) == 2  # other budget, other policy: not the same run
    assert "max_tokens: 144 -> 512" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*common, "--max-tokens", "0"])
