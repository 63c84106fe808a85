"""The training-step benchmark's and the curve comparison's reports are written by the suite's atomic
writer (lra.training.run_files): a disk that fills while a report is rewritten leaves the previous
report whole, and the failure is a StorageError naming the file."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from lra.errors import StorageError
from lra_lab.bench import steps_report
from lra_lab.reports import curve_compare

ENV = {"device_kind": "cpu", "backend": "cpu", "command": "c", "git_commit": "g", "jax_version": "j", "date": "d"}


def _bench_report(out: Path, steps_per_second: float) -> None:
    case = {"family": "softmax", "length": 16, "dtype": "float32", "seeds": 1, "status": "ok", "mfu": 0.1}
    case.update(steps_per_second=steps_per_second, seed_steps_per_second=steps_per_second, flops_per_step=1e9)
    case.update(memory={"total_bytes": 2**20}, compile_seconds=1.0)
    probed = {"environment": ENV, "matmul_rates": {"float32": 1e12}}
    settings = {"steps": 1, "repeats": 1, "overrides": {}, "isolate": False}
    steps_report.write_report([case], probed, settings, out, "r")


def _curve_report(out: Path, shift: float) -> None:
    for root, delta in (("a", 0.0), ("b", shift)):
        run = out.parent / root / "listops_transformer" / "seed0"
        run.mkdir(parents=True, exist_ok=True)
        lines = [{"step": i + 1, "split": "train", "loss": 2.0 - i / 50 + delta, "accuracy": 0.1} for i in range(40)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    rows = curve_compare.compare(out.parent / "a", out.parent / "b", window=5)
    settings = {"window": 5, "skip": 0.1, "tolerance": 0.05}
    curve_compare.write(rows, ["x", "y"], [out.parent / "a", out.parent / "b"], settings, "c", out, "r")


@pytest.mark.parametrize("write", [_bench_report, _curve_report], ids=["steps_report", "curve_compare"])
def test_a_full_disk_leaves_the_previous_report_whole(write, tmp_path, monkeypatch):
    out = tmp_path / "out"
    write(out, 1.0)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(before) == {"r.json", "r.md", "r.png"}

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError, match="r.json"):
        write(out, 2.0)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no torn file, no temporary left
