"""Issue 52: a record's identity is checked against its run's own files, once, for every reader.

A committed record edited by hand (RP6), a record copied from another row with its variant edited
(RP9), a replication's seeds copied into the registered runs (RP8, RP13), another run's result.json
exported over a good copy (EX3), and an export killed midway (EX4)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import result_record
from lra.training import run_files
from lra.training.run_files import export_records, record_problem
from lra_lab.reproduce import convluna_confirm as confirm
from lra_lab.reproduce import registry, replication

RUNS = confirm.RUNS
LUNA, CONV = "listops_luna-16-reference", "listops_convluna-16-reference"
H100 = "results/runs/convluna_listops_confirm_h100"


def _root(tmp_path: Path, *rows: str) -> Path:
    root = tmp_path / "repo"
    for row in rows:
        shutil.copytree(registry.REPO / RUNS / row, root / RUNS / row)
    return root


def _edit(path: Path, **fields: object) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_an_edited_accuracy_disagrees_with_the_runs_own_metrics_and_is_not_judged(tmp_path: Path) -> None:
    """RP6: Luna-16 seed 10's test_accuracy 0.317 -> 0.99 by hand; metrics.jsonl still says 0.317."""
    root = _root(tmp_path, LUNA)
    _edit(root / RUNS / LUNA / "seed10" / "result.json", test_accuracy=0.99)
    found, missing = confirm.accuracies(root, "Luna-16 (reference)")
    assert 10 not in found and len(found) == 9
    assert any("seed10/result.json" in m and "metrics.jsonl logged" in m for m in missing)


def test_a_record_copied_into_another_row_with_its_variant_edited_is_refused(tmp_path: Path) -> None:
    """RP9: a ConvLuna-16 record in Luna-16's folder, only result.json's variant edited."""
    root = _root(tmp_path, LUNA)
    seed = root / RUNS / LUNA / "seed11"
    shutil.rmtree(seed)
    shutil.copytree(registry.REPO / RUNS / CONV / "seed11", seed)
    _edit(seed / "result.json", variant="Luna-16 (reference)")
    assert "config.json's 'ConvLuna-16 (reference)'" in (record_problem(seed / "result.json") or "")
    found, missing = confirm.accuracies(root, "Luna-16 (reference)")
    assert 11 not in found and any("seed11" in m for m in missing)


def test_a_replications_seeds_copied_into_the_registered_runs_are_refused(tmp_path: Path) -> None:
    """RP8: the H100 replication's ConvLuna-16 seeds 14 and 19 in the CPU confirmatory folder."""
    root = _root(tmp_path, CONV)
    for k in (14, 19):
        shutil.rmtree(root / RUNS / CONV / f"seed{k}")
        shutil.copytree(registry.REPO / H100 / CONV / f"seed{k}", root / RUNS / CONV / f"seed{k}")
    found, missing = confirm.accuracies(root, "ConvLuna-16 (reference)")
    assert sorted(set(confirm.SEEDS) - set(found)) == [14, 19]
    assert all("NVIDIA H100" in m for m in missing if "seed14" in m or "seed19" in m)


def test_the_seed_table_refuses_what_the_verdict_refuses(tmp_path: Path) -> None:
    """RP13: an H100 ConvLuna-16 seed copied whole into the replication's Luna-16 row."""
    replica = tmp_path / "replica"
    for row in (LUNA, CONV):
        shutil.copytree(registry.REPO / H100 / row, replica / row)
    shutil.rmtree(replica / LUNA / "seed12")
    shutil.copytree(replica / CONV / "seed12", replica / LUNA / "seed12")
    found, skipped = replication.seed_accuracies(replica / LUNA)
    assert 12 not in found and len(found) == 9
    assert any("not of the row" in s for s in skipped)


def test_every_committed_record_passes_the_identity_check() -> None:
    """The check must not refuse a genuine record (it reads each run's own files)."""
    paths = sorted((registry.REPO / "results" / "runs").rglob("result.json"))
    assert paths
    assert {str(p): record_problem(p) for p in paths if record_problem(p)} == {}


def _run(root: Path, seed: int, steps: int, accuracy: float) -> Path:
    run = root / f"seed{seed}"
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"task": "listops", "seed": seed, "num_train_steps": steps}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": steps, "split": "test", "accuracy": accuracy}) + "\n")
    (run / "result.json").write_text(
        json.dumps(result_record(seed=seed, num_train_steps=steps, best_step=steps, test_accuracy=accuracy))
    )
    return run


def test_export_refuses_another_runs_result_over_a_good_copy(tmp_path: Path) -> None:
    """EX3: seed 1's folder holding seed 0's result.json (another config) is not exported."""
    runs, out = tmp_path / "runs" / "row", tmp_path / "out" / "row"
    _run(runs, 1, 20, 0.0625)
    export_records(tmp_path / "runs", tmp_path / "out")
    other = _run(tmp_path / "elsewhere", 0, 30, 0.21875)
    shutil.copy(other / "result.json", runs / "seed1" / "result.json")
    assert export_records(tmp_path / "runs", tmp_path / "out") == []
    assert json.loads((out / "seed1" / "result.json").read_text())["test_accuracy"] == 0.0625


def test_an_export_killed_between_its_renames_leaves_one_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EX4: a 30-step run exported over a 20-step copy, killed at each rename: the folder holds one
    run's files, never a 30-step config.json with a 20-step result.json."""
    runs = tmp_path / "runs" / "row"
    _run(runs, 0, 20, 0.25)
    export_records(tmp_path / "runs", tmp_path / "out")
    target = tmp_path / "out" / "row" / "seed0"
    shutil.rmtree(runs / "seed0")
    _run(runs, 0, 30, 0.5)
    real = os.replace
    for kill_at in (1, 2):
        calls = []

        def killed(src: object, dst: object, kill_at: int = kill_at, calls: list = calls) -> None:
            calls.append(src)
            if len(calls) == kill_at:
                raise KeyboardInterrupt  # a kill: nothing after this point runs
            real(src, dst)

        monkeypatch.setattr(run_files.os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            export_records(tmp_path / "runs", tmp_path / "out")
        monkeypatch.setattr(run_files.os, "replace", real)
        if target.exists():
            steps = {json.loads((target / n).read_text())["num_train_steps"] for n in ("config.json", "result.json")}
            assert steps == {20}
        export_records(tmp_path / "runs", tmp_path / "out")  # the rerun finishes the job
        assert json.loads((target / "result.json").read_text())["num_train_steps"] == 30
        assert json.loads((target / "config.json").read_text())["num_train_steps"] == 30
        assert sorted(p.name for p in target.parent.iterdir()) == ["seed0"]
        shutil.rmtree(target)
        _run(tmp_path / "out" / "row", 0, 20, 0.25)


def test_the_replications_verdict_names_its_own_damaged_file_and_drops_the_seed(tmp_path: Path) -> None:
    """RP11: the verdict named the intact registered file; RP12: a malformed replication config.json
    was called missing under the wrong path and its seed still counted."""
    replica = tmp_path / "replica"
    for row in (LUNA, CONV):
        shutil.copytree(registry.REPO / H100 / row, replica / row)
    (replica / LUNA / "seed13" / "config.json").write_text("{ damaged")
    claim = registry.find("convluna", "confirm-table1-listops")[1][0]
    outcome = replication.judge_on([claim], RUNS, replica)[claim.id]
    named = [m for m in outcome.missing if "seed13" in m]
    assert named and all(str(replica) in m and "config.json is damaged" in m for m in named)
    found, skipped = replication.seed_accuracies(replica / LUNA)
    assert 13 not in found and any("seed13" in s and "damaged" in s for s in skipped)


def test_an_export_into_a_shallow_clone_does_not_call_a_valid_commit_mistyped(tmp_path: Path) -> None:
    """EX6: the commit a run started from is older than a --depth 1 clone's history: cannot tell, no warning."""
    import subprocess

    from lra.training.run_files import commit_not_in_history

    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True).stdout
    git("init", "-q")
    for n in (1, 2):
        (repo / "f").write_text(str(n))
        git("add", "f")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", str(n))
    first = git("rev-list", "--max-parents=0", "HEAD").strip()
    (tmp_path / "result.json").write_text(json.dumps({"git_commit_start": first}))
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    assert commit_not_in_history(tmp_path / "result.json", repo) is None
    assert commit_not_in_history(tmp_path / "result.json", shallow) is None
    (tmp_path / "result.json").write_text(json.dumps({"git_commit_start": "6f44cbb5b97e"}))  # a real typo
    assert commit_not_in_history(tmp_path / "result.json", repo) == "6f44cbb5b97e"
