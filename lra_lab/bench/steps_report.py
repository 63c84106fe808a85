"""The training-step benchmark's report: its Markdown table, Table 2's view and the figure.

Written from the report dict that :func:`lra_lab.bench.steps.run_grid`'s cases and
:func:`lra_lab.bench.steps.probe` make (``write_report``), so a report can be redrawn from its JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lra.console import mib_cell
from lra.training.run_files import write_figure_atomic, write_text_atomic
from lra_lab.bench.steps import label


def markdown(report: dict[str, Any]) -> str:
    env, s = report["environment"], report["settings"]
    lines = [
        f"# Training-step benchmark: {env['device_kind']} ({env['backend']})",
        "",
        f"Command: `{env['command']}` (git {env['git_commit']}, jax {env['jax_version']}, {env['date']}; "
        f"load average at the end {'/'.join(f'{x:.1f}' for x in env.get('load_average_1_5_15min', []))}).",
        f"Model: paper-scale ListOps of each family (Table 2), overrides {s['overrides'] or 'none'}; "
        f"{s['steps']} timed steps after compilation, median of {s['repeats']} windows. "
        "Steps/s: program steps (all seeds at once); seed-steps/s = seeds x steps/s. MFU: XLA's FLOPs of the "
        "step x steps/s over a dense matmul's rate of the same dtype measured in the same run ("
        + ", ".join(f"{d}: {r / 1e12:.3g} TFLOP/s" for d, r in report["matmul_rates"].items())
        + "). "
        "Memory: XLA's compiled memory analysis"
        + (" and the device's peak (each case in its own process)." if s["isolate"] else ".")
        + (
            f" {s['jobs']} case processes ran at once: they compiled side by side and each was timed with "
            "the device to itself (lra_lab/bench/device_turns.py), so compile seconds include that sharing."
            if s.get("jobs", 1) > 1
            else ""
        ),
        *_earlier_rates_note(report),
        *_datasheet_and_xla_note(report),
        "",
        "| family | N | dtype | seeds | steps/s | seed-steps/s | GFLOP/step | MFU | MFU (datasheet) | "
        "kernels/step | memory MiB (XLA) | device peak MiB | compile s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["cases"]:
        head = f"| {label(r['family'])} | {r['length']} | {r['dtype']} | {r['seeds']} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']}: {r['reason'][:80]} |||||||||")
            continue
        mem = (r.get("memory") or {}).get("total_bytes")
        launches = r.get("launches") or {}
        lines.append(
            head + f"| {r['steps_per_second']:.3g} | {r['seed_steps_per_second']:.3g} | "
            f"{r['flops_per_step'] / 1e9:,.1f} | {100 * r['mfu']:.1f}% | "
            f"{_percent(r.get('mfu_datasheet'))} | "
            f"{_count(launches.get('kernels'))} | "
            f"{mib_cell(mem, digits=0)} | "
            f"{mib_cell(r.get('device_peak_bytes'), digits=0)} | {r['compile_seconds']:.1f} |"
        )
    lines += ["", *table2_view(report)]
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def _count(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _datasheet_and_xla_note(report: dict[str, Any]) -> list[str]:
    """The datasheet peaks MFU (datasheet) is against, and the XLA flags (command buffers) of the run."""
    peaks, xla = report.get("datasheet_peaks"), report["environment"].get("xla")
    out = []
    if peaks:
        out.append(
            f"MFU (datasheet): the same achieved FLOP/s over the {peaks['chip']}'s datasheet peak, dense "
            f"bfloat16 {peaks['bfloat16'] / 1e12:.0f} TFLOP/s; float32 against TF32 "
            f"{peaks['float32'] / 1e12:.0f} TFLOP/s (XLA's default precision runs float32 matmuls on TF32 "
            f"tensor cores; the non-tensor float32 peak is {peaks['float32_non_tensor'] / 1e12:.0f} TFLOP/s)."
        )
    elif "datasheet_peaks" in report:
        out.append("MFU (datasheet): no datasheet peak is listed for this device (lra_lab/preflight/targets.py).")
    if xla:
        out.append(
            f"XLA: XLA_FLAGS `{xla['XLA_FLAGS'] or 'unset'}`; command buffers: {xla['command_buffer']}, "
            f"minimum graph size: {xla['graph_min_size']}. Kernels per step: the compiled step's thunks, loop "
            "bodies times their trip counts (lra_lab/bench/hlo_launches.py); how many of them the runtime puts in "
            "command buffers (CUDA graphs) is decided after the compiled HLO and is not in this count."
        )
    return out


def _earlier_rates_note(report: dict[str, Any]) -> list[str]:
    """Rows resumed from an earlier invocation keep that invocation's matmul rate as their MFU base."""
    rates = report["matmul_rates"]
    earlier = {
        (r["dtype"], r["matmul_flops_per_second"])
        for r in report["cases"]
        if r["status"] == "ok"
        and r.get("matmul_flops_per_second")
        and abs(r["matmul_flops_per_second"] / rates.get(r["dtype"], float("inf")) - 1) > 1e-9
    }
    if not earlier:
        return []
    return [
        "Some rows were measured by an earlier invocation of the same grid (resumed from its partial "
        "file); their MFU is relative to that invocation's matmul rate ("
        + ", ".join(f"{d}: {r / 1e12:.3g} TFLOP/s" for d, r in sorted(earlier))
        + ")."
    ]


def table2_view(report: dict[str, Any]) -> list[str]:
    """The LRA paper's Table 2 layout: speed and memory relative to the Transformer, per length
    (float32, one seed; rows whose Transformer case is missing are left out)."""
    ok = {(r["family"], r["length"], r["dtype"], r["seeds"]): r for r in report["cases"] if r["status"] == "ok"}
    lengths = sorted({r["length"] for r in report["cases"]})
    for dtype, seeds in (("float32", 1), ("bfloat16", 1)):
        if not any(("softmax", n, dtype, seeds) in ok for n in lengths):
            continue
        out = [
            f"Relative to the Transformer ({dtype}, 1 seed; as the LRA paper's Table 2): steps/s ratio "
            "(higher is faster) / memory ratio (XLA, lower is smaller).",
            "",
            "| family | " + " | ".join(f"{n} speed | {n} memory" for n in lengths) + " |",
            "|---|" + "---:|---:|" * len(lengths),
        ]
        for family in dict.fromkeys(r["family"] for r in report["cases"]):
            cells = []
            for n in lengths:
                base, row = ok.get(("softmax", n, dtype, seeds)), ok.get((family, n, dtype, seeds))
                if base is None or row is None:
                    cells += ["", ""]
                    continue
                mb, mr = (base.get("memory") or {}).get("total_bytes"), (row.get("memory") or {}).get("total_bytes")
                cells += [
                    f"{row['steps_per_second'] / base['steps_per_second']:.2f}x",
                    f"{mr / mb:.2f}x" if mb and mr else "",
                ]
            out.append(f"| {label(family)} | " + " | ".join(cells) + " |")
        return out + [""]
    return []


def plot(report: dict[str, Any], path: Path) -> None:
    """Seed-steps/s against length, one panel per (dtype, seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in report["cases"] if r["status"] == "ok"]
    panels = sorted({(r["dtype"], r["seeds"]) for r in ok})
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels) + 2.5, 4), squeeze=False, sharey=True)
    families = list(dict.fromkeys(r["family"] for r in ok))
    colours = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(families)}  # one colour per family in every panel
    handles: dict[str, Any] = {}  # the legend lists every family, not only the last panel's
    for ax, (dtype, seeds) in zip(axes[0], panels, strict=False):
        for family in families:
            rows = sorted(
                (r for r in ok if (r["family"], r["dtype"], r["seeds"]) == (family, dtype, seeds)),
                key=lambda r: r["length"],
            )
            if rows:
                (handles[family],) = ax.plot(
                    [r["length"] for r in rows],
                    [r["seed_steps_per_second"] for r in rows],
                    marker="o",
                    color=colours[family],
                    label=label(family),
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_title(f"{dtype}, {seeds} seed{'s' if seeds > 1 else ''}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("seed-steps per second")
    axes[0][-1].legend(
        [handles[f] for f in families],
        [label(f) for f in families],
        loc="center left",
        bbox_to_anchor=(1.02, 0.5),
        fontsize=8,
    )
    env, s = report["environment"], report["settings"]
    fig.suptitle(
        f"Training steps, paper-scale ListOps models, {env['device_kind']}"
        + (f" (overrides: {s['overrides']})" if s["overrides"] else ""),
        fontsize=10,
    )
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def write_report(
    cases: list[dict[str, Any]], probed: dict[str, Any], settings: dict[str, Any], out: Path, name: str
) -> dict[str, Any]:
    """``<name>.json``, ``.md`` and ``.png`` under ``out`` (rewritten after every case, so a killed
    grid leaves a report of what it measured)."""
    report = {
        "environment": {**probed["environment"], "load_average_1_5_15min": list(os.getloadavg())},
        "settings": settings,
        "matmul_rates": probed["matmul_rates"],
        "datasheet_peaks": probed.get("datasheet_peaks"),
        "cases": cases,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / f"{name}.json", json.dumps(report, indent=2) + "\n")
    write_text_atomic(out / f"{name}.md", markdown(report))
    plot(report, out / f"{name}.png")
    return report


# -- several seeds in one program against one after another (the real training loop) -------------
