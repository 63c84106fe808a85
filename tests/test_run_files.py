"""Workdir files: the config guard, metrics truncation on resume, and record export."""

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import result_record
from lra.defaults import make_config
from lra.training.run_files import MetricsLog, WorkdirMismatchError, check_workdir, config_to_dict, export_records


def test_workdir_guard_allows_harmless_changes_only(tmp_path):
    c = make_config("listops", "softmax", "smoke")
    (tmp_path / "config.json").write_text(json.dumps(config_to_dict(c)))
    c.log_every, c.num_train_steps = 7, 99  # resuming with these changed is fine
    check_workdir(tmp_path, c)
    c.learning_rate = 0.5
    with pytest.raises(WorkdirMismatchError, match="learning_rate"):
        check_workdir(tmp_path, c)


def test_truncate_drops_later_steps_and_the_test_record(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write([{"step": s, "split": "train"} for s in (1, 2, 3, 4)] + [{"step": 2, "split": "test"}])
    log.truncate_after(2)
    assert log.read() == [{"step": 1, "split": "train"}, {"step": 2, "split": "train"}]


def test_memory_statistics_records_are_read_and_kept_on_resume(tmp_path):
    """Luna/ConvLuna cpu runs log "memory" records: reading (resume, curve comparison) must accept them."""
    log = MetricsLog(tmp_path / "metrics.jsonl")
    records = [{"step": s, "split": split} for s in (10, 20) for split in ("train", "memory")]
    log.write(records)
    assert log.read() == records
    log.truncate_after(10)
    assert log.read() == records[:2]


def test_export_copies_records_but_not_checkpoints(tmp_path):
    run = tmp_path / "runs" / "listops_transformer" / "seed0"
    (run / "checkpoints" / "latest").mkdir(parents=True)
    (run / "checkpoints" / "latest" / "big").write_bytes(b"x" * 100)
    (run / "config.json").write_text(json.dumps({"task": "listops", "seed": 0}))
    (run / "metrics.jsonl").write_text('{"step": 6, "split": "test", "accuracy": 0.5}\n')
    (run / "result.json").write_text(json.dumps(result_record()))
    (tmp_path / "runs" / "unfinished" / "seed0").mkdir(parents=True)  # no result.json: skipped
    exported = export_records(tmp_path / "runs", tmp_path / "out")
    target = tmp_path / "out" / "listops_transformer" / "seed0"
    assert exported == [target]
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "metrics.jsonl", "result.json"]
    assert json.loads((target / "result.json").read_text()) == result_record()


def test_export_replaces_files_atomically(tmp_path, monkeypatch):
    """Issue 26: an export that fails midway (here: a full disk at fsync) leaves the previous
    record whole and no temporary file behind."""
    run = tmp_path / "runs" / "r" / "seed0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(result_record()))
    target = tmp_path / "out" / "r" / "seed0"
    target.mkdir(parents=True)
    (target / "result.json").write_text("old")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="cannot write .*result.json"):
        export_records(tmp_path / "runs", tmp_path / "out")
    assert [p.name for p in target.iterdir()] == ["result.json"] and (target / "result.json").read_text() == "old"


def test_git_commit_outside_a_repository_is_declared_or_unknown(tmp_path):
    import shutil
    import subprocess

    from lra.training import run_files

    # a copy of the package without .git, as a container or cloud VM gets it
    shutil.copytree(
        Path(run_files.__file__).resolve().parent.parent, tmp_path / "lra", ignore=shutil.ignore_patterns("__pycache__")
    )
    code = "from lra.training.run_files import git_commit; print(git_commit())"
    env = {k: v for k, v in os.environ.items() if k not in ("LRA_GIT_COMMIT", "GIT_DIR")}
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path.parent)  # never find an enclosing repository
    run = lambda **extra: subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**env, **extra},  # noqa: E731
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert run(PYTHONPATH=str(tmp_path)) == "unknown"
    assert run(PYTHONPATH=str(tmp_path), LRA_GIT_COMMIT="abc123") == "abc123-declared"
    # a copy that carries a .git of its own (a snapshot commit naming nothing here): the declaration wins
    git = lambda *a: subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *a],
        cwd=tmp_path,  # noqa: E731
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git("init", "-q"), git("add", "lra"), git("commit", "-qm", "snapshot")
    snapshot = git("rev-parse", "HEAD")
    assert run(PYTHONPATH=str(tmp_path), LRA_GIT_COMMIT="abc123") == "abc123-declared"
    assert run(PYTHONPATH=str(tmp_path), LRA_GIT_COMMIT=snapshot) == snapshot  # declared and checked
    assert run(PYTHONPATH=str(tmp_path)) == snapshot  # nothing declared: git answers


def test_export_never_replaces_a_valid_record_with_a_broken_one(tmp_path, capsys):
    """Issue 38 EX1."""
    from lra.training.run_files import export_records

    run = tmp_path / "runs" / "a" / "seed0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(result_record()))
    assert export_records(tmp_path / "runs", tmp_path / "out") == [tmp_path / "out" / "a" / "seed0"]
    good = (tmp_path / "out" / "a" / "seed0" / "result.json").read_bytes()
    (run / "result.json").write_text('{"test_accuracy": 0.9')  # cut short
    assert export_records(tmp_path / "runs", tmp_path / "out") == []
    assert (tmp_path / "out" / "a" / "seed0" / "result.json").read_bytes() == good
    assert "not exported" in capsys.readouterr().err


def test_start_over_removes_the_runs_evaluations_too(tmp_path):
    """Issue 38 TR3: evaluations.jsonl (lra.evaluate, swap_eval.py) belongs to the run --start_over deletes;
    the sweep's record and the lock are not the run's."""
    from lra.training.run_files import remove_run

    for name in (
        "config.json",
        "metrics.jsonl",
        "result.json",
        "evaluations.jsonl",
        "sessions.jsonl",
        "sweep_run.json",
        ".lock",
    ):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "checkpoints" / "latest").mkdir(parents=True)
    removed = remove_run(tmp_path)
    assert "evaluations.jsonl" in removed and "checkpoints" in removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "sweep_run.json"]


def test_two_writers_of_one_file_never_collide_or_tear_it(tmp_path):
    """Issue 38 EX2: each writer has its own temporary file (pid and a random tag): two writers of one
    record at once both succeed, a reader sees one whole version, and no temporary file is left."""
    import threading

    from lra.training.run_files import write_json_atomic

    path = tmp_path / "result.json"
    versions = [{"writer": w, "pad": "x" * 20_000} for w in range(2)]
    errors: list[BaseException] = []
    torn: list[str] = []

    def write(w: int) -> None:
        try:
            for _ in range(150):
                write_json_atomic(path, versions[w])
        except BaseException as e:  # noqa: BLE001 -- collected, asserted below
            errors.append(e)

    def read() -> None:
        for _ in range(300):
            if path.exists():
                text = path.read_text()
                if json.loads(text) not in versions:
                    torn.append(text[:80])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(2)] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and torn == []
    assert json.loads(path.read_text()) in versions and [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_export_warns_when_a_record_names_a_commit_this_history_lacks(tmp_path, capsys):
    """Records made on a copy without .git name a hand-declared commit: a typo is said at export, by name."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "rule"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    typo = head[:7] + ("0" if head[7] != "0" else "1") + head[8:]
    for name, commit in (("good", head), ("typo", typo)):
        run = tmp_path / "runs" / name / "seed0"
        run.mkdir(parents=True)
        record = {**result_record(), "git_commit": f"{commit}-declared", "git_commit_start": f"{commit}-declared"}
        (run / "result.json").write_text(json.dumps(record))
    exported = export_records(tmp_path / "runs", repo / "results")
    assert len(exported) == 2  # exported all the same: the data are real, their provenance needs a word
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and typo in warnings[0] and "typo/seed0/result.json" in warnings[0]
