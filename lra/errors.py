"""The suite's errors, beneath every layer so that any module can raise them, and one exit code per class.

One class, one code, whichever step a run stops at, so scripts decide from the code alone whether to retry, resume or
give up (docs/reliability.md, "Exit codes"). Only these classes and ``OSError`` have a code; anything else (a bare
``ValueError`` too) is a bug: ``exit_code`` raises TypeError and the command re-raises it with its traceback."""

from __future__ import annotations

import errno
import os
import re
import signal


class InputError(ValueError):
    """Bad input a user can fix (config, option, flag, data, workdir state): one ``error:`` line, exit 2."""


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
