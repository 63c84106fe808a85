"""lra.evaluate: a finished run's best checkpoint on test, with its own or a swapped attention."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lra.defaults import make_config
from lra.errors import EXIT_CORRUPT
from lra.evaluate import evaluate_run, load_run_config, parse_options
from test_checkpoints import flip_bit

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def finished_run(finished_smoke_run, tmp_path_factory):
    """The shared ListOps smoke run (conftest: Transformer, 6 steps), copied: these tests append to
    its evaluations.jsonl."""
    workdir = tmp_path_factory.mktemp("evaluate") / "run"
    shutil.copytree(finished_smoke_run[0], workdir)
    return workdir, finished_smoke_run[1]


def test_same_attention_reproduces_the_runs_test_accuracy(finished_run):
    workdir, result = finished_run
    again = evaluate_run(workdir, load_run_config(workdir))
    assert again["accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-6)
    assert again["step"] == result["best_step"]


def test_clustered_with_enough_clusters_equals_softmax(finished_run):
    workdir, result = finished_run
    config = load_run_config(workdir)
    # smoke sequences are at most 64 tokens (+ CLS): 100 clusters give every query its own
    swapped = evaluate_run(workdir, config, "clustered", {"num_clusters": 100})
    assert swapped["accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-6)
    improved = evaluate_run(workdir, config, "improved_clustered", {"num_clusters": 2, "topk": 128})
    assert improved["accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-6)
    assert improved["trained_with"] == "softmax" and improved["attention"] == "improved_clustered"


def test_attention_with_another_parameter_tree_is_refused(finished_run):
    workdir, _ = finished_run
    with pytest.raises(ValueError, match="parameter trees differ"):
        evaluate_run(workdir, load_run_config(workdir), "luna", {})


def test_a_convluna_run_with_clustered_is_one_line_naming_the_trees_before_anything_else(tmp_path):
    """Issue 39 point 6: the parameter trees are compared first (the config's memory pooling and memory
    statistics would otherwise fail first, with fixes that lead nowhere); one line, exit 2."""
    config = make_config("listops", "convluna", "smoke")
    config.model.pooling, config.log_memory_stats = "memory", True
    (tmp_path / "config.json").write_text(config.to_json())
    out = subprocess.run(
        [sys.executable, "-m", "lra.evaluate", f"--workdir={tmp_path}", "--attention", "clustered"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.splitlines()) == 1
    line = out.stderr
    assert line.startswith(
        f"error: the checkpoint in {tmp_path} was trained with 'convluna' and cannot be evaluated "
        f"with 'clustered': their parameter trees differ (only convluna's: encoder memory, "
        f"log_temperature; only clustered's: value)."
    )
    assert "can swap: softmax, clustered, improved_clustered, dispersed, linear;" in line
    assert "pooling" not in line and "log_memory_stats" not in line


def test_swap_groups_are_read_from_the_modules():
    from lra.attention.trees import parameter_tree, swap_groups

    assert swap_groups() == [
        ["softmax", "clustered", "improved_clustered", "dispersed", "linear"],
        ["luna"],
        ["convluna"],
        ["agglomerative"],
        ["gated_linear"],
    ]
    # an option that changes the parameters changes the tree: 8 memory cells are not 16
    assert parameter_tree("convluna", {"memory_size": 8}) != parameter_tree("convluna")


def test_options_parser_uses_aliases_and_the_family_types():
    assert parse_options("improved_clustered", ["clusters=8", " topk=4"]) == {"num_clusters": 8, "topk": 4}
    with pytest.raises(ValueError, match="key=value"):
        parse_options("clustered", ["clusters"])
    with pytest.raises(ValueError, match="num_clusters must be an integer, got 1.5"):
        parse_options("clustered", ["clusters=1.5"])


def test_cli_prints_accuracy_and_logs_it(finished_run):
    workdir, result = finished_run
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lra.evaluate",
            f"--workdir={workdir}",
            "--attention",
            "dispersed",
            "--options",
            "window=256",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "evaluated with dispersed" in out.stdout
    logged = [json.loads(line) for line in (workdir / "evaluations.jsonl").read_text().splitlines()]
    assert logged[-1]["attention"] == "dispersed"
    # a window covering the whole sequence is softmax attention
    assert logged[-1]["accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-6)


def test_help_lists_every_flag_without_a_run():
    from lra.evaluate import FLAG_HELP

    out = subprocess.run(
        [sys.executable, "-m", "lra.evaluate", "--help"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    for name, text in FLAG_HELP:
        assert any(line.split() and line.split()[0] == f"--{name}" and line.endswith(text) for line in lines), name
    assert all(len(text) <= 100 and "\n" not in text for _, text in FLAG_HELP)  # one line each


def test_missing_workdir_prints_the_usage(capsys):
    from lra.evaluate import cli

    with pytest.raises(SystemExit) as exit_:
        cli(["lra.evaluate", "--attention", "clustered"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--workdir is required" in err and "--options" in err


# --- issue 26 U11: a damaged run is one error line with its exit code, never a traceback -----------


def test_damaged_config_is_one_error_line(tmp_path, capsys):
    from lra.evaluate import cli

    (tmp_path / "config.json").write_text('{"model": {"attention": "softmax"')  # cut short
    with pytest.raises(SystemExit) as exit_:
        cli(["lra.evaluate", f"--workdir={tmp_path}"])
    err = capsys.readouterr().err
    assert exit_.value.code == EXIT_CORRUPT and err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path / 'config.json'} is not a valid run config (line 1") and "restore" in err


def test_corrupt_best_checkpoint_is_one_error_line(finished_run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(finished_run[0], workdir, ignore=shutil.ignore_patterns("evaluations.jsonl"))
    best = max((workdir / "checkpoints" / "best").iterdir(), key=lambda p: int(p.name))
    flip_bit(max((best / "state").rglob("*"), key=lambda p: p.stat().st_size), np.random.default_rng(0))
    out = subprocess.run(
        [sys.executable, "-m", "lra.evaluate", f"--workdir={workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == EXIT_CORRUPT and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.splitlines()[-1].startswith(f"error: checkpoint {best} is corrupt")
    assert not (workdir / "evaluations.jsonl").exists()


def test_swap_eval_checks_every_entry_first_and_names_a_missing_run(finished_run, tmp_path, capsys):
    """Issue 38 SE1: a missing workdir is one error line (exit 2); a bad entry is refused before any
    entry is evaluated (nothing appended, nothing written); the outputs go through the atomic writer."""
    from conftest import script_main

    swap_eval = script_main("swap_eval")
    with pytest.raises(SystemExit) as stop:
        swap_eval(["--workdir", str(tmp_path / "nothing"), "--out", str(tmp_path / "o"), "softmax"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1
    workdir = tmp_path / "run"
    shutil.copytree(finished_run[0], workdir)
    before = (workdir / "evaluations.jsonl").read_bytes() if (workdir / "evaluations.jsonl").exists() else None
    with pytest.raises(SystemExit) as stop:
        swap_eval(["--workdir", str(workdir), "--out", str(tmp_path / "o"), "softmax", "luna"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and "entry 'luna'" in err and len(err.splitlines()) == 1 and "accuracy" not in out
    after = (workdir / "evaluations.jsonl").read_bytes() if (workdir / "evaluations.jsonl").exists() else None
    assert after == before and not (tmp_path / "o").exists()
    (workdir / "evaluations.jsonl").write_text('{"torn": ')  # a line cut by a full disk is cut off first
    swap_eval(["--workdir", str(workdir), "--out", str(tmp_path / "o"), "softmax"])
    rows = [json.loads(line) for line in (workdir / "evaluations.jsonl").read_text().splitlines()]
    assert [r["attention"] for r in rows] == ["softmax"]
    assert json.loads((tmp_path / "o" / "swap_eval.json").read_text())["rows"][0]["attention"] == "softmax"
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "swap_eval.json",
        "swap_eval.json.seal",
        "swap_eval.md",
    ]


def test_a_partial_evaluation_records_its_override_and_examples_and_a_negative_count_is_refused(finished_run):
    """Issue 52 EV1, O8: `--config.max_eval_batches=2` is a row that says so (and how many examples it
    saw, of how many); `-1` is refused in one line, nothing appended. RO2: the accuracy is printed
    before the row is written (a read-only run still shows it, then exits 4)."""
    from conftest import cached_child_env

    workdir, _ = finished_run
    log = workdir / "evaluations.jsonl"

    def evaluate(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "lra.evaluate", f"--workdir={workdir}", *flags],
            cwd=REPO,
            env=cached_child_env(),  # the evaluation steps this file compiled are loaded, not compiled again
            capture_output=True,
            text=True,
            timeout=600,
        )

    before = log.read_bytes() if log.exists() else b""
    out = evaluate("--config.max_eval_batches=-1")
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("error: config.max_eval_batches")
    assert (log.read_bytes() if log.exists() else b"") == before
    out = evaluate("--config.max_eval_batches=1", "--config.eval_batch_size=4")
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(log.read_text().splitlines()[-1])
    assert row["overrides"] == {"max_eval_batches": "1", "eval_batch_size": "4"}
    assert row["examples"] == 4 < row["split_examples"] and row["max_eval_batches"] == 1
    assert "on 4 of its" in out.stdout
    os.chmod(workdir, 0o555)
    log.chmod(0o444)
    try:
        out = evaluate()
    finally:
        os.chmod(workdir, 0o755)
        log.chmod(0o644)
    if os.geteuid() != 0:  # root writes read-only files anyway
        assert out.returncode == 4 and "test accuracy" in out.stdout
        assert out.stderr.strip().startswith("error: cannot write")
