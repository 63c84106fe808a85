"""Where a record's numbers came from: the command, and the commit when the process *started*.

A record that names only the commit at its end cannot show that its rule was committed before
the data (lra.reproduce.audit): the tree may have changed while it ran. Every command that writes
an experiment record calls :func:`mark_start` first; :func:`stamp` then gives the fields to store:
``git_commit_start`` (and ``git_commit`` at the end, ``-dirty`` when the tree had uncommitted
changes), the date, the command as it was typed, and ``code_start``: the git tree ids of the
``lra/`` and ``configs/`` files on disk when the process started (lra.training.code_tree), which the
audit compares with the named commit's trees.
"""

from __future__ import annotations

import datetime
import shlex
import sys
from collections.abc import Mapping
from typing import Any

_start: dict[str, Any] | None = None


def command_line() -> str:
    """This process's command as typed (``python -m pkg.mod --flag``), not the default one."""
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    return shlex.join(["python", *argv[1:]])


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def mark_start() -> dict[str, Any]:
    """Record this process's start commit, date and code trees (first call wins)."""
    global _start
    if _start is None:
        from lra.training.code_tree import code_evidence
        from lra.training.run_files import git_commit

        _start = {"git_commit_start": git_commit(), "started": _now(), "code_start": code_evidence()}
    return _start


def stamp() -> dict[str, Any]:
    """The provenance fields of a record written now."""
    from lra.training.run_files import git_commit

    # None: the command never marked its start
    start: Mapping[str, Any] = {"git_commit_start": None, "started": None} if _start is None else _start
    end = git_commit()
    return {
        "command": command_line(),
        **start,
        "git_commit": end,
        "date": _now(),
        "dirty": end.endswith("-dirty") or str(start["git_commit_start"]).endswith("-dirty"),
    }
