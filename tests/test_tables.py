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

from conftest import result_record, script_main
from lra.reports import tables

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ["Transformer", "Luna-1", "Luna-16", "Luna-256", "ConvLuna-1", "ConvLuna-16", "ConvLuna-256"]
TASKS = ["listops", "text"]
SEEDS = range(5)


def write_run(
    root: Path,
    task: str,
    variant: str,
    seed: int,
    acc: float,
    *,
    preset: str = "cpu",
    steps: int = 300,
    device: str = "cpu",
    overrides: dict | None = None,
    curve: dict[int, float] | None = None,
    config: dict | None = None,
) -> Path:
    workdir = root / preset / str(steps) / f"{task}_{variant}" / f"seed{seed}"
    workdir.mkdir(parents=True)
    result = result_record(
        task=task,
        attention=(config or {}).get("model", {}).get("attention", "x"),
        variant=variant,
        seed=seed,
        best_val_accuracy=acc,
        best_step=steps,
        test_accuracy=acc,
        num_train_steps=steps,
        config_preset=preset,
        device_kind=device,
    )
    (workdir / "result.json").write_text(json.dumps(result))
    curve = curve or {steps // 2: acc / 2, steps: acc}
    lines = [{"step": s, "split": "train", "loss": 1.0, "accuracy": 0.1} for s in curve]
    lines += [{"step": s, "split": "validation", "loss": 1.0, "accuracy": a} for s, a in curve.items()]
    lines += [{"step": steps, "split": "test", "loss": 1.0, "accuracy": acc}]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if overrides is not None:
        (workdir / "sweep_run.json").write_text(json.dumps({"overrides": overrides}))
    if config is not None:
        (workdir / "config.json").write_text(json.dumps({"seed": seed, **config}))
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
    assert script_main("make_tables")(["--results", str(results), "--out", str(out), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def md_row(markdown: str, variant: str) -> list[str]:
    line = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {variant} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def assert_no_bold_is_beaten(markdown: str, variants: list[str]) -> None:
    """The bold rule's promise: no bold cell is lower than a plain cell shown in its column."""
    rows = [md_row(markdown, v) for v in variants]
    for column in zip(*rows, strict=False):
        shown = [(c.startswith("**"), float(c.replace("**", "").split()[0])) for c in column if c != "—"]
        plain = [x for bold, x in shown if not bold]
        for bold, x in shown:
            if bold and plain:
                assert x >= max(plain), column


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
        for t, text in zip(table["tasks"], row, strict=False):
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
    assert_no_bold_is_beaten(md, VARIANTS)
    tex = (tmp_path / "out" / table["files"]["latex"]).read_text()
    assert tex.count(r"\mathbf") == 3 and r"\pm" in tex and tex.count(r"\midrule") == 3  # header + 2 family breaks
    assert "300 training steps" in md and "device: cpu" in md and "ddof=1" in md


def test_friedman_holm_matches_scipy_and_statsmodels(grid, tmp_path):
    root, acc = grid
    (table,) = make(root, tmp_path / "out")["tables"]
    raw = {
        (m, t): friedmanchisquare(*[[acc[f"{m}-{k}", t, s] for s in SEEDS] for k in (1, 16, 256)]).pvalue
        for m in ("Luna", "ConvLuna")
        for t in ("text", "listops")
    }
    holm = dict(zip(raw, multipletests(list(raw.values()), method="holm")[1], strict=False))
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
    # ConvLuna-16 on listops loses 2 seeds but gets the highest accuracies: not bold, and no other
    # listops cell is bold either (it would sit under a higher plain number)
    for s in (3, 4):
        for f in (root / "cpu" / "300" / "listops_ConvLuna-16" / f"seed{s}").iterdir():
            f.unlink()
        (root / "cpu" / "300" / "listops_ConvLuna-16" / f"seed{s}").rmdir()
    for s in (0, 1, 2):
        path = root / "cpu" / "300" / "listops_ConvLuna-16" / f"seed{s}" / "result.json"
        r = json.loads(path.read_text())
        path.write_text(json.dumps(dict(r, test_accuracy=0.99)))
        metrics = path.parent / "metrics.jsonl"  # its own log agrees (issue 52: an edited record alone is refused)
        lines = [json.loads(x) for x in metrics.read_text().splitlines()]
        edited = [dict(x, accuracy=0.99) if x["split"] == "test" else x for x in lines]
        metrics.write_text("".join(json.dumps(x) + "\n" for x in edited))
    # an unfinished run: config.json but no result.json
    (root / "cpu" / "300" / "listops_Luna-1" / "seed9").mkdir()
    (root / "cpu" / "300" / "listops_Luna-1" / "seed9" / "config.json").write_text("{}")
    summary = make(root, tmp_path / "out")
    (table,) = summary["tables"]
    md = (tmp_path / "out" / table["files"]["markdown"]).read_text()
    row = md_row(md, "ConvLuna-16")
    assert row[1] == "99.00 ± 0.00 (n=3)" and row[-1] == "—"
    assert table["averages"]["ConvLuna-16"] is None and table["best"]["listops"] == []
    listops = table["tasks"].index("listops")
    assert not any(md_row(md, v)[listops].startswith("**") for v in VARIANTS)
    assert table["best"]["text"] and table["best"]["Average"] and all("(n=" not in c for c in md_row(md, "Luna-1"))
    assert_no_bold_is_beaten(md, VARIANTS)
    assert len(summary["unfinished_workdirs"]) == 1
    assert "n=3" in (tmp_path / "out" / table["files"]["latex"]).read_text()
    # with --seeds 6 every cell is incomplete: nothing bold, no averages
    (table6,) = make(root, tmp_path / "out6", "--seeds", "6")["tables"]
    assert all(not b for b in table6["best"].values()) and not any(table6["averages"].values())


def test_bold_never_sits_under_a_higher_plain_cell(tmp_path):
    """The retired first every-family table's case: the Transformer has 2 seeds, every other row 1,
    ConvLuna-16 highest."""
    root = tmp_path / "runs"
    write_run(root, "listops", "Transformer", 0, 0.358)
    write_run(root, "listops", "Transformer", 1, 0.352)
    write_run(root, "listops", "Luna-16", 0, 0.356)
    write_run(root, "listops", "ConvLuna-16", 0, 0.382)
    variants = ["Transformer", "Luna-16", "ConvLuna-16"]
    # default expected count = the largest (2): only the Transformer is complete; it used to be bold
    # at 35.50 over ConvLuna-16's 38.20. Its best is not established: no bold.
    (table,) = make(root, tmp_path / "out", "--no-plots")["tables"]
    md = (tmp_path / "out" / table["files"]["markdown"]).read_text()
    assert table["expected_seeds"] == 2 and table["best"]["listops"] == [] and "**" not in md
    # --seeds 1: every cell is complete, the highest is bold, the 2-seed cell shows its n
    (table,) = make(root, tmp_path / "out1", "--seeds", "1", "--no-plots")["tables"]
    md = (tmp_path / "out1" / table["files"]["markdown"]).read_text()
    assert table["best"]["listops"] == ["ConvLuna-16"]
    assert [md_row(md, v)[0] for v in variants] == ["35.50 ± 0.42 (n=2)", "35.60", "**38.20**"]
    assert_no_bold_is_beaten(md, variants)
    # ties at the printed precision: all bold
    write_run(root, "listops", "Luna-1", 0, 0.38201)
    (table,) = make(root, tmp_path / "out2", "--seeds", "1", "--no-plots")["tables"]
    assert table["best"]["listops"] == ["ConvLuna-16", "Luna-1"]


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
    assert list(by_slug) == [
        "paper",
        "cpu_600steps",
        "cpu_300steps",
        "cpu_300steps_data.num-train-2000",
        "smoke_300steps",
    ]
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


def test_task_classes_match_the_data_modules():
    from importlib import import_module

    from lra.data import get_loader

    for task, classes in tables.TASK_CLASSES.items():
        module = get_loader(task).__module__  # pathx is read by lra.data.pathfinder
        assert import_module(module).NUM_CLASSES == classes, task
    assert tables.curve_baselines("listops") == [("chance (10 classes)", 10.0)]
    assert tables.curve_baselines("text", 51.2)[-1] == ("majority class of validation", 51.2)


def test_curve_titles_are_words(tmp_path):
    root = tmp_path / "runs"
    for s in range(5):
        for v in ("Transformer", "Luna-16"):
            write_run(
                root, "listops", v, s, 0.3, steps=750, overrides={"num_train_steps": "750", "warmup_steps": "500"}
            )
    write_run(
        root / "x", "listops", "Linear", 0, 0.3, steps=750, overrides={"num_train_steps": "750", "warmup_steps": "500"}
    )
    runs, _ = tables.load_results(root)
    ((scale, group),) = tables.group_by_scale(runs).items()
    table = tables.build_table(scale, group, 5)
    assert tables.curve_title(table, "listops") == (
        "ListOps, cpu preset, 750 training steps (warmup 500 steps), " "5 seeds (Linear: 1)"
    )


def test_curves_figure_shows_test_accuracy_baselines_and_markers(tmp_path, monkeypatch):
    """The figure make_tables draws, inspected before it is closed: panels, legend, lines, markers."""
    from lra.reports import plots

    root = tmp_path / "runs"
    for i, v in enumerate(VARIANTS):
        for s in range(2):
            write_run(
                root,
                "listops",
                v,
                s,
                0.30 + i / 100 + s / 100,
                curve={250: 0.2, 500: 0.25 + i / 100, 750: 0.30 + i / 100 + s / 100},
            )
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    summary = make(root, tmp_path / "out", "--majority", "listops=16.9")
    assert summary["majority_class_percent"] == {"listops": 16.9}
    (fig,) = [f for f in figures if f.get_suptitle().startswith("ListOps")]
    assert fig.get_suptitle() == "ListOps, cpu preset, 300 training steps, 2 seeds"
    luna, convluna = fig.axes
    assert (luna.get_title(), convluna.get_title()) == ("Luna", "ConvLuna")
    labels = [t.get_text() for t in luna.get_legend().get_texts()]
    assert labels == [
        "Transformer: test 30.5 ± 0.7",
        "Luna-1: test 31.5 ± 0.7",
        "Luna-16: test 32.5 ± 0.7",
        "Luna-256: test 33.5 ± 0.7",
    ]
    curves = [line for line in luna.get_lines() if len(line.get_xdata()) == 3]
    assert len(curves) == 4 and all(line.get_marker() not in (None, "None", "") for line in curves)
    assert (
        len(
            {
                (
                    line.get_color() if isinstance(line.get_color(), str) else tuple(line.get_color()),
                    line.get_linestyle(),
                )
                for line in curves
            }
        )
        == 4
    )
    levels = {line.get_ydata()[0] for line in luna.get_lines() if len(line.get_xdata()) == 2}
    assert levels == {10.0, 16.9}  # chance and the majority class
    notes = {t.get_text() for t in luna.texts}
    assert {"chance (10 classes): 10.0%", "majority class of validation: 16.9%"} <= notes
    with pytest.raises(SystemExit):
        make(root, tmp_path / "bad", "--majority", "listops")


def test_curve_panels_keep_every_variant_once():
    from lra.reports import plots

    assert plots.curve_panels(VARIANTS[:5]) == [("", VARIANTS[:5])]
    assert plots.curve_panels(VARIANTS) == [("Luna", VARIANTS[1:4]), ("ConvLuna", VARIANTS[4:])]
    nine = [
        "Transformer",
        "Luna-16",
        "ConvLuna-16",
        "Agglomerative",
        "Clustered-100",
        "Dispersed",
        "Gated Linear",
        "Linear",
        "i-Clustered-100",
    ]
    panels = plots.curve_panels(nine)
    assert [len(members) for _, members in panels] == [4, 4]
    assert [v for _, members in panels for v in members] == nine[1:]


def test_cli_reports_missing_results(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "make_tables.py"),
            "--results",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--no-plots",
        ],
        capture_output=True,
        text=True,
    )
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


def cells_of(summary: dict) -> dict[str, list[float]]:
    return {c["variant"]: c["values"] for t in summary["tables"] for c in t["cells"]}


def test_cell_pools_only_runs_of_one_config(tmp_path):
    """Issue 26 D4: a run of another config with the same label is its own row, never a 4th seed."""
    base = {"learning_rate": 0.001, "model": {"num_layers": 4, "attention": "softmax"}, "log_every": 10}
    for seed in range(3):  # paths and logging may differ within a cell
        write_run(
            tmp_path / "runs",
            "listops",
            "Transformer",
            seed,
            0.4,
            config={**base, "data_dir": f"/data{seed}", "log_every": 10 + seed},
        )
    odd = write_run(
        tmp_path / "runs",
        "listops",
        "Transformer",
        3,
        0.9,
        config={**base, "learning_rate": 0.05, "model": {"num_layers": 2, "attention": "softmax"}},
    )
    with pytest.warns(UserWarning, match=rf"2 different configs.*learning_rate=0.05, model.num_layers=2\]: {odd}"):
        summary = make(tmp_path / "runs", tmp_path / "out", "--no-plots")
    assert cells_of(summary) == {
        "Transformer": [40.0] * 3,
        "Transformer [learning_rate=0.05, model.num_layers=2]": [90.0],
    }


def test_an_option_written_out_pools_with_its_default(tmp_path):
    """Issue 39 point 8: ConvLuna's default 16 cells and ``mem=16`` written out are one model, one row;
    another memory size is still a row of its own."""
    base = {"model": {"attention": "convluna", "attention_kwargs": {}}}
    for seed in range(2):
        write_run(tmp_path / "runs", "listops", "ConvLuna-16", seed, 0.4, config=base)
    for seed in range(2, 4):
        write_run(
            tmp_path / "runs",
            "listops",
            "ConvLuna-16",
            seed,
            0.4,
            config={"model": {"attention": "convluna", "attention_kwargs": {"memory_size": 16}}},
        )
    write_run(
        tmp_path / "runs",
        "listops",
        "ConvLuna-16",
        4,
        0.9,
        config={"model": {"attention": "convluna", "attention_kwargs": {"memory_size": 8}}},
    )
    with pytest.warns(UserWarning, match="2 different configs"):
        summary = make(tmp_path / "runs", tmp_path / "out", "--no-plots")
    assert cells_of(summary) == {
        "ConvLuna-16": [40.0] * 4,
        "ConvLuna-16 [model.attention_kwargs.memory_size=8]": [90.0],
    }


def test_invalid_or_damaged_records_are_skipped_by_name(tmp_path):
    """Issue 26 D5 and U7: an accuracy of 31.25 or NaN, a cut-short result.json, a torn metrics line:
    a warning naming the file, the run left out, every output written."""
    root = tmp_path / "runs"
    for seed in range(2):
        write_run(root, "listops", "Luna-16", seed, 0.5)
    bad = {
        "percent": write_run(root, "listops", "Luna-16", 2, 0.5),
        "nan": write_run(root, "listops", "Luna-16", 3, 0.5),
        "cut": write_run(root, "listops", "Luna-16", 4, 0.5),
    }
    text = (bad["percent"] / "result.json").read_text()
    (bad["percent"] / "result.json").write_text(text.replace('"test_accuracy": 0.5', '"test_accuracy": 31.25'))
    (bad["nan"] / "result.json").write_text(text.replace('"test_accuracy": 0.5', '"test_accuracy": NaN'))
    (bad["cut"] / "result.json").write_text(text[: len(text) // 2])
    with (root / "cpu" / "300" / "listops_Luna-16" / "seed0" / "metrics.jsonl").open("a") as f:
        f.write('{"step": 300, "split": "valid')  # the torn last line a kill leaves
    with pytest.warns(UserWarning) as caught:
        summary = make(root, tmp_path / "out", "--no-plots")
    messages = [str(w.message) for w in caught]
    for kind, workdir in bad.items():
        assert any(m.startswith(f"{workdir / 'result.json'} is not a valid lra.train result") for m in messages), kind
    assert cells_of(summary) == {"Luna-16": [50.0, 50.0]} and summary["num_runs"] == 2
