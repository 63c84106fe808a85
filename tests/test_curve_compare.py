"""scripts/compare_curves.py: pairing, smoothing and the gap on made-up curves, and bfloat16
against float32 on real smoke runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import script_main
from lra_lab.reports import curve_compare


def _run(folder: Path, losses: list[float], val: float = 0.5) -> None:
    folder.mkdir(parents=True)
    records = [{"step": i + 1, "split": "train", "loss": v, "accuracy": 0.1} for i, v in enumerate(losses)]
    records.append({"step": len(losses), "split": "validation", "loss": 1.0, "accuracy": val})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_smoothing_is_a_trailing_mean():
    assert curve_compare.smooth(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist() == [1.0, 2.0, 4.0, 6.0]


def test_gap_pairs_and_agreement(tmp_path):
    base = list(np.linspace(2.3, 1.0, 100))
    _run(tmp_path / "a" / "listops_transformer" / "seed0", base)
    _run(tmp_path / "b" / "listops_transformer" / "seed0", [v + 0.02 for v in base], val=0.6)
    _run(tmp_path / "a" / "listops_luna-16" / "seed0", base)
    _run(tmp_path / "b" / "listops_luna-16" / "seed0", base[:50] + [v + 0.3 for v in base[50:]])
    _run(tmp_path / "a" / "listops_linear" / "seed0", base)  # no partner: left out
    main = script_main("compare_curves")
    code = main(
        [
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--labels",
            "float32",
            "bfloat16",
            "--window",
            "5",
            "--out",
            str(tmp_path / "out"),
            "--name",
            "cmp",
        ]
    )
    assert code == 1  # one pair disagrees
    report = json.loads((tmp_path / "out" / "cmp.json").read_text())
    rows = {r["run"]: r for r in report["rows"]}
    assert set(rows) == {"listops_transformer/seed0", "listops_luna-16/seed0"}
    t, luna = rows["listops_transformer/seed0"], rows["listops_luna-16/seed0"]
    assert t["max_gap"] == pytest.approx(0.02) and t["agree"] and t["validation_accuracy"] == [0.5, 0.6]
    assert luna["max_gap"] == pytest.approx(0.3) and not luna["agree"] and luna["max_gap_step"] >= 55
    text = (tmp_path / "out" / "cmp.md").read_text()
    assert "| listops_luna-16/seed0 | 100 |" in text and "| no |" in text
    assert (tmp_path / "out" / "cmp.png").stat().st_size > 0


def test_roots_without_common_runs_are_refused(tmp_path, capsys):
    _run(tmp_path / "a" / "x" / "seed0", [1.0, 1.0])
    _run(tmp_path / "b" / "y" / "seed0", [1.0, 1.0])
    assert (
        script_main("compare_curves")([str(tmp_path / "a"), str(tmp_path / "b"), "--name", "n", "--out", str(tmp_path)])
        == 2
    )
    assert "no run is under both" in capsys.readouterr().err


@pytest.mark.slow  # benchmark / GPU-kit end to end: run deliberately (-m slow), keeps the default suite under 10 min
def test_bfloat16_follows_float32_on_a_smoke_run(smoke_data_dir, tmp_path):
    from lra.train import train_and_evaluate
    from test_train import smoke

    for dtype in ("float32", "bfloat16"):
        config = smoke(smoke_data_dir, num_train_steps=30, eval_every=30, checkpoint_every=30, **{"model.dtype": dtype})
        train_and_evaluate(config, tmp_path / dtype / "listops_transformer" / "seed0")
    (row,) = curve_compare.compare(tmp_path / "float32", tmp_path / "bfloat16", window=5, tolerance=0.1)
    assert row["steps"] == 30
    assert 0 < row["max_gap"] < 0.1  # bfloat16 rounds differently, and stays close
