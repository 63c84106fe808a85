"""What people read on a console, written once for every layer: sizes, times, and a bar or plain lines."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import Any

MIB = 1024**2
GIB = 1024**3


def format_bytes(n: float) -> str:
    """Bytes for people (decimal, as servers state sizes): 7.73 GB, 170.5 MB, 12.3 kB, 80 B."""
    for unit, scale, digits in (("GB", 1e9, 2), ("MB", 1e6, 1), ("kB", 1e3, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n:.0f} B"


def binary_bytes(n: float, digits: int = 2) -> str:
    """Memory for people: ``"1.50 GiB"`` from a tenth of a GiB up, else ``"12.3 MiB"``."""
    return f"{n / GIB:.{digits}f} GiB" if n >= GIB / 10 else f"{n / MIB:.1f} MiB"


def mib_cell(n: float | None, digits: int = 1) -> str:
    """A table cell under a "MiB" heading: ``"1,234.5"``; empty when not measured."""
    return "" if n is None else f"{n / MIB:,.{digits}f}"


def clock(seconds: float) -> str:
    """``"1:02:03"``, ``"2:03"``: an ETA or an elapsed time, to the second."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def duration(seconds: float) -> str:
    """``"~214 h (8.9 days)"``, ``"~3.2 h"``, ``"~12 min"``, ``"~3 s"``: an estimate's size, not a clock."""
    hours = seconds / 3600
    if hours >= 48:
        return f"~{hours:.0f} h ({hours / 24:.1f} days)"
    if hours >= 10:
        return f"~{hours:.0f} h"
    if hours >= 1:
        return f"~{hours:.1f} h"
    return f"~{seconds / 60:.0f} min" if seconds >= 60 else f"~{seconds:.0f} s"


def terminal_bar_possible(stream: Any = None) -> bool:
    """A bar needs a terminal that reports its width; a zero-size pty gets plain lines."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return False
    return shutil.get_terminal_size(fallback=(0, 0)).columns > 0


class BarOrLines:
    """A tqdm ``bar`` the caller moves when ``use_bar`` (None: :func:`terminal_bar_possible`), else text to ``line``."""

    def __init__(
        self,
        total: int | None,
        initial: int = 0,
        *,
        line: Callable[[str], None],
        use_bar: bool | None = None,
        stream: Any = None,
        **tqdm_options: Any,
    ):
        self.line = line
        self.bar: Any = None
        if use_bar is None:
            use_bar = terminal_bar_possible(stream)
        if use_bar:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, file=stream, dynamic_ncols=True, **tqdm_options)

    def write(self, text: str) -> None:
        """One message: above the bar (tqdm keeps the bar below it), or a plain line."""
        if self.bar is not None:
            self.bar.write(text)
        else:
            self.line(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
