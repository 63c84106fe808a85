"""Errors keep bugs visible (issue 40 point 6): only the suite's own classes get an exit code and one
``error:`` line; a bare ValueError (a shape bug in a new family) keeps its traceback."""

from __future__ import annotations

import errno

import pytest

from lra import errors
from lra.data.types import DataError
from lra.errors import InputError
from lra.evaluate import fail
from lra.training.checks import ConfigError
from lra.training.run_files import WorkdirMismatchError


@pytest.mark.parametrize(
    "error",
    [InputError("x"), ConfigError("x"), DataError("x"), WorkdirMismatchError("x"), errors.RunStateError("x")],
)
def test_the_suites_input_errors_exit_2(error):
    assert errors.exit_code(error) == errors.EXIT_INVALID


def test_environment_and_run_errors_keep_their_codes():
    assert errors.exit_code(OSError(errno.ENOSPC, "full")) == errors.EXIT_STORAGE
    assert errors.exit_code(errors.NonFiniteLossError("nan")) == errors.EXIT_DIVERGED
    assert errors.exit_code(errors.WorkdirLockedError("held")) == errors.EXIT_LOCKED
    assert errors.exit_code(errors.CorruptFileError("bad")) == errors.EXIT_CORRUPT


@pytest.mark.parametrize(
    "bug", [ValueError("operands could not be broadcast"), TypeError("x"), RuntimeError("x"), KeyError("x")]
)
def test_a_bug_has_no_exit_code(bug):
    with pytest.raises(TypeError, match="no exit code"):
        errors.exit_code(bug)


def test_a_command_re_raises_a_bug_with_its_traceback(capsys):
    """lra.evaluate's fail (lra.train's handler is the same rule): the original exception, not a line."""
    bug = ValueError("shape (3, 4) vs (3, 5)")
    with pytest.raises(ValueError, match="shape") as raised:
        fail(bug)
    assert raised.value is bug and "error:" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        fail(ConfigError("config.model.num_heads=3 does not divide qkv_dim"))
    assert stopped.value.code == errors.EXIT_INVALID
    assert capsys.readouterr().err.startswith("error: config.model.num_heads=3")
