"""Bytes moved, shown to people: ``format_bytes`` and ``Progress`` (a tqdm bar on a terminal,
plain log lines otherwise), used while an archive is downloaded and while it is extracted.

Training's progress (lra/training/progress.py) counts steps, excludes compilation and writes
TensorBoard; it sits two layers above the data package, which cannot import it (tests/test_layering.py).
This one counts bytes and leaves the terminal bar to tqdm.
"""

from __future__ import annotations

import sys
import time

from lra.data.cache import log


def format_bytes(n: float) -> str:
    """Bytes for people: 7.73 GB, 170.5 MB, 12.3 kB, 80 B."""
    for unit, scale, digits in (("GB", 1e9, 2), ("MB", 1e6, 1), ("kB", 1e3, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n:.0f} B"


class Progress:
    """Bytes done of a total: a tqdm bar on a terminal, else a plain line per 10% (or 30 s)."""

    def __init__(self, what: str, total: int | None, initial: int = 0, stream=None):
        self.what, self.total, self.done = what, total, initial
        self.stream = stream or sys.stderr
        self.start, self.start_done, self.last_line, self.printed = time.time(), initial, time.time(), initial
        self.next_pct = (initial * 10 // total + 1) * 10 if total else 0
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=what,
                file=self.stream,
                dynamic_ncols=True,
                miniters=1,
            )

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
            eta_s = time.strftime("%H:%M:%S", time.gmtime(eta)) if eta < 1e6 else "?"
            log(
                f"{self.what}: {format_bytes(self.done)} of {format_bytes(self.total)} "
                f"({100 * self.done / self.total:.0f}%), "
                f"{format_bytes(rate)}/s, ETA {eta_s}"
            )
        else:
            log(f"{self.what}: {format_bytes(self.done)}, {format_bytes(rate)}/s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.done != self.printed:
            self._line(time.time())

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
