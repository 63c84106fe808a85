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
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lra.train import train_and_evaluate
from lra.training.checkpoints import Checkpoints, CorruptCheckpointError
from test_checkpoints import flip_bit
from test_run_safety import SAME, cli, run_env
from test_seeds import assert_same_run
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


def kill_campaign(
    data_dir: Path,
    root: Path,
    n: int,
    kills: int,
    seed: int,
    kinds: tuple[str, ...] = KILL_KINDS,
    finished: tuple[Path, dict] | None = None,
) -> dict:
    rng = np.random.default_rng(seed)
    ref_dir, reference = _reference(data_dir, root, n, finished)
    args = [f"--config.{k}={v}" for k, v in _steps(n).items()]
    workdir, runs, counts = root / "run0", 0, {k: 0 for k in KILL_KINDS}
    while sum(counts.values()) < kills:
        kind = kinds[int(rng.integers(len(kinds)))] if len(kinds) > 1 else kinds[0]
        if len(kinds) > 1 and counts[kind] and not all(counts[k] for k in kinds):
            kind = next(k for k in kinds if not counts[k])  # every kind at least once
        delay = float(rng.uniform(0.5, 10.0))
        proc = subprocess.Popen(
            cli(workdir, data_dir, *args),
            cwd=REPO,
            env=run_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
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


def flip_campaign(
    data_dir: Path, root: Path, n: int, checks: int, reruns: int, seed: int, finished: tuple[Path, dict] | None = None
) -> None:
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
    counts = kill_campaign(
        data_dir, tmp_path, n=6, kills=2, seed=0, kinds=("checkpoint_write", "final_test"), finished=finished_smoke_run
    )
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


# -- bundles of seeds and --start_over (issue 26) -------------------------------------------------

BUNDLE = (0, 1)


def _bundle(data_dir: Path, n: int = 6, seeds: tuple[int, ...] = BUNDLE, **overrides):
    """The bucketed smoke config (seeds draw different batch lengths; seed 1 shares seed 0's
    bucket order), ``seeds`` in one program."""
    return smoke(data_dir, seeds=seeds, **{"data.buckets": (24, 40), **_steps(n), **overrides})


def _bundle_args(n: int = 6, seeds: tuple[int, ...] = BUNDLE) -> list[str]:
    return [
        f"--config.seeds={','.join(map(str, seeds))}",
        "--config.data.buckets=24,40",
        *(f"--config.{k}={v}" for k, v in _steps(n).items()),
    ]


def _snapshot(workdir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file() and p.name != ".lock"}


def _assert_bundle_equal(workdir: Path, ref_dir: Path, seeds: tuple[int, ...] = BUNDLE) -> None:
    """Every seed's metrics (wall-clock aside) and result equal the uninterrupted bundle's, bit for bit."""
    for seed in seeds:
        a, b = ref_dir / f"seed{seed}", workdir / f"seed{seed}"
        assert _comparable(_read_metrics(b)) == _comparable(_read_metrics(a)), f"seed {seed}: metrics differ"
        ra, rb = (json.loads((w / "result.json").read_text()) for w in (a, b))
        assert {k: rb[k] for k in SAME} == {k: ra[k] for k in SAME}, f"seed {seed}: result differs"


def _error_line(out: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr[-3000:]
    return errors[0]


def test_bundle_start_over_takes_every_lock_before_removing_anything(finished_smoke_run, data_dir, tmp_path):
    """D1: seed 1's workdir held by another process: --start_over on the bundle is refused (exit 3)
    and seed 0's finished run is still there, byte for byte. The locks are taken before any run is read, so
    the seeds' folders are copies of the finished smoke run (training a bundle for this costs ~40 s)."""
    from lra.errors import EXIT_LOCKED, WorkdirLockedError, exit_code
    from lra.training.run_files import WorkdirLock

    workdir = tmp_path / "w"
    for seed in BUNDLE:
        shutil.copytree(finished_smoke_run[0], workdir / f"seed{seed}")
    before = _snapshot(workdir)
    with WorkdirLock(workdir / "seed1"):
        with pytest.raises(WorkdirLockedError, match="seed1 is in use") as e:
            train_and_evaluate(_bundle(data_dir), workdir, start_over=True)
    assert exit_code(e.value) == EXIT_LOCKED
    assert _snapshot(workdir) == before


@pytest.mark.slow  # three runs of a bundle
def test_bundle_refusal_advises_the_seeds_own_command_and_it_works(finished_bundle, data_dir, tmp_path):
    """D2/U2: seed 1 of a finished bundle lost its checkpoints. The bundle is refused untouched;
    the refusal prints seed 1's own command (with the bundle's bucket order), which starts that
    seed alone over; the bundle's rerun then keeps seed 0 byte for byte and seed 1 equals the
    uninterrupted bundle's."""
    import shlex

    workdir = tmp_path / "w"
    shutil.copytree(finished_bundle[0], workdir)
    shutil.rmtree(workdir / "seed1" / "checkpoints")
    (workdir / "seed1" / "result.json").unlink()
    before = _snapshot(workdir)
    env = run_env()
    refused = subprocess.run(
        cli(workdir, data_dir, *_bundle_args()), capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = _error_line(refused)
    assert "seed1 holds a run" in line and "other seeds' runs are kept" in line, line
    assert _snapshot(workdir) == before
    command = shlex.split(line.split("start this seed over alone with `")[1].split("`")[0])
    assert command[:3] == ["python", "-m", "lra.train"]
    assert "--config.seed=1" in command and f"--workdir={workdir / 'seed1'}" in command
    assert "--config.data.bucket_order_seed=0" in command and "--start_over" in command
    assert not any(a.startswith("--config.seeds") for a in command)
    alone = subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    seed0 = _snapshot(workdir / "seed0")
    again = train_and_evaluate(_bundle(data_dir), workdir)
    assert [r["seed"] for r in again] == list(BUNDLE)
    assert _snapshot(workdir / "seed0") == seed0
    assert_same_run(finished_bundle[0] / "seed1", workdir / "seed1")  # alone: to float rounding (test_seeds)


# Slow (three lra.train processes and a bundle rerun): by default the refusal of seeds at different
# steps naming each seed's command is test_seeds.py's test_seeds_without_a_common_checkpoint_are_refused,
# and a printed seed's command run as printed, then the bundle finishing, is
# test_bundle_refusal_advises_the_seeds_own_command_and_it_works.
@pytest.mark.slow
def test_different_steps_refusal_prints_each_seeds_exact_command(finished_bundle, data_dir, tmp_path):
    """U1: seeds with no checkpoint in common: the refusal's commands (``--config.seed=k
    --workdir W/seed<k>``) run each seed alone, and the bundle then finishes like the uninterrupted one."""
    import shlex

    workdir = tmp_path / "w"
    shutil.copytree(finished_bundle[0] / "seed0", workdir / "seed0")
    (workdir / "seed0" / "result.json").unlink()
    shutil.rmtree(workdir / "seed0" / "checkpoints" / "latest" / "3")  # seed 0 at step 6, seed 1 fresh
    refused = subprocess.run(
        cli(workdir, data_dir, *_bundle_args()), capture_output=True, text=True, cwd=REPO, env=run_env(), timeout=600
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = _error_line(refused)
    commands = [shlex.split(c) for c in line.split("`")[1::2]]
    assert [c[c.index("-m") + 1] for c in commands] == ["lra.train", "lra.train"]
    for seed, command in zip(BUNDLE, commands, strict=False):
        assert f"--config.seed={seed}" in command and f"--workdir={workdir / f'seed{seed}'}" in command
        run = subprocess.run(
            [sys.executable, *command[1:]], capture_output=True, text=True, cwd=REPO, env=run_env(), timeout=600
        )
        assert run.returncode == 0, run.stderr[-3000:]
    results = train_and_evaluate(_bundle(data_dir), workdir)  # both finished: reported, unchanged
    assert_same_run(finished_bundle[0] / "seed1", workdir / "seed1")  # alone: to float rounding (test_seeds)
    for key in SAME:  # seed 0 only wrote its result, evaluated alone
        assert results[0][key] == pytest.approx(finished_bundle[1][0][key], rel=1e-4, abs=1e-6)


def test_bucketed_seed_resumed_alone_inherits_the_bundles_bucket_order(finished_bundle, data_dir, tmp_path, capsys):
    """U2: seed 1 of a bucketed bundle, rerun alone with plain ``--config.seed=1`` (a sweep with
    --group-seeds off): it takes data.bucket_order_seed from its config.json, says so, and
    resumes to the bundle's result; an explicit other order is refused, naming the field."""
    from lra.training.run_files import WorkdirMismatchError

    workdir = tmp_path / "seed1"
    shutil.copytree(finished_bundle[0] / "seed1", workdir)
    (workdir / "result.json").unlink()
    alone = smoke(data_dir, seed=1, **{"data.buckets": (24, 40), **_steps(6)})
    with pytest.raises(WorkdirMismatchError, match=r"bucket_order_seed.*--config.data.bucket_order_seed=0") as e:
        train_and_evaluate(
            smoke(data_dir, seed=1, **{"data.buckets": (24, 40), "data.bucket_order_seed": 1, **_steps(6)}), workdir
        )
    assert "delete" not in str(e.value)
    train_and_evaluate(alone, workdir)
    assert "data.bucket_order_seed=0 taken from its config.json" in capsys.readouterr().err
    assert_same_run(finished_bundle[0] / "seed1", workdir)  # its test evaluated alone: to float rounding


def _legacy(checkpoint: Path) -> None:
    """Rewrite a checkpoint's integrity record as an older version wrote it (no config)."""
    from lra.training import provenance

    record = provenance.read_sealed_json(checkpoint / "integrity.json")
    for key in ("config", "config_digest"):
        record.pop(key)
    provenance.write_sealed_json(checkpoint / "integrity.json", record)


def test_checkpoints_of_another_or_an_unknown_config_are_refused(finished_smoke_run, data_dir, tmp_path):
    """D3: checkpoints left without config.json (a --start_over killed by an older version) are
    never resumed under another config: their sealed config is compared; one that records none
    is refused when config.json is gone."""
    from lra.errors import RunStateError
    from lra.training.run_files import WorkdirMismatchError

    workdir = tmp_path / "run"
    shutil.copytree(finished_smoke_run[0], workdir)
    for name in ("config.json", "result.json", "metrics.jsonl"):
        (workdir / name).unlink()
    before = _snapshot(workdir)
    with pytest.raises(
        WorkdirMismatchError,
        match=r"checkpoints/latest/6 was saved by a run of a different config "
        r"\(learning_rate: 0.005 in the checkpoint, 0.05 now",
    ):
        train_and_evaluate(smoke(data_dir, learning_rate=0.05), workdir)
    assert _snapshot(workdir) == before
    for step in (3, 6):
        _legacy(workdir / "checkpoints" / "latest" / str(step))
    before = _snapshot(workdir)
    with pytest.raises(RunStateError, match=r"records no config.*config.json is missing.*--start_over"):
        train_and_evaluate(smoke(data_dir), workdir)
    assert _snapshot(workdir) == before


def _dying_delete(at: int, real_delete):
    """``run_files._delete`` that raises KeyboardInterrupt (a kill) on its call number ``at``."""
    calls = {"n": 0}

    def dying(path: Path) -> None:
        if calls["n"] == at:
            raise KeyboardInterrupt("killed")
        calls["n"] += 1
        real_delete(path)

    return dying


# Slow (a training per moment): by default the same --start_over deletions (checkpoints before
# config.json; another config refused untouched while any part of the old run is left; --start_over
# again ends as the uninterrupted run) are stopped at moments drawn across both seeds' deletions by
# test_bundle_start_over_killed_at_random_moments_loses_nothing_it_was_not_asked_to.
@pytest.mark.slow
def test_start_over_killed_at_every_moment_loses_nothing_it_was_not_asked_to(
    finished_smoke_run, data_dir, tmp_path, monkeypatch
):
    """D3: --start_over stopped after each of its deletions (and between a rename and its deletion):
    checkpoints go before config.json, so a rerun of another config is always refused untouched,
    and --start_over again ends with the uninterrupted run's result."""
    from lra.training import run_files

    real_delete, moments = run_files._delete, 0
    while True:
        workdir = tmp_path / f"kill{moments}"
        shutil.copytree(finished_smoke_run[0], workdir)
        monkeypatch.setattr(run_files, "_delete", _dying_delete(moments, real_delete))
        try:
            result = train_and_evaluate(smoke(data_dir), workdir, start_over=True)
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.setattr(run_files, "_delete", real_delete)
        if finished:
            break
        moments += 1
        if (workdir / "checkpoints").exists():
            assert (workdir / "config.json").exists()  # never checkpoints without their config
        left = [name for name in run_files.RUN_OUTPUTS if (workdir / name).exists() and name != "tensorboard"]
        if left:  # a part of the old run is there: another config is refused untouched
            before = _snapshot(workdir)
            with pytest.raises(ValueError, match="different config|cannot be resumed|no config"):
                train_and_evaluate(smoke(data_dir, learning_rate=0.05), workdir)
            assert _snapshot(workdir) == before
        else:  # everything --start_over was asked to delete is gone: another config starts afresh
            other = train_and_evaluate(smoke(data_dir, learning_rate=0.05), workdir)
            assert json.loads((workdir / "config.json").read_text())["learning_rate"] == 0.05
            assert other["num_train_steps"] == 6
        if moments == 2:  # once (each costs a training): --start_over again ends as the uninterrupted run
            result = train_and_evaluate(smoke(data_dir), workdir, start_over=True)
            assert {k: result[k] for k in SAME} == {k: finished_smoke_run[1][k] for k in SAME}
    # before and after each output's rename; a smoke run writes every output but evaluations.jsonl
    # (lra.evaluate's), so count those the finished run has
    present = [name for name in run_files.RUN_OUTPUTS if (finished_smoke_run[0] / name).exists()]
    assert len(present) >= len(run_files.RUN_OUTPUTS) - 1, present
    assert moments == 2 * len(present)
    assert {k: result[k] for k in SAME} == {k: finished_smoke_run[1][k] for k in SAME}


def bundle_kill_campaign(
    data_dir: Path, root: Path, ref: tuple[Path, list[dict]], n: int, kills: int, seed: int, kinds: tuple[str, ...]
) -> dict:
    """SIGKILL the bundle's command again and again (``random``: after a random delay;
    ``seed_save``: while seed 1 writes a checkpoint; ``between_saves``: seed 0 has saved a step
    seed 1 has not), rerunning it each time; no seed ever holds a wrong result.json, and the
    bundle that finally finishes equals the uninterrupted one bit for bit."""
    rng = np.random.default_rng(seed)
    ref_dir, reference = ref
    workdir = root / "killed"
    counts = {k: 0 for k in kinds}
    tries = 0
    while sum(counts.values()) < kills and tries < 4 * kills:
        tries += 1
        kind = min(kinds, key=lambda k: (counts[k], rng.random()))
        delay = float(rng.uniform(0.5, 12.0))
        proc = subprocess.Popen(
            cli(workdir, data_dir, *_bundle_args(n)),
            cwd=REPO,
            env=run_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        start = time.perf_counter()
        latest = [workdir / f"seed{s}" / "checkpoints" / "latest" for s in BUNDLE]
        seed1 = [workdir / "seed1" / "checkpoints" / k for k in ("latest", "best")]
        killed = False
        while proc.poll() is None:
            if kind == "random":
                hit = time.perf_counter() - start >= delay
            elif kind == "seed_save":
                hit = any(d.is_dir() and any(p.name.startswith(".tmp-") for p in d.iterdir()) for d in seed1)
            else:
                steps = [{p.name for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set() for d in latest]
                hit = bool(steps[0] - steps[1] - {"0"})
            if hit:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed = True
                break
            time.sleep(0.001)
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr, stderr[-3000:]
        for s, ref_result in zip(BUNDLE, reference, strict=False):
            _check_result(workdir / f"seed{s}", ref_result)
        if killed:
            counts[kind] += 1
        else:
            assert proc.returncode == 0, stderr[-3000:]
            shutil.rmtree(workdir)  # it finished first: start again
    results = train_and_evaluate(_bundle(data_dir, n), workdir)
    assert [r["seed"] for r in results] == list(BUNDLE)
    _assert_bundle_equal(workdir, ref_dir)
    return counts


# Slow (minutes of kills and reruns): by default the single-seed campaign (test_kill_campaign_small),
# the bundle's --start_over stopped at random moments and the kill between the seeds' first saves this
# campaign found (test_bundle_killed_between_the_seeds_first_saves_starts_fresh) keep it covered.
@pytest.mark.slow
def test_bundle_kill_campaign_small(finished_bundle, data_dir, tmp_path):
    counts = bundle_kill_campaign(
        data_dir, tmp_path, finished_bundle, n=6, kills=2, seed=3, kinds=("seed_save", "between_saves")
    )
    assert sum(counts.values()) == 2, counts


def test_bundle_killed_between_the_seeds_first_saves_starts_fresh(finished_bundle, data_dir, tmp_path, monkeypatch):
    """Found by the bundle kill campaign: a kill after seed 0's step-0 checkpoint and before
    seed 1's left seeds "at different steps" and refused the rerun; step 0 is the initial state,
    so all start fresh, and the bundle ends as the uninterrupted one."""
    real = Checkpoints.save_latest

    def dying(self, step, state):
        if step == 0 and self.root.parent.name == "seed1":
            raise KeyboardInterrupt("killed")
        real(self, step, state)

    monkeypatch.setattr(Checkpoints, "save_latest", dying)
    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate(_bundle(data_dir), tmp_path)
    monkeypatch.setattr(Checkpoints, "save_latest", real)
    assert Checkpoints(tmp_path / "seed0").steps("latest") == [0] and not Checkpoints(tmp_path / "seed1").steps(
        "latest"
    )
    train_and_evaluate(_bundle(data_dir), tmp_path)
    _assert_bundle_equal(tmp_path, finished_bundle[0])


def test_bundle_bit_flips_fall_back_or_refuse_naming_the_seed(finished_bundle, data_dir, tmp_path):
    """A flipped bit in seed 1's newest latest checkpoint: it falls back to step 3 and ends as the
    uninterrupted bundle; in seed 1's best: refused, naming it and seed 1's own command, seed 0
    untouched."""
    rng = np.random.default_rng(26)
    workdir = tmp_path / "latest"
    shutil.copytree(finished_bundle[0], workdir)
    for s in BUNDLE:
        (workdir / f"seed{s}" / "result.json").unlink()
    state = workdir / "seed1" / "checkpoints" / "latest" / "6" / "state"
    flip_bit(max((p for p in state.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size), rng)
    train_and_evaluate(_bundle(data_dir), workdir)
    _assert_bundle_equal(workdir, finished_bundle[0])

    workdir = tmp_path / "best"
    shutil.copytree(finished_bundle[0], workdir)
    (workdir / "seed1" / "result.json").unlink()
    best = Checkpoints(workdir / "seed1").latest_step("best")
    flip_bit(workdir / "seed1" / "checkpoints" / "best" / str(best) / "integrity.json", rng)
    before = _snapshot(workdir)
    with pytest.raises(CorruptCheckpointError, match=rf"seed1/checkpoints/best/{best} is corrupt.*--config.seed=1"):
        train_and_evaluate(_bundle(data_dir), workdir)
    assert _snapshot(workdir) == before


def test_bundle_start_over_killed_at_random_moments_loses_nothing_it_was_not_asked_to(
    finished_bundle, data_dir, tmp_path, monkeypatch
):
    """D1/D3 on a bundle: its --start_over (seed 0's run deleted, then seed 1's) stopped at moments
    drawn across both seeds' deletions (seed 1's first among them, and between a rename and its
    deletion): no seed ever holds checkpoints without config.json; while any seed keeps a part of
    its old run, the bundle under another config is refused with the workdir untouched, naming that
    seed; --start_over again ends as the uninterrupted bundle, bit for bit."""
    from lra.training import run_files

    ref_dir, reference = finished_bundle
    # Moments: each output present is deleted in two calls (a leftover .removing-<name>, then the
    # renamed output), seed 0's outputs first (checkpoints ... config.json), then seed 1's.
    per_seed = [2 * sum((ref_dir / f"seed{s}" / n).exists() for n in run_files.RUN_OUTPUTS) for s in BUNDLE]
    first1, total = per_seed[0], sum(per_seed)
    assert per_seed[0] == per_seed[1] >= 8, per_seed
    rng = np.random.default_rng(26)
    in_seed0 = rng.choice(first1, size=3, replace=False)
    in_seed1 = first1 + 1 + rng.choice(per_seed[1] - 1, size=3, replace=False)
    moments = sorted({first1, *map(int, in_seed0), *map(int, in_seed1)})
    rerun_at = int(in_seed1[0])  # --start_over again from here: seed 0 gone, seed 1 half deleted

    def files(root: Path) -> dict[Path, bytes]:
        return {p.relative_to(root): b for p, b in _snapshot(root).items()}

    def old_parts(seed_dir: Path) -> list[str]:  # of the old run, under their own names
        return [n for n in run_files.RUN_OUTPUTS if (seed_dir / n).exists() and n != "tensorboard"]

    real_delete = run_files._delete
    for at in moments:
        workdir = tmp_path / f"kill{at}"
        shutil.copytree(ref_dir, workdir)
        monkeypatch.setattr(run_files, "_delete", _dying_delete(at, real_delete))
        with pytest.raises(KeyboardInterrupt):
            train_and_evaluate(_bundle(data_dir), workdir, start_over=True)
        monkeypatch.setattr(run_files, "_delete", real_delete)
        seed_dirs = [workdir / f"seed{s}" for s in BUNDLE]
        for d in seed_dirs:  # never checkpoints (even those being deleted) without the config that guards them
            if (d / "checkpoints").exists() or (d / f"{run_files.REMOVING}checkpoints").exists():
                assert (d / "config.json").exists(), (at, sorted(p.name for p in d.iterdir()))
        if at < first1:  # stopped in seed 0's deletions: seed 1 not yet touched
            assert files(seed_dirs[1]) == files(ref_dir / "seed1"), at
        else:  # in seed 1's: seed 0's run wholly gone, seed 1's untouched at its first moment
            assert not [p.name for p in seed_dirs[0].iterdir() if p.name != ".lock"], at
            if at == first1:
                assert files(seed_dirs[1]) == files(ref_dir / "seed1")
            else:
                assert files(seed_dirs[1]) != files(ref_dir / "seed1"), at
        holding = [d for d in seed_dirs if old_parts(d)]
        if holding:  # a part of an old run is there: another config is refused untouched, naming the seed
            before = _snapshot(workdir)
            with pytest.raises(ValueError, match="different config|cannot be resumed|no config") as e:
                train_and_evaluate(_bundle(data_dir, learning_rate=0.05), workdir)
            assert str(holding[0]) in str(e.value), (at, str(e.value))
            assert _snapshot(workdir) == before, at
        else:  # all --start_over was asked to delete is gone: another config starts afresh
            other = train_and_evaluate(_bundle(data_dir, learning_rate=0.05), workdir)
            assert [r["num_train_steps"] for r in other] == [6, 6]
            for d in seed_dirs:
                assert json.loads((d / "config.json").read_text())["learning_rate"] == 0.05
        if at == rerun_at:  # --start_over again ends as the uninterrupted bundle
            results = train_and_evaluate(_bundle(data_dir), workdir, start_over=True)
            assert [{k: r[k] for k in SAME} for r in results] == [{k: r[k] for k in SAME} for r in reference]
            _assert_bundle_equal(workdir, ref_dir)
    assert first1 in moments and min(moments) < first1 < rerun_at < total, (moments, total)


@pytest.mark.slow
def test_bundle_kill_campaign_full(data_dir, tmp_path):
    ref = tmp_path / "whole"
    reference = train_and_evaluate(_bundle(data_dir, 30), ref)
    counts = bundle_kill_campaign(
        data_dir, tmp_path, (ref, reference), n=30, kills=12, seed=26, kinds=("random", "seed_save", "between_saves")
    )
    assert sum(counts.values()) == 12 and all(counts.values()), counts
