"""Writing a measurement's record: the numbers plus what made them (command, commit, machine, load)."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path
from typing import Any


def write_record(path: Path, record: dict[str, Any], command: str | None = None) -> None:
    """Write ``record`` atomically with its provenance; ``command`` defaults to this process's argv."""
    from lra.training.run_files import git_commit, write_json_atomic

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    provenance = {
        "command": command or "python -m " + " ".join([Path(sys.argv[0]).stem] + sys.argv[1:]),
        "git_commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in load] if load else None,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**provenance, **record})
