"""One process per workdir: an exclusive ``fcntl`` lock on ``<workdir>/.lock``.

The OS drops the lock when its process dies (even by SIGKILL), so a stale lock file never
blocks a rerun; a live holder is named (pid, host) in the refusal.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from lra.training.run_errors import StorageError, WorkdirLockedError

LOCK_NAME = ".lock"


class WorkdirLock:
    """Hold ``workdir``'s lock from ``acquire()`` until ``release()`` or the process ends."""

    def __init__(self, workdir: Path, flag: str = "--workdir"):
        self.path = Path(workdir) / LOCK_NAME
        self.flag = flag  # the option that names this folder in the refusing command's own terms
        self._fd: int | None = None

    def acquire(self) -> WorkdirLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(self.path, e) from None
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
