"""Bytes moved while an archive is downloaded or extracted: ``Progress``, over lra.console's ``BarOrLines``.
Not pooch's ``progressbar=True``: it draws a tqdm bar into logs too, and counts chunks rather than bytes."""

from __future__ import annotations

import sys
import time

from lra.console import BarOrLines, clock, format_bytes
from lra.data.cache import log


class Progress:
    """Bytes done of a total: a tqdm bar on a terminal, else a plain line per 10% (or 30 s)."""

    def __init__(self, what: str, total: int | None, initial: int = 0, stream=None):
        self.what, self.total, self.done = what, total, initial
        self.stream = stream or sys.stderr
        self.start, self.start_done, self.last_line, self.printed = time.time(), initial, time.time(), initial
        self.next_pct = (initial * 10 // total + 1) * 10 if total else 0
        self.out = BarOrLines(
            total,
            initial,
            line=log,
            stream=self.stream,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=what,
            miniters=1,
        )
        self.bar = self.out.bar

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.time()
        pct = 100 * self.done // self.total if self.total else 0
        if (self.total and pct >= self.next_pct) or now - self.last_line >= 30:
            self._line(now)
            self.next_pct = (pct // 10 + 1) * 10

    def _line(self, now: float) -> None:
        self.last_line, self.printed = now, self.done
        rate = (self.done - self.start_done) / max(now - self.start, 1e-6)
        if self.total:
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta_s = clock(eta) if eta < 1e6 else "?"
            self.out.write(
                f"{self.what}: {format_bytes(self.done)} of {format_bytes(self.total)} "
                f"({100 * self.done / self.total:.0f}%), "
                f"{format_bytes(rate)}/s, ETA {eta_s}"
            )
        else:
            self.out.write(f"{self.what}: {format_bytes(self.done)}, {format_bytes(rate)}/s")

    def close(self) -> None:
        if self.bar is None and self.done != self.printed:
            self._line(time.time())
        self.out.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
