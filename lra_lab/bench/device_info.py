"""What a benchmark records about its machine and a compiled step: the device's memory counters,
XLA's memory accounting of a compiled program, and the environment block of every benchmark
report. Shared by the attention-layer benchmark (lra_lab/bench/attention.py) and the training-step
benchmark (lra_lab/bench/steps.py)."""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from typing import Any

import jax


def memory_stats() -> dict[str, Any] | None:
    """The first device's memory counters (peak, limit), None where the backend keeps none."""
    try:
        return jax.devices()[0].memory_stats()
    except Exception:  # not every backend implements it
        return None


def compiled_bytes(compiled: Any) -> dict[str, int] | None:
    """XLA's memory accounting of a compiled step: arguments + outputs + temporaries - aliased."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # not every backend implements it (NotImplementedError, XlaRuntimeError): no memory column
        return None
    if m is None:
        return None
    parts = {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "alias_bytes": int(m.alias_size_in_bytes),
    }
    parts["total_bytes"] = parts["argument_bytes"] + parts["output_bytes"] + parts["temp_bytes"] - parts["alias_bytes"]
    return parts


def environment(command: Sequence[str]) -> dict[str, Any]:
    """The machine, the versions, the date, the command and the commit, for a benchmark report."""
    from lra.training.run_files import git_commit

    dev = jax.devices()[0]
    return {
        "device_kind": dev.device_kind,
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "jax_version": jax.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(command),
        "git_commit": git_commit(),
    }
