"""The training loop end to end on the smoke preset: results, 2 devices, errors (SIGKILL and
other faults: test_faults.py, test_run_safety.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lra.defaults import make_config
from lra.train import train_and_evaluate
from lra.training.checks import ConfigError
from lra.training.run_files import WorkdirMismatchError

REPO = Path(__file__).resolve().parent.parent
RESULT_KEYS = {
    "task",
    "attention",
    "variant",
    "seed",
    "best_val_accuracy",
    "best_step",
    "test_accuracy",
    "num_train_steps",
    "train_seconds",
    "steps_per_second",
    "num_params",
    "config_preset",
    "device_kind",
    "jax_version",
    "git_commit",
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lra_data")


def smoke(data_dir: Path, **overrides):
    c = make_config("listops", "softmax", "smoke")
    c.data_dir = str(data_dir)
    for key, value in overrides.items():
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return c


def _comparable(records):
    """metrics.jsonl without wall-clock fields."""
    return [{k: v for k, v in r.items() if k != "steps_per_second"} for r in records]


def _read_metrics(workdir: Path):
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def assert_saved_states_finite(workdir: Path) -> list[tuple[str, int]]:
    """Every checkpoint in ``workdir`` passes its integrity check and holds no NaN/Inf; returns them."""
    import jax
    import orbax.checkpoint as ocp

    from lra.training.checkpoints import Checkpoints

    ckpt, found = Checkpoints(workdir), []
    for kind in ("latest", "best"):
        for step in ckpt.steps(kind):
            ckpt.verify(kind, step)
            raw = ocp.Checkpointer(ocp.StandardCheckpointHandler()).restore(ckpt.path(kind, step) / "state")
            for leaf in jax.tree.leaves(raw):
                a = np.asarray(leaf)
                assert not np.issubdtype(a.dtype, np.inexact) or np.isfinite(a).all(), (kind, step)
            found.append((kind, step))
    return found


def test_smoke_run_writes_result_and_files(finished_smoke_run, smoke_data_dir, tmp_path):
    """The shared finished smoke run (conftest: ``train_and_evaluate(smoke(data), workdir)``, trained
    once per test process) wrote its result and files; a second call changes nothing (on a copy)."""
    shutil.copytree(finished_smoke_run[0], tmp_path / "run")
    result = finished_smoke_run[1]
    on_disk = json.loads((tmp_path / "run" / "result.json").read_text())
    assert RESULT_KEYS <= set(on_disk)
    assert on_disk == result
    assert 0.0 <= result["test_accuracy"] <= 1.0 and result["num_train_steps"] == 6
    assert result["best_step"] in (3, 6) and result["variant"] == "Transformer"
    records = _read_metrics(tmp_path / "run")
    assert [r["step"] for r in records if r["split"] == "validation"] == [3, 6]
    assert sum(r["split"] == "test" for r in records) == 1
    assert json.loads((tmp_path / "run" / "config.json").read_text())["task"] == "listops"
    # a second call finds the finished run and changes nothing
    again = train_and_evaluate(smoke(smoke_data_dir), tmp_path / "run")
    assert again == result and _read_metrics(tmp_path / "run") == records


_STEP_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from lra.defaults import make_config
from lra.model import build_model
import optax
from lra.training import hosts
from lra.training.step import stack
from lra.training.step import init_state, make_steps
c = make_config("listops", "softmax", "smoke")
model = build_model(c.model, 16, 10, False)
# Plain SGD: Adam would turn gradients that differ only by reduction order into +-lr updates.
tx = optax.sgd(0.5)
mesh = hosts.data_mesh()
train_step, _ = make_steps(model, tx, c, mesh, (c.seed,))
rng = np.random.default_rng(0)
inputs = rng.integers(1, 16, size=(8, 64)).astype(np.int32); inputs[:, 50:] = 0
batch = {"inputs": inputs, "labels": rng.integers(0, 10, 8).astype(np.int32), "weights": np.ones(8, np.float32)}
batch = {k: v[None] for k, v in batch.items()}  # one seed
params0 = jax.jit(model.init)(jax.random.key(0), inputs[:1])["params"]  # jitted: eager init dispatches op by op
state = jax.device_put(stack([init_state(params0, tx)]), hosts.replicated(mesh))
for _ in range(2):
    state, metrics = train_step(state, hosts.shard_batch(batch, hosts.seed_batch_sharded(mesh)))
flat = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(state["params"])])
print(json.dumps({"devices": jax.device_count(), "loss": float(metrics["loss"][0]), "params": flat.tolist()}))
"""


def _step_on(devices: int) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", _STEP_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_device_step_matches_one_device():
    one, two = _step_on(1), _step_on(2)
    assert (one["devices"], two["devices"]) == (1, 2)
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    np.testing.assert_allclose(two["params"], one["params"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"task": "sudoku"}, "valid tasks"),
        ({"model.attention": "nope"}, "valid names"),
        ({"model.num_heads": 3}, "not divisible by num_heads"),
        ({"data.max_len": 128}, "position table"),
        ({"model.pooling": "memory"}, "needs a family with a memory"),
        ({"model.attention_kwargs": {"window": 3}}, "not option"),
        ({"batch_size": 0}, "positive"),
    ],
)
def test_bad_config_fails_before_anything_runs(data_dir, tmp_path, overrides, message):
    import ml_collections

    config = smoke(data_dir)
    for key, value in overrides.items():
        if isinstance(value, dict):
            value = ml_collections.ConfigDict(value)
        *parents, leaf = key.split(".")
        node = config
        for p in parents:
            node = node[p]
        node[leaf] = value
    with pytest.raises(ConfigError, match=message):
        train_and_evaluate(config, tmp_path / "bad")
    assert not (tmp_path / "bad").exists(), "a bad config must not create the workdir"


def test_workdir_of_another_config_is_refused_and_kept(finished_smoke_run, smoke_data_dir, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(finished_smoke_run[0], workdir)  # a finished smoke run (conftest), copied
    before = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    with pytest.raises(WorkdirMismatchError, match="model.emb_dim"):
        train_and_evaluate(smoke(smoke_data_dir, **{"model.emb_dim": 48}), workdir)
    after = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    assert after == before, "a refused run must leave the workdir untouched"


def test_unreadable_data_dir_is_a_clear_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        train_and_evaluate(smoke(not_a_dir), tmp_path / "run")


def test_cli_reports_config_errors_without_traceback(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lra.train",
            f"--config={REPO}/configs/listops_transformer.py:smoke",
            f"--workdir={tmp_path / 'w'}",
            "--config.model.num_heads=3",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2
    assert "not divisible by num_heads" in out.stderr and "Traceback" not in out.stderr


def test_sigterm_saves_checkpoint_and_rerun_resumes(data_dir, tmp_path):
    """SIGTERM at the first logged step (10): a checkpoint, exit 143; the rerun resumes from it and
    finishes (1,000 steps: the signal lands hundreds of steps before the end; both children read the
    test run's compilation cache, conftest.cached_child_env, so they load the smoke run's compiled
    programs when a test process has compiled them)."""
    from conftest import cached_child_env

    workdir = tmp_path / "term"
    steps = dict(num_train_steps=1000, eval_every=500, checkpoint_every=500, log_every=10)
    cmd = [
        sys.executable,
        "-m",
        "lra.train",
        f"--config={REPO}/configs/listops_transformer.py:smoke",
        f"--workdir={workdir}",
        f"--config.data_dir={data_dir}",
    ] + [f"--config.{k}={v}" for k, v in steps.items()]
    env = cached_child_env()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = workdir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.stat().st_size > 0:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.01)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-1000:]
    assert "Rerun the same command to resume" in stderr
    from lra.training.checkpoints import Checkpoints

    saved = Checkpoints(workdir).latest_step("latest")
    assert saved is not None and 0 < saved < 1000
    rerun = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"resuming at step {saved}" in rerun.stdout + rerun.stderr
    assert json.loads((workdir / "result.json").read_text())["num_train_steps"] == 1000


@pytest.mark.parametrize(
    "override, message",
    [
        ("--config.modle.num_layers=2", "config has no field 'modle'; did you mean model?"),
        ("--config.model.mem=16", "model has no field 'mem'"),
        ("--config.batch_size=abc", "batch_size must be an integer, got 'abc'"),
    ],
)
def test_cli_override_errors_are_one_clear_line(tmp_path, override, message):
    """Issue 39 point 5: one line naming the field and the nearest names; no escaped quotes or \\n."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lra.train",
            f"--config={REPO}/configs/listops_transformer.py:smoke",
            f"--workdir={tmp_path / 'w'}",
            override,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr and "\\\\" not in out.stderr and "\\n" not in out.stderr
    assert not (tmp_path / "w").exists()


def test_cli_family_option_as_a_field_names_the_short_form(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lra.train",
            f"--config={REPO}/configs/listops_convluna.py:smoke",
            f"--workdir={tmp_path / 'w'}",
            "--config.model.mem=16",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "listops_convluna.py:smoke,mem=16" in out.stderr


def test_cli_help_lists_the_presets_and_exits_0():
    out = subprocess.run(
        [sys.executable, "-m", "lra.train", "--help"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    from lra.defaults import PRESETS

    assert out.returncode == 0 and ", ".join(PRESETS) in out.stdout and "laptop" in PRESETS
    assert "start_over" in out.stdout


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--help"], 0, "paper, cpu, laptop, smoke"),
        ([], 2, "error: --config is required"),
        (["--config=configs/listops_transformr.py:smoke"], 2, "did you mean configs/listops_transformer.py"),
        (["--config=configs/listops_transformer.py:smoke", "--wrkdir=x"], 2, "error: Unknown command line flag"),
        (["--config=configs/listops_transformer.py:smoke", "extra"], 2, "error: unexpected arguments: extra"),
    ],
)
def test_cli_answers_help_and_argument_errors_before_importing_jax(tmp_path, args, code, message):
    """Issue 51: ``--help`` and a bad flag or config path cost no jax import (6-11 s before): run
    with a ``jax`` that exits 99 when imported, the command answers as usual."""
    fake = tmp_path / "fake" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit(99)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(REPO)]))
    out = subprocess.run(
        [sys.executable, "-m", "lra.train", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == code and message in out.stdout + out.stderr, out.stdout[-500:] + out.stderr[-1500:]


def test_cli_config_path_from_another_folder_says_to_run_from_the_root(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "lra.train", "--config=configs/listops_transformer.py:smoke"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"run from there (cd {REPO})" in out.stderr and "Traceback" not in out.stderr


def test_a_family_option_as_its_config_field_is_the_option_after_the_colon():
    """Issue 39 point 5 / 40 point 2: memory size set as a --config field, model.attention_kwargs.memory_size,
    builds exactly the config of ``:...,memory_size=8`` (the variant's name and workdir follow it)."""
    from lra.config_args import config_from_args, split_config_args

    spec = f"{REPO}/configs/listops_convluna.py"
    argv = ["lra.train", f"--config={spec}:cpu", "--config.model.attention_kwargs.memory_size=8", "--config.seed=1"]
    got, overrides, rest = split_config_args(argv)
    assert (got, overrides, rest) == (
        f"{spec}:cpu",
        [("model.attention_kwargs.memory_size", "8"), ("seed", "1")],
        ["lra.train"],
    )
    short = config_from_args(f"{spec}:cpu,memory_size=8", [("seed", "1")])
    assert config_from_args(got, overrides).to_dict() == short.to_dict() and short.variant == "ConvLuna-8"
    aliased = split_config_args(["lra.train", "--config", spec, "--config.model.attention_kwargs.mem", "4"])
    assert config_from_args(aliased[0], aliased[1]).to_dict() == config_from_args(f"{spec}:mem=4").to_dict()
    with pytest.raises(ValueError, match="'clusters' is not an option of attention 'convluna'"):
        config_from_args(spec, [("model.attention_kwargs.clusters", "8")])


def test_a_very_deep_model_says_it_is_tracing_before_the_long_silence(data_dir, capsys):
    """Issue 52 O10: num_layers=100000 traced for minutes without a word; past DEEP_MODEL_BLOCKS the
    run says what it is doing first (and a normal depth prints nothing extra)."""
    from lra.training.checks import DEEP_MODEL_BLOCKS, prepare

    prepare(smoke(data_dir), [])
    assert "tracing a model" not in capsys.readouterr().err
    prepare(smoke(data_dir, **{"model.num_layers": DEEP_MODEL_BLOCKS + 1}), [])
    assert f"tracing a model of {DEEP_MODEL_BLOCKS + 1:,} blocks" in capsys.readouterr().err
