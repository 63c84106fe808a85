"""Benchmark processes that share one accelerator: compile together, time alone.

Compiling a case is host work (and, on a GPU, short autotuning bursts); timing it needs the device
to itself. Processes of one benchmark take turns through two ``flock`` files in a folder named by
``$LRA_BENCH_TURNS``:

* ``compiling()``: shared. Any number of processes compile at once.
* ``timing()``: exclusive. It waits for the compiles that are running to finish and lets no new one
  start (the ``gate`` file makes the exclusive side win over a stream of shared requests), so
  nothing else runs on the device while a case is timed.

Without ``$LRA_BENCH_TURNS`` both are no-ops: one process alone needs no turns. Locks held by a
process that dies are released by the kernel, so a killed case never blocks the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

ENV = "LRA_BENCH_TURNS"


def _folder() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def compiling() -> contextlib.AbstractContextManager[list[float]]:
    """Hold a shared turn; yields ``[start, end]`` (epoch seconds, end filled in on exit)."""
    return _turn(shared=True)


def timing() -> contextlib.AbstractContextManager[list[float]]:
    """Hold the device alone; yields ``[start, end]`` (epoch seconds, end filled in on exit)."""
    return _turn(shared=False)


@contextlib.contextmanager
def _turn(shared: bool) -> Iterator[list[float]]:
    window = [time.time(), float("nan")]
    folder = _folder()
    with contextlib.ExitStack() as files:  # closing a file releases its lock, also on an exception
        if folder is not None:
            gate = files.enter_context(open(folder / "gate", "a+"))
            main = files.enter_context(open(folder / "main", "a+"))
            fcntl.flock(gate, fcntl.LOCK_EX)  # queue behind a timer that is waiting
            fcntl.flock(main, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            if shared:
                fcntl.flock(gate, fcntl.LOCK_UN)  # let the next one in; a timer keeps the gate
            window[0] = time.time()
        yield window
        window[1] = time.time()
