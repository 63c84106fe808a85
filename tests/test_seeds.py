"""Several seeds in one program (--config.seeds): each seed is the single-seed run, file for file.

Tolerance: seed k of a vmapped program runs the same operations on the same batches as the
single-seed run, but XLA compiles batched (vmapped) matmuls and reductions into other kernels
whose sums may be ordered differently. Losses therefore agree to float32 rounding compounded
over the steps (rtol 1e-4 here), not bitwise.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

from lra.errors import RunStateError
from lra.training import NonFiniteLossError, train_and_evaluate
from lra.training import loop as loop_module
from lra.training.checkpoints import Checkpoints
from lra.training.checks import ConfigError, validate_config
from lra.training.runs import run_seeds, seed_config, seed_workdirs
from test_run_safety import cli, run_env, snapshot
from test_train import REPO, assert_saved_states_finite, smoke

RTOL = 1e-4
SAME_EXACT = ("best_step", "num_train_steps", "num_params", "seed", "task", "variant")


@pytest.fixture
def data_dir(smoke_data_dir) -> Path:
    return smoke_data_dir


def bucketed(data_dir: Path, **overrides):
    """The smoke config with length buckets, so seeds draw different batch lengths."""
    return smoke(data_dir, **{"data.buckets": (24, 40), **overrides})


def records(workdir: Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def files(workdir: Path) -> set[str]:
    """The run's files, checkpoints named down to their step folders."""
    names = set()
    for p in workdir.rglob("*"):
        rel = p.relative_to(workdir)
        if rel.parts[0] == "checkpoints":
            names.add("/".join(rel.parts[:3]))
        elif rel.parts[0] != "tensorboard" and p.is_file():
            names.add(str(rel))
    return names


def assert_same_run(a: Path, b: Path) -> None:
    """Two workdirs hold the same run: files, config, metrics (to RTOL) and result."""
    assert files(a) == files(b)
    assert json.loads((a / "config.json").read_text()) == json.loads((b / "config.json").read_text())
    ra, rb = records(a), records(b)
    assert [(r["step"], r["split"]) for r in ra] == [(r["step"], r["split"]) for r in rb]
    for x, y in zip(ra, rb, strict=False):
        for key in ("loss", "accuracy", "learning_rate"):
            if key in x:
                assert y[key] == pytest.approx(x[key], rel=RTOL, abs=1e-6), (x, y)
    res_a, res_b = (json.loads((w / "result.json").read_text()) for w in (a, b))
    assert {k: res_a[k] for k in SAME_EXACT} == {k: res_b[k] for k in SAME_EXACT}
    for key in ("best_val_accuracy", "test_accuracy", "test_loss"):
        assert res_b[key] == pytest.approx(res_a[key], rel=RTOL, abs=1e-6)


def test_seeds_option_and_workdirs(data_dir, tmp_path):
    config = smoke(data_dir)
    assert run_seeds(config) == (0,)
    config.seeds = (3, 1)
    assert run_seeds(config) == (3, 1)
    assert seed_workdirs(config, tmp_path / "w") == [tmp_path / "w" / "seed3", tmp_path / "w" / "seed1"]
    assert [str(p) for p in seed_workdirs(config, None)] == [
        "runs/listops_transformer_smoke/seed3",
        "runs/listops_transformer_smoke/seed1",
    ]
    one = seed_config(config, 1)
    assert (one.seed, tuple(one.seeds)) == (1, ())
    assert seed_workdirs(one, tmp_path / "w") == [tmp_path / "w"]  # one seed: --workdir is its workdir


@pytest.mark.parametrize("seeds, message", [((0, 0), "twice"), ((0, -1), r"\[0, 2\^31\)"), ((0, 1.5), "integers")])
def test_bad_seeds_are_refused_before_anything_runs(data_dir, tmp_path, seeds, message):
    config = smoke(data_dir, seeds=seeds)
    with pytest.raises(ConfigError, match=message):
        validate_config(config)
    with pytest.raises(ConfigError, match=message):
        train_and_evaluate(config, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


@pytest.fixture
def bundle(finished_bundle, tmp_path_factory) -> Path:
    """Seeds 0 and 1 in one program (bucketed smoke config, 6 steps): this test's copy of the shared run."""
    import shutil

    root = tmp_path_factory.mktemp("bundle") / "whole"
    shutil.copytree(finished_bundle[0], root)
    return root


def test_vmapped_seed_equals_its_single_seed_run(bundle, data_dir, tmp_path):
    # seed 0 is the plain single-seed run; seed 1 shares seed 0's bucket order, as its config says
    assert json.loads((bundle / "seed1" / "config.json").read_text())["data"]["bucket_order_seed"] == 0
    for seed, order in ((0, -1), (1, 0)):
        train_and_evaluate(
            bucketed(data_dir, seed=seed, **{"data.bucket_order_seed": order}), tmp_path / f"single{seed}"
        )
        assert_same_run(tmp_path / f"single{seed}", bundle / f"seed{seed}")


def test_bucket_order_is_shared_and_examples_are_each_seeds_own(data_dir):
    from lra.data import load_task
    from lra.data.batching import TrainBatches

    config = bucketed(data_dir)
    train = load_task(config).train
    own = [TrainBatches(train, 8, s, config.data.buckets, 64) for s in (0, 1)]
    shared = TrainBatches(train, 8, 1, config.data.buckets, 64, order_seed=0)
    steps = range(3 * own[0].steps_per_epoch)
    assert any(own[0].plan(t)[1] != own[1].plan(t)[1] for t in steps)  # own orders differ
    assert all(own[0].plan(t)[1] == shared.plan(t)[1] for t in steps)  # a shared order is the same
    assert any(not np.array_equal(own[0].plan(t)[0], shared.plan(t)[0]) for t in steps)  # its examples are not
    # per epoch, seed 1 sees the same examples with either order
    for epoch in range(2):
        epoch_steps = range(epoch * own[1].steps_per_epoch, (epoch + 1) * own[1].steps_per_epoch)
        assert sorted(np.concatenate([own[1].plan(t)[0] for t in epoch_steps])) == sorted(
            np.concatenate([shared.plan(t)[0] for t in epoch_steps])
        )


def test_rerun_of_a_finished_bundle_changes_nothing(bundle, data_dir):
    before = {s: snapshot(bundle / f"seed{s}") for s in (0, 1)}
    again = train_and_evaluate(bucketed(data_dir, seeds=(0, 1)), bundle)
    assert [r["seed"] for r in again] == [0, 1]
    assert {s: snapshot(bundle / f"seed{s}") for s in (0, 1)} == before


@pytest.mark.slow  # two bundle runs
def test_a_finished_seed_is_skipped_and_the_others_train(bundle, data_dir, tmp_path):
    import shutil

    shutil.copytree(bundle / "seed1", tmp_path / "seed1")  # seed 1 finished, seeds 0 and 2 not
    results = train_and_evaluate(bucketed(data_dir, seeds=(0, 1, 2)), tmp_path)
    assert [r["seed"] for r in results] == [0, 1, 2]
    assert_same_run(bundle / "seed0", tmp_path / "seed0")


def test_nan_in_one_seed_stops_it_alone(data_dir, tmp_path, monkeypatch, capsys, finished_smoke_run):
    """Seed 1's weights turn NaN after step 5: it stops with its step-3 checkpoint, seed 0 finishes."""
    real = loop_module.make_steps

    def poisoned(*args, **kwargs):
        train, evaluate = real(*args, **kwargs)

        def train_poisoned(state, batch):
            state, metrics = train(state, batch)
            if int(state["step"][0]) == 5:
                state["params"] = jax.tree.map(lambda x: x.at[1].set(np.nan), state["params"])
            return state, metrics

        return train_poisoned, evaluate

    monkeypatch.setattr(loop_module, "make_steps", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"seed 1: training loss became nan at step 6.*step 3") as e:
        train_and_evaluate(smoke(data_dir, seeds=(0, 1)), tmp_path)
    assert "The other seeds finished" in str(e.value) and "seed0" in str(e.value)
    assert "error: seed 1:" in capsys.readouterr().err
    assert (tmp_path / "seed0" / "result.json").exists() and not (tmp_path / "seed1" / "result.json").exists()
    saved = assert_saved_states_finite(tmp_path / "seed1")
    assert max(s for k, s in saved if k == "latest") == 3
    monkeypatch.setattr(loop_module, "make_steps", real)
    assert_same_run(finished_smoke_run[0], tmp_path / "seed0")  # the single-seed run smoke(data_dir, seed=0)


@pytest.mark.slow
def test_every_seed_diverging_is_one_line_and_never_says_the_others_go_on(data_dir, tmp_path, monkeypatch, capsys):
    """Issue 52 N2: every seed's weights NaN in one step: no "the other seeds go on", one short line."""
    real = loop_module.make_steps

    def poisoned(*args, **kwargs):
        train, evaluate = real(*args, **kwargs)

        def train_poisoned(state, batch):
            state, metrics = train(state, batch)
            if int(state["step"][0]) == 5:
                state["params"] = jax.tree.map(lambda x: x * np.nan, state["params"])
            return state, metrics

        return train_poisoned, evaluate

    monkeypatch.setattr(loop_module, "make_steps", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"every seed stopped: seed 0: .*; seed 1: .*Lower") as e:
        train_and_evaluate(smoke(data_dir, seeds=(0, 1)), tmp_path)
    assert "go on" not in capsys.readouterr().err
    assert str(e.value).count("Lower --config.learning_rate") == 1 and len(str(e.value)) < 700


def test_seeds_without_a_common_checkpoint_are_refused(bundle, data_dir, tmp_path):
    import shutil

    shutil.copytree(bundle / "seed0", tmp_path / "seed0")
    (tmp_path / "seed0" / "result.json").unlink()
    shutil.rmtree(tmp_path / "seed0" / "checkpoints" / "latest" / "3")  # seed 0 at step 6, seed 1 fresh
    before = snapshot(tmp_path)
    with pytest.raises(
        RunStateError, match=r"different steps.*seed0 at step 6.*seed1 at step 0.*--config.seed=0 --workdir=[^ ]*seed0"
    ):
        train_and_evaluate(bucketed(data_dir, seeds=(0, 1)), tmp_path)
    assert snapshot(tmp_path) == before


def _bundle_cli(workdir: Path, data_dir: Path, *extra: str) -> list[str]:
    return cli(
        workdir,
        data_dir,
        "--config.seeds=0,1",
        "--config.num_train_steps=60",
        "--config.eval_every=10",
        "--config.checkpoint_every=10",
        "--config.log_every=5",
        *extra,
    )


@pytest.mark.slow
def test_killed_bundle_resumes_and_ends_like_an_uninterrupted_one(data_dir, tmp_path):
    """SIGKILL once both seeds have saved step 20; if both seeds' newest checkpoints are the same
    step, seed 1's is deleted (as a kill between the two seeds' saves leaves them): the rerun
    resumes both seeds from one common step and ends exactly like an uninterrupted run."""
    import shutil
    import time

    whole = subprocess.run(
        _bundle_cli(tmp_path / "whole", data_dir), capture_output=True, text=True, cwd=REPO, env=run_env(), timeout=600
    )
    assert whole.returncode == 0, whole.stderr[-3000:]

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        _bundle_cli(killed, data_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=run_env()
    )
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if all((killed / f"seed{s}" / "checkpoints" / "latest" / "20").is_dir() for s in (0, 1)):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (killed / "seed0" / "result.json").exists(), "killed too late: the run had finished"
    newest = [Checkpoints(killed / f"seed{s}").newest_intact("latest")[0] for s in (0, 1)]
    if newest[0] == newest[1]:
        shutil.rmtree(killed / "seed1" / "checkpoints" / "latest" / str(newest[1]))
        newest[1] -= 10
    resumed_at = min(newest)

    rerun = subprocess.run(
        _bundle_cli(killed, data_dir), capture_output=True, text=True, cwd=REPO, env=run_env(), timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming at step {resumed_at}" in rerun.stdout
    for seed in (0, 1):
        a, b = records(tmp_path / "whole" / f"seed{seed}"), records(killed / f"seed{seed}")
        strip = lambda rs: [{k: v for k, v in r.items() if k != "steps_per_second"} for r in rs]  # noqa: E731
        assert strip(a) == strip(b), f"seed {seed}: the resumed run's metrics differ"
        ra, rb = (json.loads((w / f"seed{seed}" / "result.json").read_text()) for w in (tmp_path / "whole", killed))
        keys = ("best_val_accuracy", "best_step", "test_accuracy", "test_loss")
        assert {k: ra[k] for k in keys} == {k: rb[k] for k in keys}
    assert Checkpoints(killed / "seed1").steps("latest") == [50, 60]


def test_the_seeds_are_an_argument_of_the_compiled_programs_not_constants(data_dir):
    """Runs that differ only in their seeds lower to the same programs (init, train, evaluate), so the
    persistent compilation cache serves a rerun with another seed; and the keys they are given differ."""
    import jax.numpy as jnp

    from lra.data import task_shapes
    from lra.model import build_model
    from lra.training import hosts
    from lra.training.step import make_init, make_optimizer, make_steps

    config = smoke(data_dir)
    model = build_model(config.model, *task_shapes(config.task))
    tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
    mesh, length = hosts.data_mesh(), config.model.max_len
    batch = {
        "inputs": jax.ShapeDtypeStruct((2, config.batch_size, length), jnp.int32),
        "labels": jax.ShapeDtypeStruct((2, config.batch_size), jnp.int32),
        "weights": jax.ShapeDtypeStruct((2, config.batch_size), jnp.float32),
    }
    texts, keys = [], []
    for seeds in ((0, 1), (3, 7)):
        init = make_init(model, tx, seeds, jnp.zeros((1, length), jnp.int32), hosts.replicated(mesh))
        train, evaluate = make_steps(model, tx, config, mesh, seeds)
        state = jax.eval_shape(init)
        texts.append(
            [
                init.lower().as_text(),
                train.lower(state, batch).as_text(),
                evaluate.lower(
                    state["params"], {k: jax.ShapeDtypeStruct(v.shape[1:], v.dtype) for k, v in batch.items()}
                ).as_text(),
            ]
        )
        keys.append(train.keys_Sx2)
    assert texts[0] == texts[1]
    assert not np.array_equal(keys[0], keys[1])


def test_a_seeded_function_traced_by_eval_shape_still_runs():
    """``jax.eval_shape(init)`` (preflight, the step benchmark) traces Seeded's placement of the keys: the
    tracer must not be kept for the calls after it."""
    from lra.training import hosts
    from lra.training.step import Seeded

    keys = np.arange(4, dtype=np.uint32).reshape(2, 2)
    f = Seeded(jax.jit(lambda x, k: x + k.sum()), keys, hosts.replicated(hosts.data_mesh()))
    assert jax.eval_shape(f, np.float32(1.0)).shape == ()
    assert float(f(np.float32(1.0))) == 7.0
    assert float(f.bind(f.lower(np.float32(1.0)).compile())(np.float32(2.0))) == 8.0
