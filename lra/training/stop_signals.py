"""SIGTERM/SIGINT handling for a run, installed before anything else happens.

Before training starts there is nothing to save: a signal stops the run at once (between two
Python statements; a compilation in progress finishes first). During training the first signal
finishes the step and saves a checkpoint; a second one exits immediately, which is safe at any
moment because every file of a run is replaced atomically.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import jax
import numpy as np

from lra.training.run_errors import Interrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The signal handler of one run; ``signum`` is set once a stop was asked for."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.training = False
        self._old: dict[int, Any] = {}

    def install(self) -> StopSignals:
        self._old = {s: signal.signal(s, self) for s in SIGNALS}
        return self

    def reclaim(self) -> None:
        """Take SIGTERM/SIGINT back after a library installed its own handler: jax.distributed's
        preemption notifier catches SIGTERM, and the run would never hear of it (the multi-host loop
        agrees on this handler's flag at every step instead). ``restore`` still restores the handlers
        from before ``install``."""
        for s in SIGNALS:
            signal.signal(s, self)

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(f"{name} again: stopping at once; the last saved checkpoint is kept", file=sys.stderr, flush=True)
            os._exit(128 + signum)  # no cleanup that a third signal could interrupt
        self.signum = signum
        if not self.training:
            raise Interrupted(signum, None, saved=False)
        print(
            f"{name}: finishing the step in flight (at most one: the loop runs one step ahead) and saving a "
            "checkpoint; send it again to stop at once without saving",
            file=sys.stderr,
            flush=True,
        )


def agreed_stop(own: int | None, step: int) -> int | None:
    """The signal a run whose own stop flag is ``own`` stops on after ``step`` (None: go on). One
    process: its own, no collective. Several: every process's flag is gathered at every step, so a SIGTERM that
    reaches only some hosts stops all of them after the same step, where each takes its part in
    the collective save; alone, the signalled host would leave the others waiting in the next
    collective for ever (issue 38). The largest signal number wins (SIGTERM over SIGINT)."""
    if jax.process_count() == 1:
        return own
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.int32(own or 0)))
    signum = int(flags.max())
    if signum and not own:
        senders = ", ".join(str(i) for i in np.flatnonzero(flags))
        print(
            f"process {jax.process_index()}: process {senders} got {signal.Signals(signum).name}: all stop "
            f"after step {step} and save a checkpoint",
            file=sys.stderr,
            flush=True,
        )
    return signum or None
