"""Fixtures shared by the tests: one finished smoke run per test process; scripts/ entry points."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def script_main(name: str) -> Callable[..., int]:
    """``main`` of ``scripts/<name>.py`` (scripts are not a package)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name).main
    finally:
        sys.path.remove(str(SCRIPTS))


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
