"""Fixtures shared by the tests: one finished smoke run and one finished two-seed bundle per test
process (trained once, copied by the tests that change them); scripts/ entry points."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def script_main(name: str) -> Callable[..., int]:
    """``main`` of ``scripts/<name>.py`` (scripts are not a package)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name).main
    finally:
        sys.path.remove(str(SCRIPTS))


def result_record(**fields) -> dict:
    """A result.json that ``run_files.result_problem`` accepts (a finished run), with ``fields`` changed."""
    record = {
        "task": "listops",
        "attention": "softmax",
        "variant": "Transformer",
        "seed": 0,
        "best_val_accuracy": 0.5,
        "best_step": 6,
        "test_accuracy": 0.5,
        "test_loss": 1.0,
        "num_train_steps": 6,
        "train_seconds": 1.0,
        "steps_per_second": 1.0,
        "num_params": 1,
        "config_preset": "smoke",
        "device_kind": "cpu",
        "num_devices": 1,
        "jax_version": "0",
        "git_commit": "abc",
    }
    return {**record, **fields}


@pytest.fixture(scope="session")
def smoke_data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lra_data_smoke")


@pytest.fixture(scope="session")
def finished_smoke_run(smoke_data_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A finished ListOps smoke run (6 steps; checkpoints and validations at 3 and 6): copy it
    before damaging it."""
    from lra.train import train_and_evaluate
    from test_train import smoke

    workdir = tmp_path_factory.mktemp("finished") / "run"
    return workdir, train_and_evaluate(smoke(smoke_data_dir), workdir)


@pytest.fixture(scope="session")
def finished_bundle(smoke_data_dir, tmp_path_factory) -> tuple[Path, list[dict]]:
    """Seeds 0 and 1 of the bucketed smoke config (``data.buckets=(24, 40)``: seeds draw different
    batch lengths; seed 1 shares seed 0's bucket order), trained in one program (6 steps): shared by
    test_faults.py and test_seeds.py, so copy it before changing it."""
    from lra.train import train_and_evaluate
    from test_train import smoke

    root = tmp_path_factory.mktemp("bundle") / "whole"
    results = train_and_evaluate(smoke(smoke_data_dir, seeds=(0, 1), **{"data.buckets": (24, 40)}), root)
    assert [r["seed"] for r in results] == [0, 1]
    return root, results
