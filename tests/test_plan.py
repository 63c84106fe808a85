"""lra_lab.experiments.plan: what a selection of runs will do before it starts (issue 39 point 7)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import result_record
from lra_lab.experiments import plan, sweep, sweep_cli


def _finished(workdir: Path, **fields) -> None:
    workdir.mkdir(parents=True)
    (workdir / "result.json").write_text(json.dumps(result_record(**fields)))


def test_each_run_is_done_started_missing_or_data_absent_with_an_estimate_from_records(tmp_path):
    root, records = tmp_path / "sweep", tmp_path / "records"
    runs = sweep.expand(
        "convluna_table1",
        "smoke",
        tasks=["text", "listops"],
        seeds=[0, 1],
        variants=["Transformer", "Luna-1"],
        root=root,
        overrides=[("data_dir", str(tmp_path / "no-data"))],
    )
    by_name = {r.name: r for r in runs}
    done = by_name["listops Transformer seed0"].workdir
    _finished(done, num_train_steps=6, train_seconds=4.0, config_preset="smoke")  # the sweep's own: a record too
    by_name["listops Transformer seed1"].workdir.mkdir(parents=True)  # a workdir: the sweep resumes it
    # an earlier CPU record of the same task, variant and preset: 12 s for 6 steps of a 3-seed program
    _finished(records / "a" / "seed0", num_train_steps=6, train_seconds=12.0, seeds_in_program=3, config_preset="smoke")
    _finished(records / "b" / "seed0", num_train_steps=6, train_seconds=12.0, config_preset="cpu")  # other preset
    _finished(
        records / "c" / "seed0", num_train_steps=6, train_seconds=99.0, config_preset="smoke", device_kind="NVIDIA H100"
    )  # not a CPU
    plans = {p.run.name: p for p in plan.plan_runs(runs, [records])}
    assert {name: p.state for name, p in plans.items()} == {
        "text Transformer seed0": "data absent",
        "text Luna-1 seed0": "data absent",
        "listops Transformer seed0": "done",
        "listops Luna-1 seed0": "missing",
        "text Transformer seed1": "data absent",
        "text Luna-1 seed1": "data absent",
        "listops Transformer seed1": "started",
        "listops Luna-1 seed1": "missing",
    }
    assert "python -m lra.data download text" in plans["text Transformer seed0"].data_problem
    started = plans["listops Transformer seed1"]
    assert started.estimate_seconds == 6 * 12.0 / 6 / 3
    assert started.rate.records == (records / "a" / "seed0" / "result.json", done / "result.json")
    assert plans["listops Luna-1 seed0"].estimate_seconds is None
    assert plan.estimate_text(plans["listops Luna-1 seed0"]) == "no estimate"
    assert plan.estimate_text(plans["listops Transformer seed0"]) == "-"
    line = plan.run_line(started)
    assert line.split()[0] == str(started.run.index) and line.split()[-1] == str(started.run.workdir)
    assert " started " in line and " ~1 min " in line  # 4 s
    text = plan.summary(list(plans.values()))
    assert text.startswith(
        "1 done, 1 started, 2 missing, 4 data absent; data absent for text (fetch with "
        "python -m lra.data download text); estimated CPU time of the 3 run(s) to train: ~1 min "
        "for 1 (the median seconds per seed-step of each one's task, variant and preset in 2 "
        f"earlier CPU record(s) under {tmp_path})"
    )
    assert text.endswith("; no estimate for 2 (no earlier CPU record of their task, variant and preset)")


def test_a_sweep_command_line_selects_its_runs():
    runs, args = sweep_cli.command_selection(
        'python scripts/sweep.py convluna_listops --preset cpu --group-seeds on --variants "Luna-16" --run'
    )
    assert [r.name for r in runs] == ["listops Luna-16 seeds 0,1,2,3,4"] and args.run
    assert sweep_cli.command_selection("python scripts/export_runs.py a b") is None
