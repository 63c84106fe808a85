"""Issue 52: nothing is written outside a run's folder, and a folder that is not a run is never
deleted (SEC1, SEC2, SEC4, U1; O4, O7 on the way: options refused in one line)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lra.config_args import split_config_args
from lra.defaults import make_config
from lra.errors import EXIT_INVALID, InputError, RunStateError, exit_code
from lra.training.checks import ConfigError, validate_config
from lra.training.provenance import append_session
from lra.training.run_files import (
    WorkdirLock,
    WorkdirMismatchError,
    check_workdir,
    config_to_dict,
    foreign_problem,
)
from lra.training.runs import default_workdir


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """SEC1: `.lock` -> a file elsewhere was truncated and overwritten."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(outside)
    with pytest.raises(RunStateError, match="symlink") as e:
        WorkdirLock(run).acquire()
    assert exit_code(e.value) == EXIT_INVALID
    assert outside.read_text() == "keep me\n"


def test_a_symlinked_sessions_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """SEC2: a symlinked sessions.jsonl had a line appended to the outside file."""
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / "sessions.jsonl").symlink_to(outside)
    with pytest.raises(RunStateError, match="sessions.jsonl is a symlink"):
        append_session(run, 0, {})
    assert outside.read_text() == ""
    (run / "sessions.jsonl").unlink()
    append_session(run, 0, {})  # a plain file is appended to as before
    assert json.loads((run / "sessions.jsonl").read_text())["step"] == 0


def test_a_preset_is_a_known_name_and_the_default_workdir_stays_under_runs(tmp_path: Path) -> None:
    """SEC4: `--config.preset=/../../../x/escape_preset` wrote the run outside runs/."""
    config = make_config("listops", "softmax", "smoke")
    config.preset = "/../../../x/escape_preset"
    with pytest.raises(ConfigError, match="config.preset"):
        validate_config(config)
    workdir = default_workdir(config)
    assert workdir.parts[0] == "runs" and ".." not in workdir.parts and len(workdir.parts) == 3


def test_a_folder_that_is_not_a_run_is_refused_and_never_advised_deleted(tmp_path: Path) -> None:
    """U1: `--start_over` on a foreign config.json and checkpoints/my_model.bin deleted them."""
    config = make_config("listops", "softmax", "smoke")
    foreign = tmp_path / "mine"
    (foreign / "checkpoints").mkdir(parents=True)
    (foreign / "checkpoints" / "my_model.bin").write_bytes(b"weights")
    (foreign / "config.json").write_text(json.dumps({"lr": 0.1}))
    assert "not an lra.train config" in (foreign_problem(foreign) or "")
    with pytest.raises(WorkdirMismatchError, match="not a run of this suite") as e:
        check_workdir(foreign, config)
    assert "--start_over" not in str(e.value)
    (foreign / "config.json").unlink()
    assert "my_model.bin" in (foreign_problem(foreign) or "")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "config.json").write_text(json.dumps(config_to_dict(config)))
    (ours / "checkpoints" / "latest").mkdir(parents=True)
    assert foreign_problem(ours) is None


def test_start_over_on_a_folder_that_is_not_a_run_deletes_nothing(tmp_path: Path, smoke_data_dir: Path) -> None:
    """U1 through lra.train: refused, exit 2, every file kept."""
    from lra.train import train_and_evaluate

    config = make_config("listops", "softmax", "smoke")
    config.data_dir = str(smoke_data_dir)
    foreign = tmp_path / "mine"
    (foreign / "checkpoints").mkdir(parents=True)
    (foreign / "checkpoints" / "my_model.bin").write_bytes(b"weights")
    (foreign / "config.json").write_text(json.dumps({"lr": 0.1}))
    with pytest.raises(RunStateError, match="nothing was deleted") as e:
        train_and_evaluate(config, foreign, start_over=True)
    assert exit_code(e.value) == EXIT_INVALID
    assert (foreign / "checkpoints" / "my_model.bin").read_bytes() == b"weights"
    assert json.loads((foreign / "config.json").read_text()) == {"lr": 0.1}


def test_an_option_given_twice_and_an_absurd_step_count_are_refused() -> None:
    """O7: a family option given twice took the last silently; O4: num_train_steps=1e23 was accepted."""
    with pytest.raises(InputError, match="given twice"):
        split_config_args(
            ["--config.model.attention_kwargs.memory_size=8", "--config.model.attention_kwargs.memory_size=16"]
        )
    assert split_config_args(["--config.seed=1", "--config.seed=1"])[1] == [("seed", "1"), ("seed", "1")]
    config = make_config("listops", "softmax", "smoke")
    config.num_train_steps = 10**23
    with pytest.raises(ConfigError, match="num_train_steps must be below"):
        validate_config(config)
    config.num_train_steps, config.max_eval_batches = 6, -1
    with pytest.raises(ConfigError, match="max_eval_batches"):
        validate_config(config)


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="no O_NOFOLLOW")
def test_metrics_are_never_appended_through_a_symlink(tmp_path: Path) -> None:
    from lra.training.run_files import MetricsLog

    outside = tmp_path / "out.jsonl"
    outside.write_text("")
    (tmp_path / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(RunStateError, match="symlink"):
        MetricsLog(tmp_path / "metrics.jsonl").write([{"step": 1, "split": "train"}])
    assert outside.read_text() == ""


def test_an_empty_variant_an_unknown_data_source_and_a_smuggled_option_are_refused(tmp_path: Path) -> None:
    """O5: `--config.variant=` accepted; SO2: `--config.data.source=<invalid>` passed the sweep's check
    (validate_config, which the sweep's check_overrides calls, now names it); O6: a family option's
    value `8,reference` smuggled another short-form option into lra.train."""
    from lra.config_args import config_from_args

    config = make_config("listops", "softmax", "smoke")
    config.variant = ""
    with pytest.raises(ConfigError, match="config.variant"):
        validate_config(config)
    config = make_config("listops", "softmax", "smoke")
    config.data.source = "nowhere"
    with pytest.raises(ConfigError, match="config.data.source='nowhere'"):
        validate_config(config)
    with pytest.raises(InputError, match="holds no ','"):
        config_from_args("configs/listops_convluna.py:cpu", [("model.attention_kwargs.memory_size", "8,reference")])


def test_orbax_notices_of_an_old_format_checkpoint_are_quiet() -> None:
    """D17: resuming an old-format checkpoint printed three absl "Metadata file does not exist" lines."""
    import logging

    from lra.train import quiet_library_errors

    quiet_library_errors()
    absl = logging.getLogger("absl")
    make = lambda msg: logging.LogRecord("absl", logging.WARNING, "orbax/x.py", 1, msg, ("p",), None)
    assert not absl.filter(make("Metadata file does not exist: %s"))
    assert absl.filter(make("something else: %s"))


def test_a_renamed_checkpoint_folder_and_a_deleted_file_are_one_line_naming_them(tmp_path: Path) -> None:
    """D8: a checkpoint folder renamed `0017` ended in exit 4 "latest/17: No such file"; D12: a file
    named `.deleted` ended in an error naming `latest/18`."""
    import numpy as np

    from lra.training.checkpoints import Checkpoints

    (tmp_path / "checkpoints" / "latest" / "0017").mkdir(parents=True)
    with pytest.raises(RunStateError, match="0017 is not a checkpoint folder name.*rename it to .*latest/17"):
        Checkpoints(tmp_path).steps("latest")
    (tmp_path / "checkpoints" / "latest" / "0017").rmdir()
    (tmp_path / "checkpoints" / "latest" / ".deleted").write_text("")
    checkpoints = Checkpoints(tmp_path, primary=True)
    try:
        with pytest.raises(RunStateError, match=r"\.deleted is a file") as e:
            checkpoints.save_latest(18, {"w": np.zeros(2, np.float32)})
    finally:
        checkpoints.close()
    assert exit_code(e.value) == EXIT_INVALID
    assert not (tmp_path / "checkpoints" / "latest" / "18").exists()


@pytest.mark.slow
def test_two_signals_inside_one_slow_call_stop_at_once() -> None:
    """S5: two Ctrl-Cs 0.8 s apart while the main thread sits in one C call (a slow XLA step; here one
    SHA-256 of 1 GiB) set one pending flag: the handler ran once and the run saved instead of stopping.
    Deliveries are counted from the wakeup pipe: the second ends the process at once, exit 130."""
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import hashlib\nfrom lra.training.hosts import StopSignals\n"
        "stop = StopSignals().install()\nstop.training = True\ndata = bytes(1 << 30)\n"
        "print('ready', flush=True)\nhashlib.sha256(data).hexdigest()\nprint('step done', flush=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    time.sleep(0.8)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130 and "step done" not in out and "SIGINT again: stopping at once" in err
