"""Where a curve flattens (lra_lab.reports.learning_curves), on curves built to have a known answer."""

from __future__ import annotations

import json

from lra_lab.reports import learning_curves as lc


def test_a_rising_then_flat_curve_flattens_where_it_comes_within_tolerance_of_its_best():
    val = {250 * i: v for i, v in enumerate([10, 20, 30, 40, 44.5, 45, 44, 45.2, 44.8], start=1)}
    loss = {s: 2.0 - 0.0001 * s for s in range(50, 2300, 50)}
    f = lc.flattening(val, loss, tolerance=1.0)
    assert f["flattens_at"] == 1250 and f["best"] == 45.2 and f["still_improving"] is False
    assert abs(f["loss_slope_per_1000"] - (-0.1)) < 1e-9


def test_a_curve_still_rising_at_the_end_is_marked_so():
    val = {250 * i: 10.0 + 3 * i for i in range(1, 13)}
    assert lc.flattening(val, {}, tolerance=1.0)["still_improving"] is True


def test_the_command_reads_running_and_finished_runs(tmp_path, capsys):
    for row, accs in (("a", [0.2, 0.3, 0.31]), ("b", [0.1, 0.1, 0.12])):
        d = tmp_path / row / "seed100"
        d.mkdir(parents=True)
        lines = [{"step": 250 * (i + 1), "split": "validation", "accuracy": a, "loss": 1.0} for i, a in enumerate(accs)]
        lines += [{"step": 50 * i, "split": "train", "loss": 2.0 - 0.01 * i} for i in range(1, 16)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert lc.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "curves.json").read_text())
    assert set(record["rows"]) == {"a (seed100)", "b (seed100)"} and isinstance(record["git_commit_start"], str)
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
    assert "| a (seed100) (running) | 750 | 31.0% (750) | 500 |" in capsys.readouterr().out


def test_seeds_of_one_setup_are_summarised_as_a_mean_curve_and_its_rise_at_the_end(tmp_path, capsys):
    """Two seeds of 'a' rise by 26 and 22 points over the last 1,000 steps (250 -> 1,250; mean +24); 'b' has one."""
    for row, seed, accs in (
        ("a", 1, [0.1, 0.2, 0.3, 0.34, 0.36]),
        ("a", 2, [0.1, 0.3, 0.3, 0.3, 0.32]),
        ("b", 1, [0.1, 0.2, 0.2, 0.2, 0.2]),
    ):
        d = tmp_path / row / f"seed{seed}"
        d.mkdir(parents=True)
        lines = [{"step": 250 * (i + 1), "split": "validation", "accuracy": a, "loss": 1.0} for i, a in enumerate(accs)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    groups = lc.setups(lc.collect(tmp_path))
    a = groups["a"]
    assert a["seeds"] == 2 and a["steps"] == [250, 500, 750, 1000, 1250]
    assert a["mean"][-1] == 34.0 and a["low"][1] == 20.0 and a["high"][1] == 30.0
    assert abs(a["mean_rise_last_window"] - 24.0) < 1e-9 and a["best_mean"] == 34.0
    assert groups["b"]["seeds"] == 1 and abs(groups["b"]["mean_rise_last_window"] - 10.0) < 1e-9
    assert lc.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert "| a | 2 | 34.0% +- 2.8 | +24.0 points |" in capsys.readouterr().out
    assert "setups" in json.loads((tmp_path / "out" / "curves.json").read_text())
