"""The CPU target's estimate against the committed CPU step benchmark (``results/bench/training_steps_cpu*.json``,
made by ``scripts/bench_training.py steps``, which times each family's own ``configs/listops_<family>.py`` model).

A preflight result matches a benchmark case when the model (parameter count), length, global batch, dtype and
seed count agree; the report then gives the benchmark's step time beside the estimate and this run's measurement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BENCH_GLOB = "training_steps_cpu*.json"


def matching_cases(result: dict[str, Any], bench_dir: Path = Path("results/bench")) -> list[dict[str, Any]]:
    out = []
    for path in sorted(bench_dir.glob(BENCH_GLOB)):
        if path.name.endswith(".partial.json"):
            continue
        try:
            cases = json.loads(path.read_text()).get("cases", [])
        except (OSError, ValueError):
            continue
        for case in cases:
            if (
                case.get("status") == "ok"
                and case.get("num_params") == result.get("num_params")
                and case.get("length") == result.get("length")
                and case.get("batch_size") == result.get("global_batch")
                and case.get("seeds") == result.get("seeds")
                and case.get("dtype") == result.get("dtype")
            ):
                out.append(dict(case, record=str(path)))
    return out


def comparison(result: dict[str, Any], bench_dir: Path = Path("results/bench")) -> dict[str, Any] | None:
    """{benchmark step seconds, FLOPs, memory; the ratios estimate/benchmark, measured/benchmark} or None."""
    cases = matching_cases(result, bench_dir)
    if not cases or result.get("status") != "ok":
        return None
    step = [1.0 / c["steps_per_second"] for c in cases]
    bench_step = sorted(step)[len(step) // 2]
    out = {
        "records": [c["record"] for c in cases],
        "bench_step_seconds": step,
        "bench_flops": cases[0].get("flops_per_step"),
        "bench_memory_bytes": (cases[0].get("memory") or {}).get("total_bytes"),
    }
    st = result.get("step_time")
    if st:
        out["estimate_over_bench"] = st["estimate"] / bench_step
        out["lower_bound_over_bench"] = st["lower_bound"] / bench_step
    if result.get("measured"):
        out["measured_over_bench"] = result["measured"]["step_seconds_median"] / bench_step
    return out


def lines(cmp: dict[str, Any] | None) -> list[str]:
    if not cmp:
        return []
    steps = ", ".join(f"{s * 1e3:,.0f} ms" for s in cmp["bench_step_seconds"])
    text = [f"  committed CPU benchmark ({', '.join(Path(r).name for r in cmp['records'])}): {steps} per step"]
    ratios = [
        f"{name} / benchmark = {cmp[key]:.2f}"
        for name, key in (
            ("estimate", "estimate_over_bench"),
            ("roofline bound", "lower_bound_over_bench"),
            ("measured now", "measured_over_bench"),
        )
        if key in cmp
    ]
    if ratios:
        text.append("  " + "; ".join(ratios))
    return text
