"""python -m lra.reports.compare: its p-values and interval are scipy's and statsmodels' on a synthetic table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from conftest import result_record
from lra.reports import compare

A = [41.0, 38.5, 44.0, 39.0, 42.5]
B = [37.0, 38.0, 40.5, 36.0, 41.0]
C = [35.0, 36.5, 37.0, 36.0, 34.5]


def _write(root: Path, variant: str, values: list[float], seeds=(0, 1, 2, 3, 4)) -> None:
    for seed, v in zip(seeds, values, strict=False):
        d = root / variant.replace(" ", "_") / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(result_record(variant=variant, seed=seed, test_accuracy=v / 100)))


@pytest.fixture
def table(tmp_path) -> Path:
    _write(tmp_path, "ConvLuna-16", A)
    _write(tmp_path, "Luna-16", B)
    _write(tmp_path, "Transformer", C + [40.0], seeds=range(6))
    return tmp_path


def test_two_rows_give_scipys_paired_t_wilcoxon_and_interval(table, capsys):
    rows, task = compare.load_rows(table, ["ConvLuna-16", "Luna-16"], None)
    r = compare.paired(rows["ConvLuna-16"], rows["Luna-16"])
    assert r["t_p_two_sided"] == pytest.approx(stats.ttest_rel(A, B).pvalue, rel=1e-9)
    assert r["t_p_greater"] == pytest.approx(stats.ttest_rel(A, B, alternative="greater").pvalue, rel=1e-9)
    assert r["wilcoxon_p_two_sided"] == pytest.approx(stats.wilcoxon(A, B).pvalue, rel=1e-9)
    d = np.subtract(A, B)
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert r["ci"] == pytest.approx([lo, hi], rel=1e-9)
    assert compare.main(["--results", str(table), "ConvLuna-16", "Luna-16"]) == 0
    out = capsys.readouterr().out
    assert "ConvLuna-16: 41.00 ± 2.32% over 5 seeds" in out and "not evidence of equality" in out


def test_three_rows_give_friedman_over_common_seeds_and_holm(table):
    rows, _ = compare.load_rows(table, ["ConvLuna-16", "Luna-16", "Transformer"], None)
    f = compare.friedman_holm(rows)
    assert f["seeds"] == [0, 1, 2, 3, 4]  # the Transformer's seed 5 has no partner
    assert f["friedman_p"] == pytest.approx(stats.friedmanchisquare(A, B, C).pvalue, rel=1e-9)
    raw = [stats.ttest_rel(x, y).pvalue for x, y in ((A, B), (A, C), (B, C))]
    assert [p["t_p_holm"] for p in f["pairs"]] == pytest.approx(list(multipletests(raw, method="holm")[1]), rel=1e-9)


def test_mistakes_are_one_line_naming_the_fix(table, tmp_path, capsys):
    assert compare.main(["--results", str(table), "ConvLuna16", "Luna-16"]) == 2
    assert "did you mean 'ConvLuna-16'" in capsys.readouterr().err
    assert compare.main(["--results", str(tmp_path / "nope"), "A", "B"]) == 2
    assert "is not a folder" in capsys.readouterr().err
