"""scripts/make_tables.py on synthetic result files: means, stds, bold, n=, scales, Friedman + Holm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import friedmanchisquare
from statsmodels.stats.multitest import multipletests

from lra import tables

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ["Transformer", "Luna-1", "Luna-16", "Luna-256", "ConvLuna-1", "ConvLuna-16", "ConvLuna-256"]
TASKS = ["listops", "text"]
SEEDS = range(5)


def write_run(root: Path, task: str, variant: str, seed: int, acc: float, *, preset: str = "cpu", steps: int = 300,
              device: str = "cpu", overrides: dict | None = None, curve: dict[int, float] | None = None) -> Path:
    workdir = root / preset / str(steps) / f"{task}_{variant}" / f"seed{seed}"
    workdir.mkdir(parents=True)
    result = {"task": task, "attention": "x", "variant": variant, "seed": seed, "best_val_accuracy": acc,
              "best_step": steps, "test_accuracy": acc, "num_train_steps": steps, "train_seconds": 1.0,
              "steps_per_second": 1.0, "num_params": 1, "config_preset": preset, "device_kind": device,
              "jax_version": "0", "git_commit": "abc"}
    (workdir / "result.json").write_text(json.dumps(result))
    curve = curve or {steps // 2: acc / 2, steps: acc}
    lines = [{"step": s, "split": "train", "loss": 1.0, "accuracy": 0.1} for s in curve]
    lines += [{"step": s, "split": "validation", "loss": 1.0, "accuracy": a} for s, a in curve.items()]
    lines += [{"step": steps, "split": "test", "loss": 1.0, "accuracy": acc}]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if overrides is not None:
        (workdir / "sweep_run.json").write_text(json.dumps({"overrides": overrides}))
    return workdir


@pytest.fixture
def grid(tmp_path):
    """5 seeds of 7 variants on 2 tasks with random accuracies; returns (root, accuracies)."""
    rng = np.random.default_rng(0)
    acc = {}
    for v in VARIANTS:
        for t in TASKS:
            for s in SEEDS:
                acc[v, t, s] = float(rng.uniform(0.2, 0.8))
                write_run(tmp_path / "runs", t, v, s, acc[v, t, s])
    return tmp_path / "runs", acc


def make(results: Path, out: Path, *extra: str) -> dict:
    from importlib import import_module

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        assert import_module("make_tables").main(["--results", str(results), "--out", str(out), *extra]) == 0
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return json.loads((out / "summary.json").read_text())


def md_row(markdown: str, variant: str) -> list[str]:
    line = next(l for l in markdown.splitlines() if l.startswith(f"| {variant} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_means_stds_bold_and_average(grid, tmp_path):
    root, acc = grid
    summary = make(root, tmp_path / "out")
    (table,) = summary["tables"]
    assert table["expected_seeds"] == 5 and table["tasks"] == ["text", "listops"]  # the paper's column order
    assert table["variants"] == VARIANTS
    md = (tmp_path / "out" / table["files"]["markdown"]).read_text()
    means = {}
    for v in VARIANTS:
        row = md_row(md, v)
        for t, text in zip(table["tasks"], row):
            values = [100 * acc[v, t, s] for s in SEEDS]
            means[v, t] = np.mean(values)
            cell = next(c for c in table["cells"] if c["variant"] == v and c["task"] == t)
            assert cell["mean"] == pytest.approx(means[v, t]) and cell["n"] == 5
            assert cell["std"] == pytest.approx(np.std(values, ddof=1))
            assert text.replace("**", "") == f"{means[v, t]:.2f} ± {np.std(values, ddof=1):.2f}"
        average = np.mean([means[v, t] for t in TASKS])
        assert table["averages"][v] == pytest.approx(average)
        assert row[-1].replace("**", "") == f"{average:.2f}"
    for i, t in enumerate(table["tasks"]):
        best = max(VARIANTS, key=lambda v: means[v, t])
        assert table["best"][t] == [best]
        for v in VARIANTS:
            assert md_row(md, v)[i].startswith("**") == (v == best)
    tex = (tmp_path / "out" / table["files"]["latex"]).read_text()
    assert tex.count(r"\mathbf") == 3 and r"\pm" in tex and tex.count(r"\midrule") == 3  # header + 2 family breaks
    assert "300 training steps" in md and "device: cpu" in md and "ddof=1" in md


def test_friedman_holm_matches_scipy_and_statsmodels(grid, tmp_path):
    root, acc = grid
    (table,) = make(root, tmp_path / "out")["tables"]
    raw = {(m, t): friedmanchisquare(*[[acc[f"{m}-{k}", t, s] for s in SEEDS] for k in (1, 16, 256)]).pvalue
           for m in ("Luna", "ConvLuna") for t in ("text", "listops")}
    holm = dict(zip(raw, multipletests(list(raw.values()), method="holm")[1]))
    got = {(r["model"], r["task"]): r for r in table["friedman"]}
    assert set(got) == set(raw)  # the Transformer has no memory sizes: not tested
    for key in raw:
        assert got[key]["p_value"] == pytest.approx(raw[key]) and got[key]["p_holm"] == pytest.approx(holm[key])
        assert got[key]["seeds"] == list(SEEDS)
    out = tmp_path / "out" / table["slug"]
    csv_text = (out / "friedman.csv").read_text()
    assert csv_text.count("\n") == 5
    assert f"{holm['ConvLuna', 'listops']:.3f}" in (out / "friedman.md").read_text()
    assert (out / "friedman.tex").read_text().count(r"\\") == 3
    for png in ("friedman.png", "curves_text.png", "curves_listops.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_friedman_pairs_by_seed_and_skips_incomplete(tmp_path):
    root = tmp_path / "runs"
    accs = {1: [0.1, 0.2, 0.3, 0.4], 16: [0.3, 0.1, 0.5, 0.2], 256: [0.5, 0.6, 0.1, 0.9]}
    for size, values in accs.items():
        for seed, a in enumerate(values):
            if not (size == 256 and seed == 3):  # seed 3 lacks size 256: only seeds 0-2 are paired
                write_run(root, "listops", f"Luna-{size}", seed, a)
    write_run(root, "listops", "ConvLuna-1", 0, 0.5)
    write_run(root, "listops", "ConvLuna-16", 0, 0.5)  # no 256: not tested
    (table,) = make(root, tmp_path / "out")["tables"]
    got = {r["model"]: r for r in table["friedman"]}
    expected = friedmanchisquare(*[accs[k][:3] for k in (1, 16, 256)]).pvalue
    assert got["Luna"]["seeds"] == [0, 1, 2] and got["Luna"]["p_value"] == pytest.approx(expected)
    assert got["Luna"]["p_holm"] == pytest.approx(expected)  # one test: Holm changes nothing
    assert got["ConvLuna"]["p_value"] is None and "256" in got["ConvLuna"]["note"]


def test_incomplete_cells_show_n_and_are_not_averaged(grid, tmp_path):
    root, acc = grid
    # ConvLuna-16 on listops loses 2 seeds but gets the highest accuracies: still not bold
    for s in (3, 4):
        for f in (root / "cpu" / "300" / "listops_ConvLuna-16" / f"seed{s}").iterdir():
            f.unlink()
        (root / "cpu" / "300" / "listops_ConvLuna-16" / f"seed{s}").rmdir()
    for s in (0, 1, 2):
        path = root / "cpu" / "300" / "listops_ConvLuna-16" / f"seed{s}" / "result.json"
        r = json.loads(path.read_text())
        path.write_text(json.dumps(dict(r, test_accuracy=0.99)))
    # an unfinished run: config.json but no result.json
    (root / "cpu" / "300" / "listops_Luna-1" / "seed9").mkdir()
    (root / "cpu" / "300" / "listops_Luna-1" / "seed9" / "config.json").write_text("{}")
    summary = make(root, tmp_path / "out")
    (table,) = summary["tables"]
    md = (tmp_path / "out" / table["files"]["markdown"]).read_text()
    row = md_row(md, "ConvLuna-16")
    assert row[1] == "99.00 ± 0.00 (n=3)" and row[-1] == "—"
    assert table["averages"]["ConvLuna-16"] is None and "ConvLuna-16" not in table["best"]["listops"]
    assert table["best"]["listops"] and all("(n=" not in c for c in md_row(md, "Luna-1"))
    assert len(summary["unfinished_workdirs"]) == 1
    assert "n=3" in (tmp_path / "out" / table["files"]["latex"]).read_text()
    # with --seeds 6 every cell is incomplete: nothing bold, no averages
    (table6,) = make(root, tmp_path / "out6", "--seeds", "6")["tables"]
    assert all(not b for b in table6["best"].values()) and not any(table6["averages"].values())


def test_scales_are_never_mixed(tmp_path):
    root = tmp_path / "runs"
    for s in range(2):
        write_run(root, "listops", "Transformer", s, 0.30 + s / 100, preset="cpu", steps=300)
        write_run(root, "listops", "Transformer", s, 0.40 + s / 100, preset="cpu", steps=600)
        write_run(root, "listops", "Transformer", s, 0.50 + s / 100, preset="smoke", steps=300)
        # paper preset, each task its default steps: one table
        write_run(root, "listops", "Luna-16", s, 0.37, preset="paper", steps=50_000, device="NVIDIA H100")
        write_run(root, "text", "Luna-16", s, 0.65, preset="paper", steps=25_000, device="NVIDIA H100")
    # the same preset and steps with another recorded override: its own table; data_dir is ignored
    write_run(root / "o", "listops", "Transformer", 0, 0.9, steps=300, overrides={"data.num_train": "2000"})
    write_run(root / "d", "listops", "Transformer", 2, 0.32, steps=300, overrides={"data_dir": "/x"})
    summary = make(root, tmp_path / "out")
    by_slug = {t["slug"]: t for t in summary["tables"]}
    assert list(by_slug) == ["paper", "cpu_600steps", "cpu_300steps", "cpu_300steps_data.num-train-2000",
                             "smoke_300steps"]
    assert by_slug["paper"]["tasks"] == ["text", "listops"] and by_slug["paper"]["device_kinds"] == ["NVIDIA H100"]
    assert by_slug["paper"]["num_train_steps"] == {"text": [25_000], "listops": [50_000]}
    assert "ListOps 50,000" in by_slug["paper"]["title"]
    cpu300 = next(c for c in by_slug["cpu_300steps"]["cells"])
    assert cpu300["n"] == 3 and cpu300["mean"] == pytest.approx(100 * np.mean([0.30, 0.31, 0.32]))
    assert "data.num_train=2000" in by_slug["cpu_300steps_data.num-train-2000"]["title"]
    md = (tmp_path / "out" / "tables.md").read_text()
    assert md.count("### Preset") == 5


def test_learning_curves_use_validation_records(tmp_path):
    root = tmp_path / "runs"
    for s, a in enumerate([0.2, 0.4]):
        write_run(root, "listops", "Luna-1", s, a, curve={100: a / 2, 200: a, 300: a})
    runs, _ = tables.load_results(root)
    curves = tables.validation_curves(runs, "listops")
    assert curves == {"Luna-1": {0: {100: 10.0, 200: 20.0, 300: 20.0}, 1: {100: 20.0, 200: 40.0, 300: 40.0}}}


def test_cli_reports_missing_results(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "make_tables.py"), "--results", str(tmp_path),
                           "--out", str(tmp_path / "out"), "--no-plots"], capture_output=True, text=True)
    assert proc.returncode == 1 and "no finished runs" in proc.stderr


def test_other_json_files_named_result_are_skipped(tmp_path):
    write_run(tmp_path, "listops", "Luna-1", 0, 0.3)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "result.json").write_text(json.dumps({"cases": []}))
    with pytest.warns(UserWarning, match="not an lra.train result"):
        runs, unfinished = tables.load_results(tmp_path)
    assert [r.variant for r in runs] == ["Luna-1"] and unfinished == []


def test_note_goes_under_every_table(grid, tmp_path):
    root, _ = grid
    note = "Reduced to 300 steps to fit one session."
    summary = make(root, tmp_path / "out", "--note", note, "--no-plots")
    md = (tmp_path / "out" / summary["tables"][0]["files"]["markdown"]).read_text()
    table_end = max(i for i, line in enumerate(md.splitlines()) if line.startswith("|"))
    assert md.splitlines()[table_end + 2] == note and summary["note"] == note
    assert note in (tmp_path / "out" / "tables.md").read_text()
