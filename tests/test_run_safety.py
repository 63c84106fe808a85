"""A run's results are never silently lost or wrong: one test per defect of issue 13.

Most tests copy one finished smoke run (module fixture) and damage the copy.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from lra.errors import (
    EXIT_CORRUPT,
    EXIT_INVALID,
    EXIT_LOCKED,
    EXIT_STORAGE,
    NonFiniteLossError,
    RunStateError,
    StorageError,
    WorkdirLockedError,
    exit_code,
)
from lra.train import train_and_evaluate
from lra.training.checkpoints import Checkpoints, CorruptCheckpointError
from lra.training.checks import ConfigError, validate_config
from lra.training.run_files import MetricsLog, RunFileError, WorkdirLock, check_workdir, config_to_dict, result_problem
from test_checkpoints import flip_bit
from test_train import REPO, assert_saved_states_finite, smoke

# result.json fields that are the same in every run of one config (the rest are wall-clock times)
SAME = ("best_val_accuracy", "best_step", "test_accuracy", "test_loss", "num_train_steps", "num_params")


@pytest.fixture
def data_dir(smoke_data_dir) -> Path:
    return smoke_data_dir


@pytest.fixture
def finished(finished_smoke_run) -> tuple[Path, dict]:
    """A finished 6-step smoke run (checkpoints at 3 and 6; tests/conftest.py)."""
    return finished_smoke_run


def copy_of(finished, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(finished[0], target)
    return target


def snapshot(workdir: Path) -> dict[Path, bytes]:
    """Every file's bytes, the lock file aside (it names its last holder)."""
    return {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file() and p.name != ".lock"}


def same_result(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in SAME)


def cli(workdir: Path, data_dir: Path, *args: str) -> list[str]:
    """``python -m lra.train`` on the smoke config in ``workdir``."""
    return [
        sys.executable,
        "-m",
        "lra.train",
        f"--config={REPO}/configs/listops_transformer.py:smoke",
        f"--workdir={workdir}",
        f"--config.data_dir={data_dir}",
        *args,
    ]


def run_env() -> dict:
    """This checkout's lra first, whatever is installed; the test run's compiled programs are read, never
    written (conftest.cached_child_env: a child may be killed at any moment)."""
    from conftest import cached_child_env

    return cached_child_env(dict(os.environ, PYTHONPATH=str(REPO)))


# 1 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("removed", ["checkpoints/latest", "checkpoints"])
def test_run_without_resumable_checkpoint_is_refused_untouched(finished, data_dir, tmp_path, removed):
    workdir = copy_of(finished, tmp_path)
    shutil.rmtree(workdir / removed)
    before = snapshot(workdir)
    with pytest.raises(RunStateError, match=r"metrics.jsonl.*result.json.*(is missing|no checkpoint).*--start_over"):
        train_and_evaluate(smoke(data_dir), workdir)
    assert snapshot(workdir) == before
    if removed == "checkpoints":  # the explicit flag starts over, and the rerun is the same run
        assert same_result(train_and_evaluate(smoke(data_dir), workdir, start_over=True), finished[1])


# 2 -------------------------------------------------------------------------------------------
def test_flipped_bit_in_best_is_an_error_naming_it(finished, data_dir, tmp_path):
    workdir = copy_of(finished, tmp_path)
    (workdir / "result.json").unlink()
    best = Checkpoints(workdir).latest_step("best")
    data_file = max((workdir / "checkpoints" / "best" / str(best) / "state").rglob("*"), key=lambda p: p.stat().st_size)
    flip_bit(data_file, np.random.default_rng(2))
    with pytest.raises(CorruptCheckpointError, match=f"checkpoints/best/{best} is corrupt") as e:
        train_and_evaluate(smoke(data_dir), workdir)
    assert exit_code(e.value) == EXIT_CORRUPT
    assert not (workdir / "result.json").exists()


def test_flipped_bit_in_latest_falls_back_to_previous_and_says_so(finished, data_dir, tmp_path, capsys):
    workdir = copy_of(finished, tmp_path)
    (workdir / "result.json").unlink()
    flip_bit(workdir / "checkpoints" / "latest" / "6" / "state" / "_METADATA", np.random.default_rng(3))
    result = train_and_evaluate(smoke(data_dir), workdir)
    err = capsys.readouterr().err
    assert "checkpoints/latest/6 is corrupt" in err and "previous intact checkpoint" in err and "latest/3" in err
    assert same_result(result, finished[1])
    assert (workdir / "checkpoints" / "latest" / "6.corrupt").is_dir()


def test_all_latest_damaged_is_refused_untouched(finished, data_dir, tmp_path):
    workdir = copy_of(finished, tmp_path)
    for step in (3, 6):
        flip_bit(workdir / "checkpoints" / "latest" / str(step) / "integrity.json", np.random.default_rng(step))
    before = snapshot(workdir)
    with pytest.raises(CorruptCheckpointError, match="no intact checkpoint"):
        train_and_evaluate(smoke(data_dir), workdir)
    assert snapshot(workdir) == before


# 3 -------------------------------------------------------------------------------------------
def test_nan_weights_are_never_checkpointed_and_the_last_good_step_is_named(data_dir, tmp_path):
    config = smoke(data_dir, learning_rate=1e6, checkpoint_every=1, eval_every=20, num_train_steps=20)
    with pytest.raises(NonFiniteLossError, match="NaN/Inf in the update of step") as e:
        train_and_evaluate(config, tmp_path / "nan")
    # every saved state is finite, so a rerun resumes from a good one, never into NaN
    saved = assert_saved_states_finite(tmp_path / "nan")
    step = int(str(e.value).split("last good checkpoint, step ")[1].split(",")[0])
    assert ("latest", step) in saved and step == max(s for k, s in saved if k == "latest")
    assert not (tmp_path / "nan" / "result.json").exists()


def test_nan_validation_loss_selects_nothing(data_dir, tmp_path, monkeypatch):
    from lra.training import loop

    real = loop.evaluate_split

    def poisoned(eval_step, params, split, config, sharding):
        out = real(eval_step, params, split, config, sharding)
        return [{"accuracy": 0.5, "loss": float("nan")}] * len(out) if split.name == "validation" else out

    monkeypatch.setattr(loop, "evaluate_split", poisoned)
    with pytest.raises(NonFiniteLossError, match="validation loss became nan at step 3"):
        train_and_evaluate(smoke(data_dir), tmp_path / "run")
    assert Checkpoints(tmp_path / "run").steps("best") == []


# 4 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [
        ("learning_rate", float("nan")),
        ("learning_rate", float("inf")),
        ("weight_decay", float("nan")),
        ("grad_clip_norm", float("nan")),
    ],
)
def test_non_finite_hyperparameters_are_config_errors(data_dir, field, value):
    with pytest.raises(ConfigError, match=f"config.{field} must be a finite number"):
        validate_config(smoke(data_dir, **{field: value}))


# 5 -------------------------------------------------------------------------------------------
def test_second_process_on_a_workdir_is_refused_naming_the_holder(data_dir, tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    with WorkdirLock(workdir):
        with pytest.raises(WorkdirLockedError, match=f"pid {os.getpid()} on host") as e:
            train_and_evaluate(smoke(data_dir), workdir)
    assert exit_code(e.value) == EXIT_LOCKED
    assert [p.name for p in workdir.iterdir()] == [".lock"]


def test_lock_of_a_killed_process_is_free(tmp_path):
    code = (
        "from lra.training.run_files import WorkdirLock; import time; "
        f"WorkdirLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=run_env())
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(WorkdirLockedError, match=f"pid {proc.pid}"):
        WorkdirLock(tmp_path).acquire()
    proc.kill()
    proc.wait()
    WorkdirLock(tmp_path).acquire().release()


# 6 -------------------------------------------------------------------------------------------
def test_model_that_cannot_fit_is_refused_before_allocating(data_dir, tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"cannot fit: training needs at least [\d.]+ GiB.*max_len=1000000000"):
        train_and_evaluate(smoke(data_dir, **{"model.max_len": 1_000_000_000}), tmp_path / "run")
    assert time.perf_counter() - t0 < 60 and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"model.max_len": 1_000_000_000, "data.max_len": 1_000_000_000}, r"cannot fit: .*model.max_len=1000000000"),
        (
            {"data.num_train": 10**12, "data.max_len": 2000, "model.max_len": 2000},
            r"ListOps set cannot be stored: .* = 1000000000000/32/32\).*Nothing was generated",
        ),
    ],
)
def test_sizes_that_cannot_work_are_refused_before_generating_data(tmp_path, overrides, message):
    """Issue 38 TR2/TR4: a billion positions or examples: exit 2 before any data is generated, the data
    folder and the workdir left as they were (nothing in either)."""
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match=message) as refused:  # ConfigError, DataError: exit 2
        train_and_evaluate(smoke(tmp_path / "data", **overrides), tmp_path / "run")
    assert exit_code(refused.value) == EXIT_INVALID
    assert list((tmp_path / "data").iterdir()) == [] and not (tmp_path / "run").exists()


# 7 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("empty", ["basic_val.tsv", "basic_test.tsv"])
def test_empty_split_is_an_error_naming_the_file(data_dir, tmp_path, empty):
    from lra.data import DataError, load_task
    from lra.data.listops import HEADER, SPLIT_FILES

    load_task(smoke(data_dir))  # generates the smoke set (cached)
    generated = next((data_dir / "listops_generated").glob("*"))
    release = tmp_path / "data" / "lra_release" / "listops-1000"
    release.mkdir(parents=True)
    for name in SPLIT_FILES.values():
        shutil.copy(generated / name, release / name)
    (release / empty).write_text(HEADER + "\n")
    with pytest.raises(DataError, match=f"{empty}.*empty split"):
        train_and_evaluate(smoke(tmp_path / "data", **{"data.source": "release"}), tmp_path / "run")
    assert not (tmp_path / "run").exists()


# 8 -------------------------------------------------------------------------------------------
def test_invalid_result_json_is_regenerated_from_best(finished, data_dir, tmp_path, capsys):
    workdir = copy_of(finished, tmp_path)
    text = (workdir / "result.json").read_text()
    (workdir / "result.json").write_text(text[: len(text) // 2])  # "{}" is refused alike (below)
    result = train_and_evaluate(smoke(data_dir), workdir)
    assert "not a valid result" in capsys.readouterr().err
    assert same_result(result, finished[1])
    assert json.loads((workdir / "result.json").read_text()) == result


def test_result_validation_names_the_field(finished, tmp_path):
    path = tmp_path / "result.json"
    good = dict(finished[1])
    for broken, problem in [
        ({}, "'task' is missing"),
        ({"test_accuracy": 1.5}, "'test_accuracy' is invalid"),
        ({"best_step": 99}, "best_step 99 > num_train_steps"),
    ]:
        path.write_text(json.dumps({**good, **broken} if broken else {}))
        assert problem in result_problem(path)
    path.write_text(json.dumps(good))
    assert result_problem(path) is None


# 9 -------------------------------------------------------------------------------------------
def test_torn_last_metrics_line_is_dropped_other_bad_lines_are_errors(tmp_path, capsys):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write([{"step": 1, "split": "train"}, {"step": 2, "split": "train"}])
    with open(log.path, "a") as f:
        f.write('{"step": 3, "spl')  # a kill during the append
    log.truncate_after(5)
    assert log.read() == [{"step": 1, "split": "train"}, {"step": 2, "split": "train"}]
    assert "metrics.jsonl line 3 is cut short" in capsys.readouterr().err
    log.path.write_text('{"step": 1, "split": "train"}\n{"step": 2 "split"\n{"step": 3, "split": "train"}\n')
    with pytest.raises(RunFileError, match="metrics.jsonl line 2"):
        log.read()


def test_malformed_config_json_is_an_error_naming_file_and_line(tmp_path):
    from lra.defaults import make_config

    config = make_config("listops", "softmax", "smoke")
    text = json.dumps(config_to_dict(config), indent=2)
    (tmp_path / "config.json").write_text(text[: len(text) // 2])
    with pytest.raises(RunFileError, match=r"config.json is not a valid config \(line \d+ column"):
        check_workdir(tmp_path, config)


# 10 ------------------------------------------------------------------------------------------
def _one_error_line(out: subprocess.CompletedProcess) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr[-3000:]
    return errors[0]


def test_cli_errors_are_one_line_with_the_class_exit_code(data_dir, tmp_path):
    unknown = subprocess.run(
        cli(tmp_path / "w", data_dir, "--config.model.nope=1"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=run_env(),
    )
    assert unknown.returncode == EXIT_INVALID and "--config.model.nope" in _one_error_line(unknown)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    is_file = subprocess.run(
        cli(a_file, data_dir), capture_output=True, text=True, timeout=300, cwd=REPO, env=run_env()
    )
    assert is_file.returncode == EXIT_STORAGE and f"{a_file} is a file" in _one_error_line(is_file)
    assert a_file.read_text() == "x"


@pytest.mark.parametrize(
    "config, message",
    [
        (
            "listops_convluna.py:smoke,mem=1.5",
            "option 'mem=1.5' of attention 'convluna': memory_size must be an integer, got 1.5",
        ),
        ("listops_convluna.py:smoke,mem=abc", "memory_size must be an integer, got 'abc'"),
        ("listops_convlun.py:smoke", "listops_convlun.py: no such file; did you mean configs/listops_convluna.py"),
    ],
)
def test_bad_option_values_and_config_paths_are_one_error_line_exit_2(data_dir, tmp_path, config, message):
    """Issue 26 U13-U15: a float or word where a family wants an integer, and a misspelt config
    file, are bad input (exit 2), one line naming the option or file, not a traceback (exit 1,
    divergence's code) or a write failure (exit 4)."""
    args = [
        sys.executable,
        "-m",
        "lra.train",
        f"--config=configs/{config}",
        f"--workdir={tmp_path / 'w'}",
        f"--config.data_dir={data_dir}",
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO, env=run_env())
    assert out.returncode == EXIT_INVALID, out.stderr[-3000:]
    assert message in _one_error_line(out)
    assert not (tmp_path / "w").exists()


def test_numeric_family_options_are_type_checked():
    from lra.defaults import option_type_problem

    assert option_type_problem("convluna", "memory_size", 16) is None
    assert "integer" in option_type_problem("convluna", "memory_size", 16.0)
    assert "integer" in option_type_problem("convluna", "memory_size", True)
    assert option_type_problem("gated_linear", "gate_bias_init", 1) is None  # a float field takes an int
    assert option_type_problem("agglomerative", "num_classes", None) is None
    assert option_type_problem("convluna", "share_projections", "qko") is None  # not numeric: the family checks
    config = smoke(Path("/nonexistent"))
    config.model.attention_kwargs = {"implementation": "xla"}
    validate_config(config)
    from lra.defaults import make_config

    luna = make_config("listops", "luna", "smoke")
    luna.model.attention_kwargs.memory_size = 2.5
    with pytest.raises(ConfigError, match=r"config.model.attention_kwargs.memory_size must be an integer, got 2.5"):
        validate_config(luna)


def test_failed_metrics_write_is_a_storage_error_and_tensorboard_only_warns(tmp_path, capsys):
    from lra.training.loop import Progress

    with pytest.raises(StorageError, match="cannot write /dev/full: No space left on device") as e:
        MetricsLog(Path("/dev/full")).write([{"step": 1, "split": "train"}])
    assert exit_code(e.value) == EXIT_STORAGE

    progress = Progress(10, 0, tmp_path)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    progress.writers[0].add_scalar = full
    progress.update(1, "train", {"loss": 1.0})
    progress.update(2, "train", {"loss": 1.0})
    progress.close()
    err = capsys.readouterr().err
    assert err.count("TensorBoard logging") == 1 and "No space left on device" in err


def test_a_full_disk_reaching_tensorboard_first_leaves_no_traceback_at_exit(tmp_path):
    """Issue 38 TR1: tensorboardX's event thread fails first (ENOSPC); after the run's own error line
    neither its atexit hook nor its thread prints a traceback: the writers are discarded before the
    main thread can see them gone (a slow discard, as on CI's loaded cores, once let it exit first)."""
    code = (
        "import errno, sys, time\n"
        "from pathlib import Path\n"
        "import tensorboardX.record_writer as rw\n"
        "import lra.training.loop as P\n"
        "from lra.training.loop import Progress\n"
        "discard = P._discard\n"
        "def slow_discard(writer):  # a loaded machine: the event thread is slow to discard\n"
        "    time.sleep(0.5)\n"
        "    discard(writer)\n"
        "P._discard = slow_discard\n"
        "def full(self, *a, **k):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "progress = Progress(10, 0, Path(sys.argv[1]))\n"
        "rw.RecordWriter.write = rw.RecordWriter.flush = full\n"
        "progress.update(1, 'train', {'loss': 1.0})\n"
        "deadline = time.monotonic() + 30\n"
        "while progress.writer is not None and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "progress.update(2, 'train', {'loss': 1.0})\n"
        "progress.close()\n"
        "print('error: cannot write metrics.jsonl: No space left on device', file=sys.stderr)\n"
        "sys.exit(4)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True, timeout=120, env=run_env()
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 4 and len(lines) == 2, proc.stderr
    assert lines[0].startswith("warning: TensorBoard logging") and lines[1].startswith("error: cannot write")


def test_unwritable_workdir_is_a_storage_error(data_dir, tmp_path, monkeypatch):
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == tmp_path / "ro" / "run":
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(StorageError, match=f"cannot write {tmp_path / 'ro' / 'run'}: Permission denied") as e:
        train_and_evaluate(smoke(data_dir), tmp_path / "ro" / "run")
    assert exit_code(e.value) == EXIT_STORAGE


def test_full_disk_is_one_error_line_and_loses_nothing(finished, data_dir, tmp_path):
    """RLIMIT_FSIZE makes writes past a size fail (EFBIG) as on a full disk."""
    workdir = tmp_path / "run"
    steps = ["--config.num_train_steps=6"]

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    out = subprocess.run(
        cli(workdir, data_dir, *steps),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=run_env(),
        preexec_fn=limited,
    )
    assert out.returncode == EXIT_STORAGE, out.stderr[-3000:]
    assert "cannot write" in _one_error_line(out) and not (workdir / "result.json").exists()
    # with space again the same command resumes and ends as the uninterrupted run
    assert same_result(train_and_evaluate(smoke(data_dir), workdir), finished[1])


# 11 ------------------------------------------------------------------------------------------
def test_fewer_steps_than_trained_is_refused_untouched(finished, data_dir, tmp_path):
    workdir = copy_of(finished, tmp_path)
    before = snapshot(workdir)
    with pytest.raises(RunStateError, match="num_train_steps=3 is below the 6 steps"):
        train_and_evaluate(smoke(data_dir, num_train_steps=3), workdir)
    assert snapshot(workdir) == before


# signals -------------------------------------------------------------------------------------
def _signal_at(workdir, data_dir, prefix: str, *signums: int) -> tuple[int, str]:
    """Run the 3000-step smoke CLI, send ``signums`` at the first output line starting with
    ``prefix``, and return (exit code, all output)."""
    proc = subprocess.Popen(
        cli(
            workdir,
            data_dir,
            "--config.num_train_steps=3000",
            "--config.eval_every=1000",
            "--config.checkpoint_every=1000",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=run_env(),
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(prefix):
            for signum in signums:
                proc.send_signal(signum)
            break
    lines += proc.stdout.readlines()
    proc.wait(timeout=300)
    return proc.returncode, "".join(lines)


def test_signal_before_training_and_second_signal_exit_cleanly(data_dir, tmp_path):
    workdir = tmp_path / "run"
    # "ListOps: ..." is printed while the data load, before the first compilation
    code, text = _signal_at(workdir, data_dir, "ListOps:", signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and "Traceback" not in text, text[-3000:]
    assert "interrupted by SIGTERM" in text

    code, text = _signal_at(workdir, data_dir, "step 2 train", signal.SIGINT, signal.SIGINT)
    assert code == 128 + signal.SIGINT and "Traceback" not in text, text[-3000:]
    assert Checkpoints(workdir).newest_intact("latest")[0] is not None


@pytest.mark.parametrize("signalled", [True, False])
def test_a_compile_cut_by_the_stop_signal_saves_and_stops_like_a_signal_during_a_step(
    data_dir, tmp_path, monkeypatch, signalled
):
    """On a GPU, SIGTERM reaches ptxas too (the compiler runs as a child in the signalled process
    group) and the first step's compile fails: that is the signal's stop, not a crash. Without a
    signal the same failure is a real error and propagates."""
    from lra.errors import Interrupted
    from lra.training import loop

    real = loop.make_steps

    def make_steps(*args, **kwargs):
        train_step, eval_step = real(*args, **kwargs)

        def failing(state, batch):
            if signalled:
                os.kill(os.getpid(), signal.SIGTERM)  # the run's handler sets its flag (training)
            raise jax.errors.JaxRuntimeError("INTERNAL: ptxas exited with non-zero error code 15")

        return failing, eval_step

    monkeypatch.setattr(loop, "make_steps", make_steps)
    config = smoke(data_dir, num_train_steps=4, eval_every=2, checkpoint_every=2)
    if not signalled:
        with pytest.raises(jax.errors.JaxRuntimeError, match="ptxas"):
            train_and_evaluate(config, tmp_path / "run")
        return
    with pytest.raises(Interrupted) as stopped:
        train_and_evaluate(config, tmp_path / "run")
    assert stopped.value.signum == signal.SIGTERM and stopped.value.step == 0 and stopped.value.saved
    assert Checkpoints(tmp_path / "run").newest_intact("latest")[0] is not None
    monkeypatch.setattr(loop, "make_steps", real)  # the rerun resumes from it and finishes
    assert train_and_evaluate(config, tmp_path / "run")["num_train_steps"] == 4
