"""scripts/gpu_call.sh, the time-boxed jobs on a copy of the tree (docs/gpu_runbook.md), at smoke sizes
on CPU: an accelerator's paid time goes into none of them finding a broken path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_call.sh"


def _call(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {
        **os.environ,
        "SMOKE": "1",
        "KIND": "cpu",
        "STATE": str(tmp_path / "state"),
        "OUT": str(tmp_path / "out"),
        "LRA_DATA_DIR": str(tmp_path / "data"),
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=full, capture_output=True, text=True, timeout=900)


def test_script_parses_and_names_its_steps(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    usage = _call(tmp_path, "nonsense")
    assert (
        usage.returncode == 2
        and "STEP: bench | cudnn | profile | dtypes | train" in usage.stdout
        and "sweep GRID" in usage.stdout
    )


@pytest.mark.slow
def test_train_step_resumes_across_calls_and_returns_one_archive(tmp_path):
    first = _call(tmp_path, "train", "listops_convluna", "0,1", STEPS="400", BUDGET="25")
    assert "lra.train exit 124" in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
    second = _call(tmp_path, "train", "listops_convluna", "0,1", STEPS="400", BUDGET="400")
    assert "lra.train exit 0" in second.stdout and "resuming at step" in second.stdout
    with tarfile.open(tmp_path / "out" / "train_cpu.tgz") as archive:
        names = archive.getnames()
    assert "train/listops_convluna_400steps/seed1/result.json" in names
    assert any(n.startswith("train/listops_convluna_400steps_memory/") for n in names)
    result = json.loads(
        (tmp_path / "state" / "runs" / "listops_convluna_400steps" / "seed0" / "result.json").read_text()
    )
    assert result["num_train_steps"] == 400


@pytest.mark.slow
def test_sweep_step_resumes_on_a_fresh_machine_from_its_state_archive(tmp_path):
    """A call stopped by its budget returns the unfinished workdirs; unpacked into a new state folder
    (the next call's bare machine, with .gpu/sweeps carried), the same call resumes and finishes."""
    args = (
        "sweep",
        "convluna_appendix",
        "--preset",
        "smoke",
        "--seeds",
        "20",
        "21",
        "--variants",
        "MaxPool-16 (reference)",
        "--set",
        "num_train_steps=400",
        "--set",
        "checkpoint_every=5",
    )
    first = _call(  # PART_BYTES: the state archive comes back in parts (a device file over 16 MiB does not)
        tmp_path, *args, BUDGET="90", JOBS="1", STATE=os.path.relpath(tmp_path / "state", REPO), PART_BYTES="20000"
    )  # relative, as .gpu on the device  # past compile and the first checkpoints, also on a loaded machine
    assert "runs stopped or done (exit 124" in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
    parts = sorted((tmp_path / "out").glob("sweep_state_cpu.tgz.part*"))
    assert len(parts) > 1 and not (tmp_path / "out" / "sweep_state_cpu.tgz").exists(), first.stdout[-2000:]
    assert all(p.stat().st_size <= 20000 for p in parts)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as archive:
        archive.extractall(fresh, filter="data")
    for p in parts:
        p.unlink()
    assert list(fresh.glob("sweeps/convluna_appendix/*/seed20/checkpoints/latest"))
    second = _call(tmp_path, *args, BUDGET="400", JOBS="1", STATE=str(fresh))
    assert "1 done" in second.stdout, second.stdout[-2000:] + second.stderr[-2000:]
    log = next((fresh / "logs" / "convluna_appendix").glob("*.log")).read_text()
    assert "resuming at step" in log
    with tarfile.open(tmp_path / "out" / "sweep_cpu.tgz") as archive:
        names = archive.getnames()
    assert "sweep/convluna_appendix/listops_maxpool-16-reference/seed21/result.json" in names
    with tarfile.open(tmp_path / "out" / "sweep_state_cpu.tgz") as archive:  # finished: no checkpoints to carry
        assert not [n for n in archive.getnames() if "/checkpoints" in n]
