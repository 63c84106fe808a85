"""The temporary extraction folders a killed download left in the data dir, removed once their owner is
certainly gone. pooch has no such clean-up: its extraction folders are never temporary."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

from lra.data.archives import ARCHIVES
from lra.data.cache import log

EXTRACT_PREFIX = ".lra-extract-"
_IMPORTED = time.time()  # about when this process started: older legacy folders are not this run's


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_extractions(root: Path, started: float | None = None) -> list[Path]:
    """Remove this host's ``.lra-extract-<archive>-<host>-<pid>-<id>`` folders (up to 7.7 GB) whose process is
    gone, and hostless (older) ones whose pid is gone and that predate ``started``; returns those removed."""
    host = socket.gethostname()
    started = _IMPORTED if started is None else started
    legacy = {EXTRACT_PREFIX + name for name in ARCHIVES}
    removed = []
    for folder in sorted(root.glob(EXTRACT_PREFIX + "*")) if root.is_dir() else []:
        head, pid, _ = (folder.name.rsplit("-", 2) + ["", ""])[:3]
        if not pid.isdigit() or folder.is_symlink() or not folder.is_dir() or _running(int(pid)):
            continue  # a symlink is no extraction folder of ours: kept, and not reported as removed
        try:
            stale = head.endswith(f"-{host}") or (head in legacy and folder.stat().st_mtime < started)
        except OSError:
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            if folder.exists():  # only what is gone is said to be
                log(
                    f"warning: could not remove {folder}, left by a download killed while extracting "
                    f"(process {pid} is gone); delete it by hand"
                )
                continue
            log(f"removed {folder}, left by a download killed while extracting (process {pid} is gone)")
            removed.append(folder)
    return removed
