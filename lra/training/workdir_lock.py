"""One process per workdir: an exclusive ``fcntl`` lock on ``<workdir>/.lock``.

The OS drops the lock when its process dies (even by SIGKILL), so a stale lock file never
blocks a rerun; a live holder is named (pid, host) in the refusal.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from lra.training.run_errors import RunStateError, StorageError, WorkdirLockedError

LOCK_NAME = ".lock"


def open_run_file(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a file of a run that never follows a symlink (``O_NOFOLLOW``): a run's files
    are written only inside its folder, never through a link to a file elsewhere (issue 52 SEC1,
    SEC2). A symlink is refused by name (RunStateError, exit 2, nothing written); any other failure
    is a StorageError (exit 4)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as e:
        if Path(path).is_symlink():
            raise RunStateError(
                f"{path} is a symlink (to {os.readlink(path)}); a run's files are never written through a "
                "link. Nothing was written: remove the link (or use another --workdir)"
            ) from None
        raise StorageError(path, e) from None


class WorkdirLock:
    """Hold ``workdir``'s lock from ``acquire()`` until ``release()`` or the process ends."""

    def __init__(self, workdir: Path, flag: str = "--workdir"):
        self.path = Path(workdir) / LOCK_NAME
        self.flag = flag  # the option that names this folder in the refusing command's own terms
        self._fd: int | None = None

    def acquire(self) -> WorkdirLock:
        fd = open_run_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WorkdirLockedError(
                f"{self.flag} {self.path.parent} is in use by another process ({holder}); nothing was "
                f"changed. Wait for it to finish (or stop it), or use another {self.flag}."
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        except OSError as e:
            os.close(fd)
            raise StorageError(self.path, e) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
