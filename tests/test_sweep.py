"""Sweeps: grid expansion, skip/resume with a fake runner, the SLURM script, and one real smoke run."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import result_record, script_main
from lra.reports import tables
from lra_lab.experiments import sweep, sweep_cli

REPO = Path(__file__).resolve().parent.parent
TABLE1 = ["Transformer", "Luna-1", "Luna-16", "Luna-256", "ConvLuna-1", "ConvLuna-16", "ConvLuna-256"]


@pytest.fixture
def cli():
    return script_main("sweep")


class FakeRunner:
    """Stands in for lra.train: writes result.json (or fails / is interrupted for chosen runs)."""

    def __init__(self, codes: dict[str, int] | None = None):
        self.codes = codes or {}
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, run: sweep.Run, log: Path) -> int:
        self.calls.append((run.name, run.command()))
        (run.workdir / "config.json").write_text("{}")
        code = self.codes.get(run.name, 0)
        if code == 0:
            steps = sweep.expected_steps(run)
            result = result_record(num_train_steps=steps, best_step=steps)
            (run.workdir / "result.json").write_text(json.dumps(result))
        return code


def test_expansion_counts_order_and_workdirs(tmp_path):
    runs = sweep.expand("convluna_table1", root=tmp_path)
    assert len(runs) == 7 * 4 * 5 == 140
    assert [r.index for r in runs] == list(range(140))
    assert [r.variant.label for r in runs[:7]] == TABLE1 and {r.seed for r in runs[:28]} == {0}
    assert len({r.workdir for r in runs}) == 140
    assert runs[5].workdir == tmp_path / "text_convluna-16" / "seed0"
    assert runs[5].config_arg == "paper,mem=16"
    table3 = sweep.expand("convluna_table3", "cpu")
    assert len(table3) == 6 * 4 * 5
    assert table3[0].config_arg == "cpu,mem=1,only_scaling" and table3[5].config_arg == "cpu,mem=256,only_filtering"
    assert str(table3[0].workdir).startswith("runs/sweeps/convluna_table3_cpu/")
    small = sweep.expand(
        "convluna_table1",
        "smoke",
        tasks=["listops", "text"],
        seeds=[3],
        variants=["ConvLuna-16", "Transformer"],
        overrides=[("num_train_steps", "20")],
    )
    assert [(r.task, r.variant.label, r.seed) for r in small] == [
        ("text", "Transformer", 3),
        ("text", "ConvLuna-16", 3),
        ("listops", "Transformer", 3),
        ("listops", "ConvLuna-16", 3),
    ]
    assert small[0].workdir.parts[2] == "convluna_table1_smoke_num-train-steps-20"
    assert small[0].command()[-1] == "--config.num_train_steps=20"
    for bad in (dict(tasks=["pathfinder"]), dict(variants=["Luna-2"])):
        with pytest.raises(ValueError, match="valid"):
            sweep.expand("convluna_table1", **bad)
    with pytest.raises(ValueError, match="valid grids"):
        sweep.expand("table9")
    with pytest.raises(ValueError, match="key=value"):
        sweep_cli.parse_overrides(["num_train_steps"])


@pytest.mark.parametrize("grid", sorted(sweep.GRIDS))
def test_every_grid_entry_builds_its_labelled_config(grid):
    for run in sweep.expand(grid, "smoke", seeds=[0]):
        assert sweep.expected_steps(run) == 6  # loads the config and checks its variant label
    run = sweep.expand(grid, "smoke", seeds=[0], overrides=[("num_train_steps", "40")])[0]
    assert sweep.expected_steps(run) == 40
    wrong = sweep.Run(0, grid, "listops", sweep.Variant("Luna-7", "luna", "mem=16"), 0, "smoke", Path("x"))
    with pytest.raises(ValueError, match="Luna-16"):
        sweep.expected_steps(wrong)


def test_finished_runs_are_skipped_and_failed_ones_resume(tmp_path):
    runs = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0, 1], variants=TABLE1[:3], root=tmp_path)
    crash = runs[1].name
    first = FakeRunner({crash: 1})
    lines: list[str] = []
    report = sweep.run_sweep(runs, first, out=lines.append)
    assert len(first.calls) == 6 and report.exit_code == 1  # a failure does not stop the sweep
    assert [r.name for r, _ in report.failed] == [crash] and len(report.ran) == 5
    assert any(f"[2/6] {crash}: FAILED (exit code 1)" in line for line in lines)
    assert json.loads((runs[1].workdir / "sweep_run.json").read_text())["options"] == "smoke,mem=1"

    second = FakeRunner()
    lines.clear()
    report = sweep.run_sweep(runs, second, out=lines.append)
    assert [name for name, _ in second.calls] == [crash] and report.exit_code == 0
    assert second.calls[0][1] == first.calls[1][1]  # the same command in the same workdir: resume
    assert any(f"{crash}: resuming in {runs[1].workdir}" in line for line in lines)
    assert sum("finished, skipped" in line for line in lines) == 5

    # a result.json with other steps (e.g. an earlier reduced sweep) is not finished for this one
    longer = [dataclass_replace(r, overrides=(("num_train_steps", "12"),)) for r in runs[:2]]
    third = FakeRunner()
    sweep.run_sweep(longer, third, out=lines.append)
    assert [name for name, _ in third.calls] == [runs[0].name, runs[1].name]


def test_runs_held_by_another_sweep_are_in_use_not_failed(tmp_path):
    """Issue 26 U5: lra.train's exit 3 (workdir in use) is "in use, skipped" and no failure."""
    runs = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0], variants=TABLE1[:2], root=tmp_path)
    lines: list[str] = []
    report = sweep.run_sweep(runs, FakeRunner({runs[0].name: 3}), out=lines.append)
    assert report.exit_code == 0 and report.failed == [] and report.in_use == [runs[0]]
    assert any(f"{runs[0].name}: in use by another process, skipped" in line for line in lines)
    assert "1 in use (skipped)" in lines[-1] and not any("FAILED" in line for line in lines)


def test_result_with_missing_fields_is_not_finished(tmp_path):
    """Issue 26 U6: the sweep counts a run finished by lra.train's own check (result_problem)."""
    run = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0], variants=TABLE1[:1], root=tmp_path)[0]
    run.workdir.mkdir(parents=True)
    full = result_record(num_train_steps=6)
    for damaged in ({k: v for k, v in full.items() if k != "test_accuracy"}, {**full, "test_accuracy": float("nan")}):
        (run.workdir / "result.json").write_text(json.dumps(damaged))
        assert sweep.status(run, 6) == "started"
    (run.workdir / "result.json").write_text(json.dumps(full))
    assert sweep.status(run, 6) == "finished" and sweep.status(run, 12) == "started"


def dataclass_replace(run: sweep.Run, **changes) -> sweep.Run:
    import dataclasses

    return dataclasses.replace(run, **changes)


def test_interrupted_run_stops_the_sweep(tmp_path):
    runs = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0], variants=TABLE1[:3], root=tmp_path)
    fake = FakeRunner({runs[1].name: 143})
    report = sweep.run_sweep(runs, fake, out=lambda line: None)
    assert len(fake.calls) == 2 and report.interrupted == runs[1] and report.exit_code == 143  # SIGTERM (SW1)


def test_a_signal_to_the_sweep_stops_it_even_when_its_run_died_of_it(tmp_path):
    """A second SIGTERM kills lra.train at once (exit -15, not 143): the sweep, signalled too, starts nothing new."""
    runs = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0], variants=TABLE1[:3], root=tmp_path)

    def runner(run, log, core=None):
        sweep.SIGNALLED.set()  # what subprocess_runner's handler does when the sweep is signalled
        return -15

    report = sweep.run_sweep(runs, runner, out=lambda line: None)
    assert report.interrupted == runs[0] and report.exit_code == 143  # died of SIGTERM: 128 + 15 (issue 52 SW1)
    sweep.SIGNALLED.clear()


def test_index_execs_one_run(tmp_path, cli, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(sweep.os, "execv", lambda path, argv: calls.append(argv))
    args = ["convluna_table3", "--preset", "smoke", "--root", str(tmp_path), "--seeds", "0", "1"]
    assert cli(args + ["--index", "7"]) == 0
    run = sweep.expand("convluna_table3", "smoke", seeds=[0, 1], root=tmp_path)[7]
    assert run.name == "matching OnlyScaling-16 seed0" and calls == [run.command()]
    assert "[8/48] matching OnlyScaling-16 seed0: starting" in capsys.readouterr().out
    assert json.loads((run.workdir / "sweep_run.json").read_text())["index"] == 7
    (run.workdir / "result.json").write_text(json.dumps({"num_train_steps": 6}))  # fields missing: unfinished
    assert cli(args + ["--index", "7"]) == 0 and len(calls) == 2
    (run.workdir / "result.json").write_text(json.dumps(result_record()))
    assert cli(args + ["--index", "7"]) == 0 and len(calls) == 2  # finished: not run again
    with pytest.raises(SystemExit):
        cli(args + ["--index", "48"])


def test_slurm_script_is_valid_and_matches_the_list(tmp_path, cli, capsys):
    script = tmp_path / "job.sh"
    root = tmp_path / "root"
    assert (
        cli(
            [
                "convluna_table1",
                "--preset",
                "cpu",
                "--tasks",
                "listops",
                "image",
                "--seeds",
                "0",
                "2",
                "--set",
                "num_train_steps=300",
                "--root",
                str(root),
                "--slurm",
                str(script),
                "--sbatch=--partition=gpu",
                "--max-parallel",
                "4",
                "--group-seeds",
                "off",
            ]
        )
        == 0
    )
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert re.search(r"^#SBATCH --array=0-27%4$", text, re.M)  # 7 variants x 2 tasks x 2 seeds
    assert "#SBATCH --gres=gpu:1" in text and "#SBATCH --partition=gpu" in text
    assert (root / "slurm").is_dir() and len(json.loads((root / "sweep.json").read_text())["runs"]) == 28
    # the script's own arguments select the same 28 runs in the same order
    line = next(ln for ln in text.splitlines() if ln.startswith("exec python scripts/sweep.py"))
    argv = shlex.split(line)[3:-2]
    assert shlex.split(line)[-2:] == ["--index", "$SLURM_ARRAY_TASK_ID"]
    capsys.readouterr()
    assert cli(argv + ["--list"]) == 0
    listed = [ln.split() for ln in capsys.readouterr().out.splitlines()[:-1]]
    expected = sweep.expand(
        "convluna_table1",
        "cpu",
        tasks=["listops", "image"],
        seeds=[0, 2],
        root=root,
        overrides=[("num_train_steps", "300")],
    )
    assert [(int(row[0]), row[-1]) for row in listed] == [(r.index, str(r.workdir)) for r in expected]


def test_grouped_seeds_are_one_run_per_setup(tmp_path, cli, capsys):
    runs = sweep.expand(
        "convluna_table1",
        "cpu",
        tasks=["listops"],
        seeds=[0, 1, 2],
        variants=TABLE1[:2],
        root=tmp_path,
        group_seeds=True,
    )
    assert [r.name for r in runs] == ["listops Transformer seeds 0,1,2", "listops Luna-1 seeds 0,1,2"]
    assert "--config.seeds=0,1,2" in runs[0].command() and runs[0].workdir == tmp_path / "listops_transformer"
    assert runs[0].seed_workdirs == [tmp_path / "listops_transformer" / f"seed{k}" for k in (0, 1, 2)]
    # finished only when every seed is
    for workdir in runs[0].seed_workdirs[:2]:
        workdir.mkdir(parents=True)
        (workdir / "result.json").write_text(json.dumps(result_record(num_train_steps=1500)))
    assert sweep.status(runs[0], 1500) == "started"
    (runs[0].seed_workdirs[2]).mkdir()
    (runs[0].seed_workdirs[2] / "result.json").write_text(json.dumps(result_record(num_train_steps=1500)))
    assert sweep.status(runs[0], 1500) == "finished"
    # SLURM: grouped by default, one array task per setup x all seeds
    script = tmp_path / "job.sh"
    assert (
        cli(
            [
                "convluna_table1",
                "--preset",
                "cpu",
                "--tasks",
                "listops",
                "--seeds",
                "0",
                "1",
                "2",
                "--root",
                str(tmp_path / "r"),
                "--slurm",
                str(script),
            ]
        )
        == 0
    )
    text = script.read_text()
    assert re.search(r"^#SBATCH --array=0-6$", text, re.M) and "--group-seeds on --index" in text


@pytest.mark.slow  # real lra.train runs of a grid
def test_real_smoke_run_then_skip_then_table(tmp_path):
    """One real sweep run through the CLI: two seeds in one program (~20 s), rerun (skipped), then
    tabulated."""
    root = tmp_path / "root"
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "sweep.py"),
        "convluna_table1",
        "--preset",
        "smoke",
        "--tasks",
        "listops",
        "--seeds",
        "0",
        "1",
        "--variants",
        "ConvLuna-16",
        "--root",
        str(root),
        "--set",
        f"data_dir={tmp_path / 'data'}",
        "--group-seeds",
        "on",
        "--run",
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for seed in (0, 1):
        workdir = root / "listops_convluna-16" / f"seed{seed}"
        result = json.loads((workdir / "result.json").read_text())
        assert result["variant"] == "ConvLuna-16" and result["num_train_steps"] == 6 and result["seed"] == seed
        assert json.loads((workdir / "sweep_run.json").read_text())["seed"] == seed
    assert "[1/1] listops ConvLuna-16 seeds 0,1: done" in first.stdout and "(mean " in first.stdout
    assert "seed 1: test accuracy" in (root / "listops_convluna-16" / "sweep.log").read_text()
    again = subprocess.run(cmd[:-1] + ["--index", "0"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "[1/1] listops ConvLuna-16 seeds 0,1: finished, skipped" in again.stdout
    runs, _ = tables.load_results(root)
    assert len(runs) == 2 and runs[0].overrides == {"data_dir": str(tmp_path / "data")}
    assert tables.scale_of(runs[0]) == tables.Scale("smoke", None, ())


def test_a_bad_set_is_one_line_before_anything_starts(tmp_path, capsys):
    """Issue 38 SW1/SW2: misspelt, mistyped or invalid --set: exit 2 naming it, no workdir written."""
    from conftest import script_main

    for item, message in (
        ("num_train_steps=abc", "must be an integer"),
        ("model.maxlen=512", "did you mean model.max_len"),
        ("batch_size=0", "batch_size must be a positive integer"),
        ("data.source=nowhere", "config.data.source='nowhere'"),  # issue 52 SO2: was written to SLURM, exit 0
        ("preset=/../../x/escape", "config.preset="),  # issue 52 SEC4: a path, passed through to lra.train
    ):
        code = script_main("sweep")(
            ["convluna_table1", "--preset", "cpu", "--set", item, "--root", str(tmp_path / "r"), "--run"]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0]  # issue 52 SO1: no usage block
    assert not (tmp_path / "r").exists()


def test_apply_override_types_like_the_command_line():
    from lra.defaults import apply_override, make_config

    c = make_config("listops", "softmax", "smoke")
    apply_override(c, "data.buckets", "64,128")
    apply_override(c, "model.mask_padding", "false")
    apply_override(c, "learning_rate", "0.1")
    assert c.data.buckets == (64, 128) and c.model.mask_padding is False and c.learning_rate == 0.1
    for field, text in (("model", "1"), ("model.mask_padding", "maybe"), ("nope", "1")):
        with pytest.raises(ValueError):
            apply_override(c, field, text)


def test_the_runbooks_table1_commands_and_slurm_example_are_the_sweeps_own():
    """Issue 39 point 9: docs/gpu_runbook.md gives one command per Table 1 cell and an example SLURM
    script; both must stay what scripts/sweep.py would run."""
    runs = sweep.expand("convluna_table1", "paper", group_seeds=True)
    expected = [shlex.join(run.command("python")).replace(f"{sweep.REPO}/", "") for run in runs]
    page = (sweep.REPO / "docs" / "gpu_runbook.md").read_text()
    documented = [
        line.strip() for line in page.splitlines() if line.strip().startswith("python -m lra.train --config=")
    ]
    assert documented == expected and len(expected) == 28
    script = sweep.REPO / "scripts" / "slurm_table1_example.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert re.search(r"^#SBATCH --array=0-27%8$", text, re.M) and "#SBATCH --gres=gpu:1" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("exec python scripts/sweep.py"))
    args = sweep_cli.make_parser().parse_args(shlex.split(line)[3:-2] + ["--list"])
    selected, _ = sweep_cli.select(args)
    assert [(r.task, r.variant.label, r.seeds) for r in selected] == [(r.task, r.variant.label, r.seeds) for r in runs]


def test_prepare_refuses_a_misspelt_set_field_before_anything_is_written(tmp_path, capsys):
    """Issue 38 DP1: `python -m lra.data prepare listops --set num_trian=100`: one line naming the
    nearest fields, exit 2, nothing generated."""
    from lra.data.prepare import main as prepare

    assert prepare(["prepare", "listops", "--set", "num_trian=100", "--data_dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num_trian" in err[0] and "data.num_train" in err[0]
    assert not (tmp_path / "data").exists()


def test_jobs_run_two_at_once_each_pinned_to_its_own_core(tmp_path):
    """Issue 36: --run --jobs 2 keeps two runs going, each given a core of its own (LRA_PIN_CORE after
    its first compile: tests/test_cpu_speed.py shows a pinned run logs what an unpinned one does);
    an interrupted run stops new starts."""
    import threading
    import time as _time

    runs = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0, 1], variants=TABLE1[:2], root=tmp_path)
    fake, lock, running, overlap, cores = FakeRunner(), threading.Lock(), [0], [0], []

    def runner(run, log, core=None):
        with lock:
            running[0] += 1
            overlap[0] = max(overlap[0], running[0])
            cores.append(core)
        deadline = _time.monotonic() + 30
        while overlap[0] < 2 and _time.monotonic() < deadline:  # the other lane starts meanwhile (load-proof)
            _time.sleep(0.01)
        with lock:
            running[0] -= 1
        return fake(run, log)

    lines: list[str] = []
    report = sweep.run_sweep(runs, runner, jobs=2, out=lines.append)
    assert report.exit_code == 0 and len(report.ran) == 4 and overlap[0] == 2
    if len(os.sched_getaffinity(0)) >= 2:
        assert set(cores) == set(sorted(os.sched_getaffinity(0))[:2])
        assert sum("pinned to core" in line for line in lines) == 4
    else:
        assert cores == [None] * 4

    again = tmp_path / "again"
    runs = sweep.expand("convluna_table1", "smoke", tasks=["listops"], seeds=[0, 1, 2], variants=TABLE1[:2], root=again)
    stopper, started = FakeRunner({r.name: 130 for r in runs}), []

    def interrupted(run, log, core=None):
        started.append(run.name)
        deadline = _time.monotonic() + 30
        while len(started) < 2 and _time.monotonic() < deadline:  # both lanes hold a run when the signal comes
            _time.sleep(0.01)
        return stopper(run, log)

    report = sweep.run_sweep(runs, interrupted, jobs=2, out=lines.append)
    assert report.exit_code == 130 and len(stopper.calls) == 2  # the two running saved; nothing new started


def test_a_lane_streams_its_childs_lines_with_the_run_name_and_pins_it(tmp_path, capsys):
    """subprocess_runner off the main thread (a --jobs lane): the child's lines prefixed with the run's
    name, in the log as they are, LRA_PIN_CORE passed, the exit code returned."""
    import threading
    from types import SimpleNamespace

    code = "import os, sys; print('pin', os.environ.get('LRA_PIN_CORE')); sys.exit(3)"
    run = SimpleNamespace(name="lane-run", command=lambda: [sys.executable, "-c", code])
    got = []
    thread = threading.Thread(target=lambda: got.append(sweep.subprocess_runner(run, tmp_path / "log", core=0)))
    thread.start()
    thread.join(60)
    assert got == [3]
    assert "[lane-run] pin 0" in capsys.readouterr().out
    assert "pin 0\n" in (tmp_path / "log").read_text()


def test_prepare_refuses_a_model_field(tmp_path, capsys):
    """Issue 52 PR2: `prepare listops --config.model.num_layers=4` was accepted silently (it builds data only)."""
    from lra.data.prepare import main as prepare

    assert prepare(["prepare", "listops", "--config.model.num_layers=4", "--data_dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.num_layers" in err[0] and "data only" in err[0]
    assert not (tmp_path / "data").exists()
