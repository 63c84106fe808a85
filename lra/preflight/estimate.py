"""Roofline estimates and the verdict, from a compilation's numbers and the target's specs.

A step cannot be faster than ``max(FLOPs / peak, bytes / bandwidth)`` (the roofline lower bound);
real steps are slower (kernel launch and collective overheads, imperfect fusion, padding). The
estimate divides the FLOP time by an assumed model-FLOPs utilisation (MFU), stated in every report:
``ASSUMED_MFU`` is a typical value for small transformer encoders, not a measurement of these.
"""

from __future__ import annotations

import math
import re
from typing import Any

from lra.preflight.targets import Target

ASSUMED_MFU = 0.3
HEADROOM = 0.95  # leave 5% of device memory to the runtime


def peak_flops(target: Target, dtype: str, cpu_rate: float | None = None) -> float | None:
    if target.kind == "cpu":
        return cpu_rate
    return target.chip.bf16_flops if "bfloat16" in dtype else target.chip.f32_flops


def memory_capacity(target: Target, cpu_bytes: int | None = None) -> int | None:
    return cpu_bytes if target.kind == "cpu" else target.chip.memory_bytes


def step_times(result: dict[str, Any], target: Target, cpu_rate: float | None = None,
               cpu_bandwidth: float | None = None) -> dict[str, float] | None:
    """Roofline lower bound and the MFU estimate of one step, in seconds (per device: the program is SPMD)."""
    peak = peak_flops(target, result["dtype"], cpu_rate)
    bandwidth = cpu_bandwidth if target.kind == "cpu" else target.chip.bandwidth
    flops, moved = result["cost"]["flops"], result["cost"]["bytes_accessed"]
    if not peak or not bandwidth or flops <= 0:
        return None
    lower = max(flops / peak, moved / bandwidth)
    return {"lower_bound": lower, "estimate": max(lower, flops / (peak * ASSUMED_MFU)), "mfu": ASSUMED_MFU,
            "peak_flops": peak, "bandwidth": bandwidth}


EXHAUSTED = re.compile(r"HLO temporaries \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)")


def _exhausted(result: dict[str, Any]) -> str:
    """The TPU compiler's refusal, with the fixes its numbers allow (temporaries taken as linear in the batch)."""
    m = EXHAUSTED.search(result.get("error", ""))
    if not m or "global_batch" not in result:
        return f"the compiler ran out of device memory ({result.get('error', '')[:160]})"
    needed, available = float(m.group(1)), float(m.group(2))
    devices = int(result.get("devices", 1))
    per_device = max(1, int(result["global_batch"]) // devices)
    fixes = []
    largest = int(per_device * available * HEADROOM // needed)
    if largest >= 1:
        fixes.append(f"a per-device batch of <= {largest} (estimated: temporaries taken as linear in the batch)")
    if "bfloat16" not in str(result.get("dtype", "")):
        fixes.append("config.model.dtype=bfloat16")
    fixes.append(f">= {math.ceil(devices * needed / (available * HEADROOM))} devices at this global batch")
    return (f"the compiler ran out of device memory: temporaries need {needed:g}G of {available:g}G per device; try "
            + ", or ".join(fixes))


def verdict(result: dict[str, Any], target: Target, capacity: int | None) -> tuple[str, str]:
    """("fits" / "does not fit" / "cannot tell", one line saying by how much and what would make it fit)."""
    if result.get("status") == "error":
        if result.get("resource_exhausted"):
            return "does not fit", _exhausted(result)
        return "cannot tell", f"{result['stage']} failed: {result['error'][:200]}"
    memory = result.get("memory")
    if not memory or not capacity:
        return "cannot tell", "the compiler gave no memory analysis for this target"
    total, usable = memory["total"], capacity * HEADROOM
    gib = 1024**3
    if total <= usable:
        return "fits", f"{total / gib:.3g} GiB of {capacity / gib:.2f} GiB per device ({100 * total / capacity:.1f}%)"
    per_device_batch = result["global_batch"] // result["devices"]
    fixed = memory["argument"] + memory["generated_code"]
    per_row = max(1.0, (total - fixed) / max(1, per_device_batch))
    largest = int((usable - fixed) // per_row)
    fixes = []
    if largest >= 1:
        fixes.append(f"a per-device batch of <= {largest} (estimated: memory taken as linear in the batch)")
    if "bfloat16" not in result["dtype"]:
        fixes.append("config.model.dtype=bfloat16")
    fixes.append(f">= {math.ceil(result['devices'] * total / usable)} devices at this global batch")
    return "does not fit", (f"needs {total / gib:.2f} GiB per device, {(total - usable) / gib:.2f} GiB over "
                            f"{HEADROOM:.0%} of {capacity / gib:.2f} GiB; try " + ", or ".join(fixes))
