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
import threading
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
        self._pipe: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._old_wakeup = -1

    def install(self) -> StopSignals:
        self._old = {s: signal.signal(s, self) for s in SIGNALS}
        self._count_deliveries()
        return self

    def _count_deliveries(self) -> None:
        """Count every delivery, not every handler call: during a step the main thread sits in XLA's C++
        code, where two signals of one kind set one pending flag and the handler runs once (issue 52 S5:
        two Ctrl-Cs 0.8 s apart in one slow step counted as one). The C-level handler writes each
        delivery's number to a wakeup pipe; a thread reading it ends the run at the second while
        training, as the handler would, without waiting for the step."""
        if threading.current_thread() is not threading.main_thread():
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            self._old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            os.close(read_fd)
            os.close(write_fd)
            return
        self._pipe = (read_fd, write_fd)

        def watch() -> None:
            seen = 0
            while True:
                try:
                    data = os.read(read_fd, 64)
                except OSError:
                    return
                if not data:
                    return
                for signum in data:
                    if signum not in SIGNALS:
                        continue
                    seen += 1
                    if seen >= 2 and self.training:
                        name = signal.Signals(signum).name
                        print(
                            f"{name} again: stopping at once; the last saved checkpoint is kept",
                            file=sys.stderr,
                            flush=True,
                        )
                        os._exit(128 + signum)

        self._watcher = threading.Thread(target=watch, name="lra-stop-signals", daemon=True)
        self._watcher.start()

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
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            read_fd, write_fd = self._pipe
            os.close(write_fd)  # the watcher reads the end of the pipe and returns
            if self._watcher is not None:
                self._watcher.join(timeout=5)
            os.close(read_fd)
            self._pipe = self._watcher = None

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
