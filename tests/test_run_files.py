"""Workdir files: the config guard, metrics truncation on resume, and record export."""

import json

import pytest

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


def test_export_copies_records_but_not_checkpoints(tmp_path):
    run = tmp_path / "runs" / "listops_transformer" / "seed0"
    (run / "checkpoints" / "latest").mkdir(parents=True)
    (run / "checkpoints" / "latest" / "big").write_bytes(b"x" * 100)
    for name in ("config.json", "metrics.jsonl", "result.json"):
        (run / name).write_text(name)
    (tmp_path / "runs" / "unfinished" / "seed0").mkdir(parents=True)  # no result.json: skipped
    exported = export_records(tmp_path / "runs", tmp_path / "out")
    target = tmp_path / "out" / "listops_transformer" / "seed0"
    assert exported == [target]
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "metrics.jsonl", "result.json"]
    assert (target / "result.json").read_text() == "result.json"
