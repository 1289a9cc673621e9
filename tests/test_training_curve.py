"""Reading, comparing and plotting a GRPO run's curve (``mas-orchestra plot-training``)."""

from __future__ import annotations

import json
import math

import pytest

from mas_orchestra.bench.training_curve import (
    TrainingCurveError,
    compare_windows,
    curve_from_history,
    find_trainer_state,
    format_curve,
    load_curve,
    plot_training,
)
from mas_orchestra.cli import main as cli_main

PNG = b"\x89PNG\r\n\x1a\n"


def _entry(step: int, reward: float, valid: float = 1.0, **extra: float) -> dict:
    return {"step": step, "reward": reward, "reward_std": 0.5, "valid_spec_rate": valid, "agents_per_spec": 1.0,
            "delegation_share": 0.75, "correct_rate": reward, "loss": 0.1, **extra}


def _write_state(folder, entries) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": len(entries), "log_history": entries}))


def test_curve_keeps_training_steps_in_order_and_the_last_entry_of_a_repeated_step():
    history = [
        _entry(2, 0.5),
        {"step": 2, "eval_valid_spec_rate": 1.0, "eval_reward": 0.9},  # evaluation: not a training point
        _entry(1, 0.25),
        {"step": 3, "train_runtime": 12.0},  # the end-of-training summary has no rollout metrics
        _entry(2, 0.75),  # logged again (e.g. a resumed run): the later entry wins
    ]
    curve = curve_from_history(history)
    assert [p.step for p in curve] == [1, 2]
    assert [p.reward for p in curve] == [0.25, 0.75]
    assert curve[0].delegation_share == 0.75 and curve[0].reward_std == 0.5


def test_missing_metrics_are_nan_and_the_outcome_reward_stands_in_for_trl_reward():
    curve = curve_from_history([{"step": 1, "valid_spec_rate": 0.5, "outcome_reward/mean": 0.4}])
    assert curve[0].reward == 0.4 and math.isnan(curve[0].agents_per_spec)


@pytest.mark.parametrize(("steps", "window"), [(1, 1), (3, 1), (8, 2), (10, 2), (14, 3), (20, 4)])
def test_windows_are_a_fifth_of_the_steps_and_at_least_one(steps, window):
    curve = curve_from_history([_entry(i, i / steps) for i in range(1, steps + 1)])
    comparison = compare_windows(curve)
    assert comparison.window == window
    assert comparison.first_steps == tuple(range(1, window + 1))
    assert comparison.last_steps == tuple(range(steps - window + 1, steps + 1))
    expected_first = sum(i / steps for i in range(1, window + 1)) / window
    assert comparison.first_reward == pytest.approx(expected_first)
    assert comparison.rise >= 0


def test_a_falling_curve_has_a_negative_rise_and_valid_rates_are_compared_too():
    curve = curve_from_history([_entry(1, 1.0, valid=0.5), _entry(2, 0.5), _entry(3, 0.0, valid=1.0)])
    comparison = compare_windows(curve, fraction=0.34)
    assert comparison.rise == pytest.approx(-1.0)
    assert (comparison.first_valid, comparison.last_valid) == (0.5, 1.0)
    assert "rise -1.000" in comparison.describe()


def test_window_errors():
    with pytest.raises(TrainingCurveError, match="no training steps"):
        compare_windows([])
    with pytest.raises(ValueError, match="fraction"):
        compare_windows(curve_from_history([_entry(1, 0.0)]), fraction=0.9)


def test_find_state_prefers_the_run_then_the_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    _write_state(run / "checkpoint-9", [_entry(1, 0.0)])
    _write_state(run / "checkpoint-10", [_entry(1, 0.0), _entry(2, 1.0)])
    assert find_trainer_state(run) == run / "checkpoint-10" / "trainer_state.json"  # numeric, not by name
    assert [p.step for p in load_curve(run)] == [1, 2]
    _write_state(run, [_entry(1, 0.0), _entry(2, 1.0), _entry(3, 1.0)])
    assert find_trainer_state(run) == run / "trainer_state.json"
    assert find_trainer_state(run / "trainer_state.json") == run / "trainer_state.json"


def test_find_state_errors_say_what_to_point_at(tmp_path):
    with pytest.raises(TrainingCurveError, match="no such run directory"):
        find_trainer_state(tmp_path / "nope")
    with pytest.raises(TrainingCurveError, match=r"--output-dir of `python -m training\.grpo`"):
        find_trainer_state(tmp_path)
    (tmp_path / "trainer_state.json").write_text("{not json")
    with pytest.raises(TrainingCurveError, match=r"not a readable trainer_state\.json"):
        load_curve(tmp_path)
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 0}))
    with pytest.raises(TrainingCurveError, match="no log_history"):
        load_curve(tmp_path)


def test_plot_writes_a_png_next_to_the_state(tmp_path):
    _write_state(tmp_path, [_entry(i, min(1.0, i / 4)) for i in range(1, 6)])
    written = plot_training(tmp_path)
    assert written == tmp_path / "reward_curve.png"
    assert written.read_bytes()[:8] == PNG and written.stat().st_size > 5000
    other = plot_training(load_curve(tmp_path), tmp_path / "sub" / "c.png", title="mine")
    assert other.read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="out_path"):
        plot_training(load_curve(tmp_path))


def test_format_curve_has_one_row_per_step():
    text = format_curve(curve_from_history([_entry(1, 0.5), _entry(2, 1.0)]))
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].split()[:2] == ["step", "reward"]
    assert lines[2].split()[:2] == ["2", "1.000"]


def test_cli_plot_training(tmp_path, capsys):
    _write_state(tmp_path / "run", [_entry(i, 0.5 if i < 3 else 1.0) for i in range(1, 11)])
    assert cli_main(["plot-training", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "(10 steps)" in out and "reward 0.500 (steps 1-2) -> 1.000 (steps 9-10), rise +0.500" in out
    assert (tmp_path / "run" / "reward_curve.png").read_bytes()[:8] == PNG
    assert cli_main(["plot-training", str(tmp_path / "run"), "--no-plot", "--fraction", "0.5"]) == 0
    assert "(5 each)" in capsys.readouterr().out
    assert cli_main(["plot-training", str(tmp_path / "run"), "--out", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").is_file()


def test_cli_plot_training_errors_are_one_line(tmp_path, capsys):
    assert cli_main(["plot-training", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such run directory" in err and "Traceback" not in err
    _write_state(tmp_path / "empty", [{"step": 1, "loss": 0.3}])
    assert cli_main(["plot-training", str(tmp_path / "empty")]) == 2
    assert "no training steps" in capsys.readouterr().err


def test_agent_shares_are_read_tabulated_and_only_used_kinds_shown():
    history = [_entry(1, 0.25, **{"agent_share/cot": 0.75, "agent_share/debate": 0.25, "agent_share/sc": 0.0}),
               _entry(2, 1.0, **{"agent_share/cot": 0.0, "agent_share/debate": 1.0, "agent_share/sc": 0.0})]
    curve = curve_from_history(history)
    assert curve[1].agent_share == {"cot": 0.0, "debate": 1.0, "sc": 0.0}
    header, first, second = format_curve(curve).splitlines()
    assert header.split()[-2:] == ["cot", "debate"] and "sc" not in header.split()
    assert first.split()[-2:] == ["0.75", "0.25"] and second.split()[-2:] == ["0.00", "1.00"]
