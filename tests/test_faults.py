"""Fault campaigns on ``python -m lra.train`` (ListOps smoke): random SIGKILLs and bit flips.

Kill campaign: a run is SIGKILLed again and again (at random moments, while a checkpoint is
being written, during the final test evaluation) and rerun; after every kill the workdir holds no
result.json or the right one, and the run that finally finishes has exactly the metrics and
result of an uninterrupted run. Bit-flip campaign: one random bit of one random checkpoint file
is flipped; the damage is always found, and the rerun either falls back to an intact checkpoint
and ends with the right result or stops with an error naming the checkpoint, never with a wrong
result.json. Seeded: the same faults every time (the moments of the kills follow the machine's speed).
The fast suite runs a few of each; ``-m slow`` runs the full campaigns.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from lra.training.checkpoints import Checkpoints, CorruptCheckpointError
from lra.train import train_and_evaluate
from test_checkpoints import flip_bit
from test_run_safety import SAME, cli, run_env
from test_train import REPO, _comparable, _read_metrics, smoke

KILL_KINDS = ("random", "checkpoint_write", "final_test")


@pytest.fixture
def data_dir(smoke_data_dir) -> Path:
    return smoke_data_dir


def _steps(n: int) -> dict:
    return dict(num_train_steps=n, checkpoint_every=3, eval_every=3, log_every=1)


def _reference(data_dir: Path, root: Path, n: int, finished: tuple[Path, dict] | None = None) -> tuple[Path, dict]:
    """The uninterrupted run (the shared finished smoke run when that is the same config)."""
    if finished is not None and n == 6:  # the smoke preset's own steps
        return finished
    workdir = root / "reference"
    return workdir, train_and_evaluate(smoke(data_dir, **_steps(n)), workdir)


def _check_result(workdir: Path, reference: dict) -> None:
    """No result.json, or one equal to the uninterrupted run's."""
    path = workdir / "result.json"
    if path.exists():
        result = json.loads(path.read_text())
        assert all(result[k] == reference[k] for k in SAME), (result, reference)


def _kill_at(proc: subprocess.Popen, workdir: Path, kind: str, delay: float, n: int) -> bool:
    """SIGKILL ``proc`` at the moment ``kind`` names; False if it finished first."""
    start = time.perf_counter()
    ckpt_dirs = [workdir / "checkpoints" / k for k in ("latest", "best")]
    while proc.poll() is None:
        if kind == "random":
            hit = time.perf_counter() - start >= delay
        elif kind == "checkpoint_write":  # a save in progress: its temporary folder exists
            hit = any(d.is_dir() and any(p.name.startswith(".tmp-") for p in d.iterdir()) for d in ckpt_dirs)
        else:  # the last checkpoint is committed: the best one is being restored and tested
            hit = (workdir / "checkpoints" / "latest" / str(n)).is_dir()
        if hit:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)
    return False


def kill_campaign(data_dir: Path, root: Path, n: int, kills: int, seed: int,
                  kinds: tuple[str, ...] = KILL_KINDS, finished: tuple[Path, dict] | None = None) -> dict:
    rng = np.random.default_rng(seed)
    ref_dir, reference = _reference(data_dir, root, n, finished)
    args = [f"--config.{k}={v}" for k, v in _steps(n).items()]
    workdir, runs, counts = root / "run0", 0, {k: 0 for k in KILL_KINDS}
    while sum(counts.values()) < kills:
        kind = kinds[int(rng.integers(len(kinds)))] if len(kinds) > 1 else kinds[0]
        if len(kinds) > 1 and counts[kind] and not all(counts[k] for k in kinds):
            kind = next(k for k in kinds if not counts[k])  # every kind at least once
        delay = float(rng.uniform(0.5, 10.0))
        proc = subprocess.Popen(cli(workdir, data_dir, *args), cwd=REPO, env=run_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        killed = _kill_at(proc, workdir, kind, delay, n)
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr, stderr[-3000:]
        _check_result(workdir, reference)
        if killed:
            counts[kind] += 1
            continue
        assert proc.returncode == 0, stderr[-3000:]  # it finished first: check it, start another
        _check_finished(workdir, ref_dir, reference)
        runs += 1
        workdir = root / f"run{runs}"
    result = train_and_evaluate(smoke(data_dir, **_steps(n)), workdir)
    assert all(result[k] == reference[k] for k in SAME)
    _check_finished(workdir, ref_dir, reference)
    return counts


def _check_finished(workdir: Path, ref_dir: Path, reference: dict) -> None:
    _check_result(workdir, reference)
    assert (workdir / "result.json").exists()
    assert _comparable(_read_metrics(workdir)) == _comparable(_read_metrics(ref_dir))


def flip_campaign(data_dir: Path, root: Path, n: int, checks: int, reruns: int, seed: int,
                  finished: tuple[Path, dict] | None = None) -> None:
    """``checks`` flips each found by verification alone, ``reruns`` flips followed by a rerun."""
    rng = np.random.default_rng(seed)
    ref_dir, reference = _reference(data_dir, root, n, finished)
    files = sorted(p.relative_to(ref_dir) for p in (ref_dir / "checkpoints").rglob("*") if p.is_file())
    checked = root / "checked"
    shutil.copytree(ref_dir, checked)  # never damage the reference
    ckpt = Checkpoints(checked)
    for _ in range(checks):
        rel = files[int(rng.integers(len(files)))]
        kind, step = rel.parts[1], int(rel.parts[2])
        pristine = (checked / rel).read_bytes()
        flip_bit(checked / rel, rng)
        with pytest.raises(CorruptCheckpointError, match=str(ckpt.path(kind, step))):
            ckpt.verify(kind, step)
        (checked / rel).write_bytes(pristine)
    for trial in range(reruns):
        workdir = root / f"flip{trial}"
        shutil.copytree(ref_dir, workdir)
        (workdir / "result.json").unlink()  # the rerun must rebuild it from the checkpoints
        rel = files[int(rng.integers(len(files)))]
        kind, step = rel.parts[1], int(rel.parts[2])
        flip_bit(workdir / rel, rng)
        if kind == "best":
            with pytest.raises(CorruptCheckpointError, match=f"checkpoints/best/{step} is corrupt"):
                train_and_evaluate(smoke(data_dir, **_steps(n)), workdir)
            assert not (workdir / "result.json").exists()
        else:  # another latest checkpoint is intact: used, and the damaged one set aside
            result = train_and_evaluate(smoke(data_dir, **_steps(n)), workdir)
            assert all(result[k] == reference[k] for k in SAME)
            assert (workdir / "checkpoints" / "latest" / f"{step}.corrupt").is_dir()
        _check_result(workdir, reference)


def test_kill_campaign_small(data_dir, tmp_path, finished_smoke_run):
    counts = kill_campaign(data_dir, tmp_path, n=6, kills=2, seed=0, kinds=("checkpoint_write", "final_test"),
                           finished=finished_smoke_run)
    assert counts == {"random": 0, "checkpoint_write": 1, "final_test": 1}


def test_flip_campaign_small(data_dir, tmp_path, finished_smoke_run):
    """Verification only here: the reruns after a flip are tests/test_run_safety.py's (defect 2)."""
    flip_campaign(data_dir, tmp_path, n=6, checks=60, reruns=0, seed=1, finished=finished_smoke_run)


@pytest.mark.slow
def test_kill_campaign_full(data_dir, tmp_path):
    counts = kill_campaign(data_dir, tmp_path, n=30, kills=24, seed=13)
    assert sum(counts.values()) == 24 and all(counts.values()), counts


@pytest.mark.slow
def test_flip_campaign_full(data_dir, tmp_path):
    flip_campaign(data_dir, tmp_path, n=30, checks=400, reruns=12, seed=13)
