"""Commands that run other commands pass SIGTERM/SIGINT on to them and wait: no orphans.

``lra.reproduce`` (its sweeps) and ``lra.preflight`` (its compile children, several at once with
``sweep --jobs N``) start each child in its own session, so a Ctrl-C at the terminal reaches a
child once, through the parent, and a SIGTERM sent to the parent alone (``kill PID``, a batch
system) is not lost: the parent's handler passes the signal to every running child, starts
nothing new, and the caller waits for them and says what was interrupted (exit 128+signal).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

from lra.training.run_errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ChildSignals:
    """The children a process is running (each with a label), and the signal that stopped it."""

    def __init__(self, on_signal: str) -> None:
        """``on_signal``: the line printed once when a signal arrives, after ``SIGTERM: ``; it may name
        ``{count}`` (running children) and ``{labels}``."""
        self.on_signal = on_signal
        self.children: dict[subprocess.Popen, str] = {}
        self.signum: int | None = None
        self.interrupted: list[str] = []  # labels of the children running when the signal came
        self._lock = threading.RLock()  # the handler runs in the main thread, which may hold it

    def forward(self, signum: int, frame: object = None) -> None:
        """The signal handler: pass ``signum`` to every running child; remember it (nothing new starts)."""
        with self._lock:
            running = [(c, label) for c, label in self.children.items() if c.poll() is None]
            if self.signum is None:
                self.signum = signum
                self.interrupted = [label for _, label in running]
                print(
                    f"{signal.Signals(signum).name}: "
                    + self.on_signal.format(count=len(running), labels=", ".join(self.interrupted) or "none"),
                    file=sys.stderr,
                    flush=True,
                )
        for child, _ in running:
            child.send_signal(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` once a signal has come: the caller starts nothing new."""
        if self.signum is not None:
            raise Interrupted(self.signum, None, saved=False)

    def start(self, argv: list[str], label: str = "", **popen: Any) -> subprocess.Popen:
        """``subprocess.Popen`` in a session of its own, tracked until :meth:`done`; refused after a signal."""
        self.check()
        child = subprocess.Popen(argv, start_new_session=True, **popen)
        with self._lock:
            self.children[child] = label or " ".join(argv)
            late = self.signum
        if late is not None:  # the signal came while it started: it gets it too
            self.interrupted.append(self.children[child])
            child.send_signal(late)
        return child

    def done(self, child: subprocess.Popen) -> None:
        """``child`` has ended (or is being given up): stop tracking it; a live one is stopped and waited for."""
        if child.poll() is None:
            child.terminate()
            child.wait()
        with self._lock:
            self.children.pop(child, None)

    def reset(self) -> None:
        """Forget a past signal (a new command in the same process, e.g. in tests)."""
        self.signum, self.interrupted = None, []

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[ChildSignals]:
        """SIGINT/SIGTERM handled by :meth:`forward` inside the block (the main thread only), restored after."""
        previous = {sig: signal.signal(sig, self.forward) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
