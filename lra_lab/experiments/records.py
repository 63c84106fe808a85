"""Writing a measurement's record: the numbers plus what made them (command, commit, machine, load)."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_record(path: Path, record: dict[str, Any], command: str | None = None) -> None:
    """Write ``record`` atomically with its provenance (lra.training.provenance: the start and end
    commits, the date, the code trees at the start), then its seal beside it (lra.training.provenance);
    ``command`` defaults to this process's command line as typed."""
    from lra.training.provenance import seal, stamp
    from lra.training.run_files import write_json_atomic

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    provenance = {
        **stamp(),
        **({"command": command} if command else {}),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in load] if load else None,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**provenance, **record})
    seal(path)


def measure_main(
    description: str, default_out: str, measure: Callable[[], dict[str, Any]], argv: list[str] | None = None
) -> int:
    """The command line of a one-record measurement (``--out``): provenance marked at the start,
    then ``measure()``'s record written atomically with its start and end commits."""
    import argparse

    from lra.training.provenance import mark_start

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=Path(default_out))
    args = parser.parse_args(argv)
    mark_start()
    write_record(args.out, measure(), None)
    print(f"wrote {args.out}")
    return 0
