"""The CPU speed settings (lra.cpu_speed) change no logged number, and are recorded.

The tests train the ListOps smoke model for 20 steps in child processes (``python -m lra.train``,
the path users run: the suite's default settings once, jax's default path once, then one child per
other setting) and compare every logged loss and accuracy to the bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lra import cpu_speed

REPO = Path(__file__).resolve().parent.parent


def _train(workdir: Path, data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "lra.train",
        "--config",
        "configs/listops_transformer.py:smoke",
        "--config.num_train_steps=20",
        "--config.log_every=1",
        "--config.eval_every=10",
        "--config.checkpoint_every=10",
        f"--config.data_dir={data_dir}",
        "--workdir",
        str(workdir),
    ]
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GLIBC_TUNABLES", "LRA_FAST_ALLOC_APPLIED", "LD_PRELOAD", "MIMALLOC_PURGE_DELAY")
    }
    return subprocess.run(
        argv, cwd=REPO, env={**base, "JAX_PLATFORMS": "cpu", **env}, capture_output=True, text=True, timeout=600
    )


def _logged(workdir: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["split"], r.get("loss"), r.get("accuracy")) for r in rows]


def _settings(workdir: Path) -> dict:
    return json.loads((workdir / "sessions.jsonl").read_text().splitlines()[0])["speed_settings"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, smoke_data_dir) -> Path:
    workdir = tmp_path_factory.mktemp("speed") / "default"
    done = _train(workdir, smoke_data_dir, {})
    assert done.returncode == 0, done.stderr[-2000:]
    return workdir


@pytest.fixture(scope="module")
def jax_default_run(tmp_path_factory, smoke_data_dir) -> Path:
    """The same run on jax's default path: allocator and threefry settings both off (one child for
    the two tests that compare against it; each checks its own setting was off)."""
    workdir = tmp_path_factory.mktemp("speed") / "off"
    done = _train(workdir, smoke_data_dir, {"LRA_FAST_ALLOC": "0", cpu_speed.THREEFRY_SWITCH: "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    return workdir


@pytest.mark.skipif(not cpu_speed.fast_allocator_wanted({}), reason="the allocator settings are glibc's")
@pytest.mark.slow  # whole runs with and without the settings; the golden runs check the default settings' numbers
def test_fast_allocator_is_on_by_default_and_changes_no_logged_number(default_run, jax_default_run):
    expected = "mimalloc" if cpu_speed.mimalloc_library() else "glibc-tunables"
    assert _settings(default_run)["allocator"] == expected
    assert _settings(default_run)["fast_allocator"] is True
    assert _settings(jax_default_run)["fast_allocator"] is False
    assert _settings(jax_default_run)["allocator"] == "default"
    logged = _logged(default_run)
    assert len([r for r in logged if r[1] == "train"]) == 20
    assert logged == _logged(jax_default_run)
    result = json.loads((default_run / "result.json").read_text())
    assert result["speed_settings"]["allocator"] == expected


# Slow (one more lra.train child): by default the fallback's choice and environment are
# test_without_the_mimalloc_wheel_the_tunables_are_used and
# test_child_environment_adds_the_tunables_once_and_keeps_the_users, and an allocator changing no
# logged number is test_fast_allocator_is_on_by_default_and_changes_no_logged_number.
@pytest.mark.slow
@pytest.mark.skipif(not cpu_speed.fast_allocator_wanted({}), reason="the allocator settings are glibc's")
def test_glibc_tunables_are_the_fallback_and_change_no_logged_number(default_run, tmp_path, smoke_data_dir):
    done = _train(tmp_path / "glibc", smoke_data_dir, {"LRA_FAST_ALLOC": "glibc"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert _settings(tmp_path / "glibc")["allocator"] == "glibc-tunables"
    assert "note:" not in done.stderr  # asked for by name: no advice
    assert _logged(tmp_path / "glibc") == _logged(default_run)


def test_without_the_mimalloc_wheel_the_tunables_are_used(monkeypatch):
    monkeypatch.setattr(cpu_speed, "mimalloc_library", lambda: None)
    env = cpu_speed.child_environment({})
    if cpu_speed.fast_allocator_wanted({}):
        assert cpu_speed.chosen_allocator({}) == "glibc-tunables"
        assert cpu_speed.GLIBC_TUNABLES in env["GLIBC_TUNABLES"] and "LD_PRELOAD" not in env


@pytest.mark.skipif(cpu_speed.mimalloc_library() is None, reason="cmeel-mimalloc is not installed")
def test_child_environment_preloads_mimalloc_once_and_keeps_the_users():
    env = cpu_speed.child_environment({"LD_PRELOAD": "/x/libother.so", "MIMALLOC_PURGE_DELAY": "5"})
    assert env["LD_PRELOAD"] == f"{cpu_speed.mimalloc_library()} /x/libother.so"
    assert env["MIMALLOC_PURGE_DELAY"] == "5"  # a user's own setting wins
    assert cpu_speed.child_environment(env)["LD_PRELOAD"] == env["LD_PRELOAD"]
    assert cpu_speed.child_environment({})["MIMALLOC_PURGE_DELAY"] == "-1"


@pytest.mark.slow  # whole runs with and without the settings; the golden runs check the default settings' numbers
def test_a_run_pinned_after_start_up_logs_what_an_unpinned_one_does(default_run, tmp_path, smoke_data_dir):
    pinned = _train(tmp_path / "pinned", smoke_data_dir, {"LRA_PIN_CORE": str(min(os.sched_getaffinity(0)))})
    assert pinned.returncode == 0, pinned.stderr[-2000:]
    assert "pinned to core" in pinned.stdout + pinned.stderr
    assert _settings(tmp_path / "pinned")["pinned_core"] == str(min(os.sched_getaffinity(0)))
    assert _logged(tmp_path / "pinned") == _logged(default_run)


def test_a_core_the_process_may_not_use_is_refused_before_anything_runs(tmp_path, smoke_data_dir):
    done = _train(tmp_path / "bad", smoke_data_dir, {"LRA_PIN_CORE": "4096"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: LRA_PIN_CORE='4096'")
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow  # whole runs with and without the settings; the golden runs check the default settings' numbers
def test_the_start_commit_is_recorded_once_and_kept_across_resumes(default_run):
    sessions = (default_run / "sessions.jsonl").read_text().splitlines()
    first = json.loads(sessions[0])
    assert first["step"] == 0 and first["argv"][0].endswith("train.py")
    result = json.loads((default_run / "result.json").read_text())
    assert result["git_commit_start"] == first["git_commit"]


def test_child_environment_adds_the_tunables_once_and_keeps_the_users():
    env = cpu_speed.child_environment({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "LRA_FAST_ALLOC": "glibc"})
    if cpu_speed.fast_allocator_wanted(env):
        assert env["GLIBC_TUNABLES"] == f"glibc.malloc.tcache_count=0:{cpu_speed.GLIBC_TUNABLES}"
        assert cpu_speed.child_environment(env)["GLIBC_TUNABLES"] == env["GLIBC_TUNABLES"]
    off = cpu_speed.child_environment({"LRA_FAST_ALLOC": "0"})
    assert "GLIBC_TUNABLES" not in off


_BITS = (
    "import json, jax; from lra import cpu_speed; on = cpu_speed.unroll_threefry_on_cpu(); "
    "k = jax.random.key(3); d, a = jax.random.split(jax.random.fold_in(k, 7)); "
    "keys = jax.vmap(jax.random.key)(jax.numpy.arange(2)); "
    "print(json.dumps([on, cpu_speed.settings()['threefry'], jax.jit(lambda: jax.random.bits(d, (4, "
    "257))).__call__().tolist(), "
    "jax.jit(lambda: jax.random.bernoulli(a, 0.9, (3, 100))).__call__().tolist(), "
    "jax.jit(jax.vmap(lambda k: jax.random.bits(jax.random.fold_in(k, 5), (2, 3, 7)))).__call__(keys).tolist()]))"
)


def test_faster_threefry_lowerings_give_the_same_bits_and_break_loudly_if_jax_moves_them():
    """The one use of jax internals (lra.cpu_speed): if a jax upgrade moves them,
    the one-pass lowering is not in force and this fails."""
    outs = {}
    for value in ("0", "", "1"):
        done = subprocess.run(
            [sys.executable, "-c", _BITS],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "JAX_PLATFORMS": "cpu", cpu_speed.THREEFRY_SWITCH: value},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outs[value] = json.loads(done.stdout.strip().splitlines()[-1])
    assert outs["0"][:2] == [False, "rolled"]
    assert outs[""][:2] == [
        True,
        "one-pass",
    ], "jax moved the threefry lowering: update lra/cpu_speed.py"
    assert outs["1"][:2] == [True, "fused"]
    assert outs["0"][2:] == outs[""][2:] == outs["1"][2:]


@pytest.mark.slow  # whole runs with and without the settings; the golden runs check the default settings' numbers
def test_the_one_pass_threefry_is_the_default_and_changes_no_logged_number(default_run, jax_default_run):
    assert _settings(default_run)["threefry"] == "one-pass"
    assert _settings(jax_default_run)["threefry"] == "rolled"
    assert _logged(jax_default_run) == _logged(default_run)


def test_a_threefry_setting_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="LRA_UNROLLED_THREEFRY"):
        cpu_speed.threefry_mode({cpu_speed.THREEFRY_SWITCH: "fast"})


def test_the_laptop_benchmark_takes_ratios_within_rounds():
    from lra_lab.bench import laptop

    rows = [
        dict(config="c", seeds=1, variant=v, round=r, seed_steps_per_second=x)
        for v, r, x in (("default", 0, 2.0), ("fast", 0, 3.0), ("default", 1, 1.0), ("fast", 1, 2.0))
    ]
    (ratio,) = laptop.ratios(rows)
    assert ratio["ratios"] == [1.5, 2.0] and ratio["median_ratio"] == 1.75


_MASKED_COPY = (
    "import json, os; from lra_lab.experiments import masked_copy as mc; "
    "s = mc.Settings(seq_len=5, num_layers=1, num_heads=2, head_dim=4, mlp_dim=8, batch_size=4, steps=6, "
    "eval_batches=1, log_every=1, variants=('clustered:2',)); run = mc.train_variant(s, 'clustered:2', "
    "lambda line: None); print(json.dumps([len(os.sched_getaffinity(0)), "
    "{k: v for k, v in run.items() if k != 'train_seconds'}]))"
)


# Slow (two masked-copy programs in children): the pinning function it runs (cpu_speed's LRA_PIN_CORE
# after the first compile) stays covered by default by
# test_a_run_pinned_after_start_up_logs_what_an_unpinned_one_does (lra.train pinned, to the bit).
@pytest.mark.slow
def test_masked_copy_pinned_after_its_first_compile_computes_what_an_unpinned_run_does():
    """lra_lab.reproduce --jobs pins the masked-copy program too (LRA_PIN_CORE); in a child, so that the
    test process keeps its cores."""
    core = str(min(os.sched_getaffinity(0)))
    outs = {}
    for pin in ("", core):
        done = subprocess.run(
            [sys.executable, "-c", _MASKED_COPY],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "JAX_PLATFORMS": "cpu", cpu_speed.PIN_VARIABLE: pin},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outs[pin] = json.loads(done.stdout.strip().splitlines()[-1])
    assert outs[core][0] == 1  # pinned: one core left to the whole process
    assert outs[core][1] == outs[""][1]  # every loss of the curve and every accuracy, to the bit


def test_the_laptop_record_states_its_note_and_each_runs_numbers():
    from lra_lab.bench import laptop

    run = dict(
        config="c",
        seeds=1,
        round=0,
        seed_steps_per_second=2.0,
        minor_faults_per_step=10.0,
        system_seconds_per_step=0.01,
        compile_seconds=3.0,
    )
    runs = [dict(run, variant="default"), dict(run, variant="fast", seed_steps_per_second=5.0)]
    record = {
        "command": "python -m lra_lab.bench.laptop",
        "git_commit": "abc",
        "date": "d",
        "machine": "2 CPUs",
        "steps": 9,
        "note": "Shared with two other jobs.",
        "runs": runs,
        "step_costs": {},
        "ratios": laptop.ratios(runs),
        "identical": [],
    }
    text = laptop.markdown(record)
    assert "Shared with two other jobs." in text and "| `c` | 1 | fast | 5.00 | 2.50x |" in text


def _fake_train(result: dict[str, float], fail: bool = False, started: list | None = None) -> Any:
    """A stand-in for laptop._start: a child that writes result.json (its rate: 1 + its pinned core)."""

    def start(config: str, seeds: int, steps: int, env: dict[str, str], workdir: Path) -> subprocess.Popen[str]:
        code = (
            "import json, os, pathlib, sys, time; core = os.environ.get('LRA_PIN_CORE', ''); "
            f"d = pathlib.Path({str(workdir / ('seed0' if seeds > 1 else ''))!r}); d.mkdir(parents=True); "
            f"r = dict({result!r}, steps_per_second=1.0 + float(core or 0)); "
            "(d / 'result.json').write_text(json.dumps(r)); "
            f"sys.exit(3) if {fail} and core == '0' else (time.sleep(30) if {fail} else None)"
        )
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        (started if started is not None else []).append(proc)
        return proc

    return start


def test_a_pair_variant_runs_two_pinned_children_and_sums_their_rates(monkeypatch, tmp_path):
    from lra_lab.bench import laptop

    result = dict(compile_seconds=1.0, train_seconds=2.0, test_loss=0.5, test_accuracy=0.25)
    monkeypatch.setattr(laptop, "_start", _fake_train(result))
    row = laptop.train_once("c", 2, 10, "fast-pair", tmp_path / "pair")
    # cores 0 and 1 each ran once (rates 1 and 2), times 2 seeds
    assert row["processes"] == 2 and row["process_seed_steps_per_second"] == [2.0, 4.0]
    assert row["seed_steps_per_second"] == 6.0 and row["test_results"] == [[0.5, 0.25], [0.5, 0.25]]
    single = laptop.train_once("c", 1, 10, "fast", tmp_path / "one")
    assert single["processes"] == 1 and single["seed_steps_per_second"] == 1.0  # unpinned


def test_a_pair_whose_child_fails_stops_its_partner_and_says_which(monkeypatch, tmp_path):
    from lra_lab.bench import laptop

    result = dict(compile_seconds=1.0, train_seconds=2.0, test_loss=0.5, test_accuracy=0.25)
    children: list[subprocess.Popen[str]] = []
    monkeypatch.setattr(laptop, "_start", _fake_train(result, fail=True, started=children))
    with pytest.raises(RuntimeError, match=r"c \(fast-pair\) exited 3"):
        laptop.train_once("c", 1, 10, "fast-pair", tmp_path)
    assert len(children) == 2 and all(child.poll() is not None for child in children)  # the partner was stopped
