"""Where a curve flattens (lra.reports.learning_curves), on curves built to have a known answer."""

from __future__ import annotations

import json

from lra.reports import learning_curves as lc


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
