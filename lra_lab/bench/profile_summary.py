"""What limits a training step, from a ``--profile`` trace: ``python -m lra_lab.bench.profile_summary DIR``.

Reads the newest ``perfetto_trace.json.gz`` under DIR (``python -m lra.train ... --profile=20:10``
writes one into ``<workdir>/profile``) and splits the traced steps' wall time into:

* host input: the ``host_batch`` spans (building each seed's batch and placing it on the devices);
* device busy: the union of the device's kernel intervals (overlapping streams counted once);
* idle device: the rest of the window, i.e. gaps between kernels (launch overhead, host
  dispatch, synchronisation) plus any time the device waited for input.

The verdict names the largest share. Device timelines are the trace's processes named
``/device:...`` (GPU, TPU); on a GPU the kernels are the ``Stream`` threads' events, and op names
come from the ``XLA Ops`` thread where the trace has one (else the kernels' names). A CPU trace has
no device timeline: XLA's CPU ops run inside the host's call, so only the host split is given.
Writes ``profile_summary.md`` and ``.json`` beside the trace folder's root (DIR) and prints the table.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STEP, INPUT = "train", "host_batch"


def find_trace(folder: Path) -> Path:
    traces = sorted(folder.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise FileNotFoundError(
            f"no perfetto_trace.json.gz under {folder}: run python -m lra.train with "
            f"--profile=START:COUNT first (it writes <workdir>/profile)"
        )
    return traces[-1]


def load_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by [start, end) intervals (microseconds in, seconds out)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total / 1e6


def summarize(events: list[dict[str, Any]], top: int = 15) -> dict[str, Any]:
    """The breakdown of the traced steps (see the module docstring); times in seconds."""
    processes = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and "pid" in e
    }
    threads = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and "pid" in e
    }
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    steps = [e for e in spans if e.get("name") == STEP]
    if not steps:
        raise ValueError("the trace has no 'train' step markers: it was not written by lra.train --profile")
    window = (min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps))
    device_pids = {pid for pid, name in processes.items() if name.startswith("/device:")}
    device = [e for e in spans if e["pid"] in device_pids]
    named = lambda e: threads.get((e["pid"], e.get("tid")), "")  # noqa: E731
    kernels = [e for e in device if named(e).startswith("Stream")] or [
        e for e in device if named(e) not in ("XLA Modules", "XLA Ops", "Steps")
    ]
    ops = [e for e in device if named(e) == "XLA Ops"] or kernels
    if kernels:  # the device finishes after the host's last step marker
        window = (window[0], max(window[1], max(e["ts"] + e["dur"] for e in kernels)))
    wall = (window[1] - window[0]) / 1e6
    host_input = sum(e["dur"] for e in spans if e.get("name") == INPUT and window[0] <= e["ts"] <= window[1]) / 1e6
    n = len(steps)
    out: dict[str, Any] = {
        "steps": n,
        "step_numbers": sorted(int(e.get("args", {}).get("step_num", -1)) for e in steps),
        "wall_seconds": wall,
        "step_seconds": wall / n,
        "host_input_seconds_per_step": host_input / n,
        "host_input_fraction": host_input / wall if wall else 0.0,
        "device_timeline": bool(kernels),
        "device_threads": sorted({named(e) for e in kernels}),
    }
    if kernels:
        busy = union_seconds(
            (max(e["ts"], window[0]), min(e["ts"] + e["dur"], window[1]))
            for e in kernels
            if e["ts"] + e["dur"] > window[0] and e["ts"] < window[1]
        )
        by_op: dict[str, list[float]] = collections.defaultdict(list)
        for e in ops:
            by_op[e["name"]].append(e["dur"] / 1e6)
        total_op = sum(sum(v) for v in by_op.values()) or 1.0
        out.update(
            {
                "device_busy_seconds_per_step": busy / n,
                "device_busy_fraction": busy / wall if wall else 0.0,
                "device_idle_seconds_per_step": (wall - busy) / n,
                "kernels_per_step": len(kernels) / n,
                "mean_kernel_microseconds": sum(e["dur"] for e in kernels) / len(kernels),  # trace times are us
                "top_ops": [
                    {
                        "name": name,
                        "seconds_per_step": sum(d) / n,
                        "calls_per_step": len(d) / n,
                        "share": sum(d) / total_op,
                    }
                    for name, d in sorted(by_op.items(), key=lambda kv: -sum(kv[1]))[:top]
                ],
            }
        )
    out["verdict"] = verdict(out)
    return out


def verdict(s: dict[str, Any]) -> str:
    if not s["device_timeline"]:
        return (
            f"no device timeline (a CPU trace): host input is {100 * s['host_input_fraction']:.0f}% of the "
            f"step; the rest is XLA's CPU execution and dispatch"
        )
    busy, inp = s["device_busy_fraction"], s["host_input_fraction"]
    if busy >= 0.8:
        top = s["top_ops"][0] if s["top_ops"] else None
        return f"kernel-bound: the device is busy {100 * busy:.0f}% of the step" + (
            f"; the largest op is {top['name']} ({100 * top['share']:.0f}% of op time)" if top else ""
        )
    if inp >= 0.5:
        return f"input-bound: building and placing batches takes {100 * inp:.0f}% of the step"
    return (
        f"launch/dispatch-bound: the device idles {100 * (1 - busy):.0f}% of the step between "
        f"{s['kernels_per_step']:.0f} kernels per step (mean {s['mean_kernel_microseconds']:.0f} us each)"
    )


def markdown(s: dict[str, Any], trace: Path) -> str:
    ms = lambda x: f"{1e3 * x:.2f} ms"  # noqa: E731
    lines = [
        f"# Step profile: {trace}",
        "",
        f"Verdict: {s['verdict']}.",
        "",
        "| quantity | per step | share of the step |",
        "|---|---:|---:|",
        f"| wall time ({s['steps']} steps traced) | {ms(s['step_seconds'])} | 100% |",
        f"| host input (host_batch) | {ms(s['host_input_seconds_per_step'])} | "
        f"{100 * s['host_input_fraction']:.1f}% |",
    ]
    if s["device_timeline"]:
        lines += [
            f"| device busy (union of kernels) | {ms(s['device_busy_seconds_per_step'])} | "
            f"{100 * s['device_busy_fraction']:.1f}% |",
            f"| device idle (gaps) | {ms(s['device_idle_seconds_per_step'])} | "
            f"{100 * (1 - s['device_busy_fraction']):.1f}% |",
            f"| kernels | {s['kernels_per_step']:.0f} (mean {s['mean_kernel_microseconds']:.1f} us) | |",
            "",
            f"Device threads: {', '.join(s['device_threads'])}.",
            "",
            "| op | ms per step | calls per step | share of op time |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| `{o['name'][:90]}` | {1e3 * o['seconds_per_step']:.3f} | {o['calls_per_step']:.1f} | "
            f"{100 * o['share']:.1f}% |"
            for o in s["top_ops"]
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="the --profile folder (<workdir>/profile) or a trace folder in it")
    p.add_argument("--top", type=int, default=15, help="ops listed")
    args = p.parse_args(argv)
    try:
        trace = find_trace(args.folder)
        summary = summarize(load_events(trace), args.top)
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary["trace"] = str(trace)
    (args.folder / "profile_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary, trace)
    (args.folder / "profile_summary.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
