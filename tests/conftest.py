"""Fixtures shared by the run-safety tests: one finished smoke run per test process."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smoke_data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lra_data_smoke")


@pytest.fixture(scope="session")
def finished_smoke_run(smoke_data_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A finished ListOps smoke run (6 steps; checkpoints and validations at 3 and 6): copy it
    before damaging it."""
    from test_train import smoke

    from lra.train import train_and_evaluate

    workdir = tmp_path_factory.mktemp("finished") / "run"
    return workdir, train_and_evaluate(smoke(smoke_data_dir), workdir)
