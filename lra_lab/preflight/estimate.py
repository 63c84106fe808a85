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

from lra.console import GIB
from lra_lab.preflight.targets import Target

ASSUMED_MFU = 0.3
HEADROOM = 0.95  # leave 5% of device memory to the runtime


def peak_flops(target: Target, dtype: str, cpu_rate: float | None = None) -> float | None:
    if target.kind == "cpu":
        return cpu_rate
    assert target.chip is not None  # only the CPU target has no chip
    return target.chip.bf16_flops if "bfloat16" in dtype else target.chip.f32_flops


def memory_capacity(target: Target, cpu_bytes: int | None = None) -> int | None:
    if target.kind == "cpu":
        return cpu_bytes
    assert target.chip is not None  # only the CPU target has no chip
    return target.chip.memory_bytes


def step_times(
    result: dict[str, Any], target: Target, cpu_rate: float | None = None, cpu_bandwidth: float | None = None
) -> dict[str, float] | None:
    """Roofline lower bound and the MFU estimate of one step, in seconds (per device: the program is SPMD)."""
    peak = peak_flops(target, result["dtype"], cpu_rate)
    if target.kind == "cpu":
        bandwidth = cpu_bandwidth
    else:
        assert target.chip is not None  # only the CPU target has no chip
        bandwidth = target.chip.bandwidth
    flops, moved = result["cost"]["flops"], result["cost"]["bytes_accessed"]
    if not peak or not bandwidth or flops <= 0:
        return None
    lower = max(flops / peak, moved / bandwidth)
    return {
        "lower_bound": lower,
        "estimate": max(lower, flops / (peak * ASSUMED_MFU)),
        "mfu": ASSUMED_MFU,
        "peak_flops": peak,
        "bandwidth": bandwidth,
    }


EXHAUSTED = re.compile(r"HLO temporaries \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)")


def _fixes(result: dict[str, Any], total: float, fixed: float, usable: float, scales: str) -> str:
    """What would make ``total`` bytes per device fit in ``usable``: a smaller per-device batch (the
    part above ``fixed`` taken as linear in the batch), bf16, or more devices at this global batch."""
    devices = int(result["devices"])
    per_row = max(1.0, (total - fixed) / max(1, int(result["global_batch"]) // devices))
    largest = int((usable - fixed) // per_row)
    fixes = []
    if largest >= 1:
        fixes.append(f"a per-device batch of <= {largest} (estimated: {scales} taken as linear in the batch)")
    if "bfloat16" not in str(result["dtype"]):
        fixes.append("config.model.dtype=bfloat16")
    fixes.append(f">= {math.ceil(devices * total / usable)} devices at this global batch")
    return ", or ".join(fixes)


def _exhausted(result: dict[str, Any]) -> str:
    """The TPU compiler's refusal, with the fixes its numbers allow."""
    m = EXHAUSTED.search(result.get("error", ""))
    if not m or "global_batch" not in result:
        return f"the compiler ran out of device memory ({result.get('error', '')[:160]})"
    needed, available = float(m.group(1)), float(m.group(2))
    return (
        f"the compiler ran out of device memory: temporaries need {needed:g}G of {available:g}G per device; try "
        + _fixes(result, needed * GIB, 0.0, available * GIB * HEADROOM, "temporaries")
    )


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
    if total <= usable:
        return "fits", f"{total / GIB:.3g} GiB of {capacity / GIB:.2f} GiB per device ({100 * total / capacity:.1f}%)"
    fixes = _fixes(result, total, memory["argument"] + memory["generated_code"], usable, "memory")
    return "does not fit", (
        f"needs {total / GIB:.2f} GiB per device, {(total - usable) / GIB:.2f} GiB over "
        f"{HEADROOM:.0%} of {capacity / GIB:.2f} GiB; try " + fixes
    )


def cost_text(device_hours: float, price_per_hour: float, currency: str) -> str:
    """What the device time costs: ``"12.3 device-hours x 2.50 USD = 30.75 USD"`` (``price_per_hour``
    is per device-hour, the way clouds price a chip or a GPU; the estimate's hours are the roofline's
    at the assumed MFU, so the money is as rough as they are)."""
    return (
        f"{device_hours:,.2f} device-hours x {price_per_hour:,.2f} {currency} = "
        f"{device_hours * price_per_hour:,.2f} {currency}"
    )


def check_price(price_per_hour: float | None) -> None:
    """A price must be a positive, finite number (one ValueError naming the option)."""
    if price_per_hour is not None and not (math.isfinite(price_per_hour) and price_per_hour > 0):
        raise ValueError(f"--price-per-hour {price_per_hour}: give the price of one device-hour, a positive number")
