"""A run's persistent compilation cache (lra.train): where it goes, how it is
turned off, and that a resumed ``python -m lra.train`` loads its steps instead of compiling them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lra import train

REPO = Path(__file__).resolve().parent.parent


def test_where_the_cache_goes(tmp_path):
    key = train.machine_key()
    assert train.cache_dir({"HOME": str(tmp_path)}) == Path.home() / ".cache" / "lra" / "jax" / key
    assert train.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "lra" / "jax" / key
    assert train.cache_dir({"LRA_COMPILATION_CACHE": str(tmp_path / "c")}) == tmp_path / "c" / key
    for off in ("off", "0", "none", "", "OFF"):
        assert train.cache_dir({"LRA_COMPILATION_CACHE": off}) is None
    assert train.cache_dir({"JAX_COMPILATION_CACHE_DIR": str(tmp_path)}) is None  # JAX's own setting rules


def test_one_folder_per_machine():
    cpu, isa = train.cpu_identity()
    key = train.machine_key()
    assert key.startswith(f"{os.uname().machine}-") and len(key.split("-")[-1]) == 12
    if Path("/proc/cpuinfo").is_file() and os.uname().machine == "x86_64":
        assert cpu.startswith(("GenuineIntel", "AuthenticAMD")) and "sse4_2" in isa


@pytest.mark.slow  # two lra.train children (about 40 CPU-seconds)
def test_a_resumed_run_loads_its_compiled_steps(smoke_data_dir, tmp_path):
    """Three steps, then the same run resumed to six: the second process finds every program in the
    cache folder the first wrote (no entry is added), and its results are those of a run without one."""
    from lra.train import train_and_evaluate
    from test_train import smoke

    train_and_evaluate(smoke(smoke_data_dir), tmp_path / "uncached")  # the data, and the reference result
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.update(LRA_COMPILATION_CACHE=str(cache), PYTHONPATH=str(REPO))
    cmd = [
        sys.executable,
        "-m",
        "lra.train",
        f"--config={REPO}/configs/listops_transformer.py:smoke",
        f"--workdir={tmp_path / 'run'}",
        f"--config.data_dir={smoke_data_dir}",
    ]
    first = subprocess.run([*cmd, "--config.num_train_steps=3"], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    entries = {p.name for p in cache.rglob("*") if p.is_file()}
    assert entries, "the first run wrote no compiled program"
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "resuming at step 3" in second.stdout + second.stderr, second.stderr[-2000:]
    assert {p.name for p in cache.rglob("*") if p.is_file()} == entries, "the resume compiled a program anew"
    resumed = json.loads((tmp_path / "run" / "result.json").read_text())
    reference = json.loads((tmp_path / "uncached" / "result.json").read_text())
    assert resumed["test_accuracy"] == reference["test_accuracy"] and resumed["test_loss"] == reference["test_loss"]
