"""The suite's errors, beneath every layer so that any module can raise them, and one exit code per class.

The suite's base error class, beneath every layer so that any module can raise it.

``InputError`` is what a user can fix: a config field, a family option, a command-line flag or
environment variable, the data, or the state of a workdir. The commands print it as one ``error:``
line and exit 2 (lra.errors.exit_code). A bare ``ValueError`` is not input: it is a
bug (a shape mismatch in a new family, a broken invariant) and keeps its traceback.

The errors a run can stop with, and the exit code of each class (docs/reliability.md, "Exit codes").

One class of error, one exit code, whichever step of the run it hits: scripts (the sweep, a
SLURM array) decide from the code alone whether to retry, resume, or give up. Only the suite's own
classes (these, ``lra.errors.InputError`` and its subclasses) and ``OSError`` (the disk, the
environment) have a code and become one ``error:`` line; any other exception, a bare
``ValueError`` included, is a bug: ``exit_code`` raises TypeError and the command re-raises the
original with its traceback.
"""

from __future__ import annotations

import errno
import os
import re
import signal


class InputError(ValueError):
    """Bad input a user can fix; the message says what and how (exit 2, nothing changed)."""


# -- the errors a run can stop with, and their exit codes ----------------------------------------------------


# Exit codes of ``python -m lra.train``.
EXIT_OK = 0
EXIT_DIVERGED = 1  # the loss or the weights became NaN/Inf: the last good checkpoint is kept
EXIT_INVALID = 2  # bad config, command line, data, or a workdir this command may not use: nothing changed
EXIT_LOCKED = 3  # another process holds the workdir: nothing changed
EXIT_STORAGE = 4  # a file of the workdir could not be written (full disk, read-only, not a directory)
EXIT_CORRUPT = 5  # a checkpoint or run file fails its integrity check and nothing intact replaces it
# Interrupted by a signal after saving a checkpoint: 128 + the signal number (130 SIGINT, 143 SIGTERM).


class NonFiniteLossError(RuntimeError):
    """The training loss, a validation loss or the weights became NaN or Inf."""


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived; the latest checkpoint was saved (or nothing needed saving)."""

    def __init__(self, signum: int, step: int | None, saved: bool = True):
        where = f"at step {step}" if step is not None else "(no checkpoint was due)"
        super().__init__(f"interrupted by {signal.Signals(signum).name} {where}")
        self.signum, self.step, self.saved = signum, step, saved


class RunStateError(InputError):
    """The workdir's contents forbid this command (a run without a checkpoint, fewer steps...)."""


class WorkdirLockedError(RuntimeError):
    """Another live process holds the workdir's lock."""


class StorageError(OSError):
    """Writing a file of the run failed; the message names the path and the cause."""

    def __init__(self, path: object, cause: BaseException):
        code = cause.errno if isinstance(cause, OSError) else None
        found = re.search(r"os_error_code='?(\d+)", str(cause))  # tensorstore's errors (orbax)
        if code is None and found:
            code = int(found.group(1))
        if isinstance(cause, OSError) and cause.strerror:
            reason = cause.strerror
        elif code is not None:
            reason = os.strerror(code)
        else:
            reason = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        if code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            reason += " (free disk space, then rerun the same command to resume)"
        super().__init__(code, f"cannot write {path}: {reason}")
        self.path = path

    def __str__(self) -> str:
        return self.strerror


class CorruptFileError(RuntimeError):
    """A checkpoint or run file fails its integrity check; the message names it."""


class RunFileError(CorruptFileError):
    """config.json or metrics.jsonl is malformed (beyond what a kill can leave)."""


def exit_code(error: BaseException) -> int:
    """The exit code of ``error``'s class (see the constants above)."""
    if isinstance(error, Interrupted):
        return 128 + error.signum
    if isinstance(error, NonFiniteLossError):
        return EXIT_DIVERGED
    if isinstance(error, WorkdirLockedError):
        return EXIT_LOCKED
    if isinstance(error, CorruptFileError):
        return EXIT_CORRUPT
    if isinstance(error, InputError):  # config, options, data, workdir of another config, run state
        return EXIT_INVALID
    if isinstance(error, OSError):
        return EXIT_STORAGE
    raise TypeError(f"no exit code for {type(error).__name__}")


def describe(error: BaseException) -> str:
    """One line for ``error:``; a bare OSError gets its path and cause."""
    if isinstance(error, OSError) and not isinstance(error, StorageError):
        path = error.filename or "a file of the run"
        return f"{path}: {error.strerror or error}"
    return str(error).replace("\n", " ")
