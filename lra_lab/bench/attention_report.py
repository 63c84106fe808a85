"""The attention-layer benchmark's checks and report: per family, flat time per token, faster than
softmax at 4K, linear memory (the thresholds below); the markdown table and the figure
(lra_lab/bench/attention.py measures and writes the files; its docstring gives the method)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.console import mib_cell
from lra_lab.bench.projections import REFERENCES

FLAT_TIME_FACTOR = 1.5  # time per token may grow this much from the shortest to the longest length
LINEAR_MEMORY_SLACK = 1.25  # memory may grow this much more than the length does
SPEED_CHECK_LENGTH = 4096  # "faster than softmax" is checked here


def _ok(cases: list[dict[str, Any]], family: str) -> dict[int, dict[str, Any]]:
    return {c["n"]: c for c in cases if c["family"] == family and c["status"] == "ok"}


def checks(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: flat time per token, faster than softmax at 4K, linear memory."""
    soft = _ok(cases, "softmax")
    out = {}
    for family in dict.fromkeys(c["family"] for c in cases):
        ok = _ok(cases, family)
        result: dict[str, Any] = {}
        if len(ok) >= 2:
            lo, hi = min(ok), max(ok)
            growth = ok[hi]["us_per_token"] / ok[lo]["us_per_token"]
            result["time_per_token"] = dict(short=lo, long=hi, ratio=growth, passed=growth <= FLAT_TIME_FACTOR)
            if "ns_per_score" in ok[lo] and "ns_per_score" in ok[hi]:
                per_score = ok[hi]["ns_per_score"] / ok[lo]["ns_per_score"]
                result["time_per_score"] = dict(
                    short=lo, long=hi, ratio=per_score, passed=per_score <= FLAT_TIME_FACTOR
                )
            mem_lo, mem_hi = ((ok[k].get("memory") or {}).get("total_bytes") for k in (lo, hi))
            if mem_lo and mem_hi:
                ratio = mem_hi / mem_lo
                result["memory"] = dict(
                    short=lo, long=hi, ratio=ratio, length_ratio=hi / lo, passed=ratio <= LINEAR_MEMORY_SLACK * hi / lo
                )
        if family != "softmax" and SPEED_CHECK_LENGTH in ok and SPEED_CHECK_LENGTH in soft:
            rel = ok[SPEED_CHECK_LENGTH]["seconds"] / soft[SPEED_CHECK_LENGTH]["seconds"]
            result["vs_softmax"] = dict(n=SPEED_CHECK_LENGTH, ratio=rel, passed=rel < 1.0)
        out[family] = result
    return out


def _mark(check: dict[str, Any] | None, fmt: str) -> str:
    if not check:
        return "n/a"
    return fmt.format(**check) + (" ✓" if check["passed"] else " ✗")


def markdown(report: dict[str, Any]) -> str:
    env, s, cases = report["environment"], report["settings"], report["cases"]
    soft = _ok(cases, "softmax")
    lines = [
        "# Attention scaling: one layer, forward + backward",
        "",
        f"{env['device_kind']} ({env['backend']}, {env['cpu_count']} CPUs), jax {env['jax_version']}, "
        f"{env['date']}, commit {env['git_commit']}.",
        f"Batch {s['batch']}, width {s['dim']}, {s['num_heads']} heads, qkv {s['qkv_dim']}, {s['dtype']}; "
        f"median of {s['repeats']} calls after one warm-up. Memory: XLA's compiled-step accounting "
        "(arguments + outputs + temporaries).",
        f"Command: `{env['command']}`",
        "",
        "| family | N | status | ms / call | µs / token | ns / score | × softmax | memory MiB | device peak MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        if c["status"] != "ok":
            lines.append(f"| {c['family']} | {c['n']} | {c['status']}: {c['reason']} | | | | | | |")
            continue
        rel = f"{c['seconds'] / soft[c['n']]['seconds']:.2f}" if c["n"] in soft else ""
        per_score = f"{c['ns_per_score']:.2f}" if "ns_per_score" in c else ""
        lines.append(
            f"| {c['family']} | {c['n']} | ok{' (1 call)' if c.get('note') else ''} | {c['seconds'] * 1e3:,.1f} | "
            f"{c['us_per_token']:.2f} | {per_score} | {rel} | {mib_cell((c.get('memory') or {}).get('total_bytes'))} | "
            f"{mib_cell(c.get('device_peak_bytes'))} |"
        )
    lines += [
        "",
        f"Checks: time per token at the longest length within {FLAT_TIME_FACTOR}× of the shortest; "
        f"time below softmax's at N={SPEED_CHECK_LENGTH}; memory growing at most "
        f"{LINEAR_MEMORY_SLACK}× the length ratio (linear). Where the number of scores is set by a "
        "pattern (softmax N², dispersed's Algorithm 2), time per score gets the same flatness check.",
        "",
        *(
            [
                "`projections` is a reference row, not a family: the q/k/v/out projections alone, "
                "y = out(q + k + v). Every family has these dense layers, so their time-per-token ratio "
                "is what this machine charges before any attention is computed.",
                "",
            ]
            if any(c["family"].partition(":")[0] in REFERENCES for c in cases)
            else []
        ),
        "| family | time/token long ÷ short | time/score long ÷ short | × softmax at 4K | memory long ÷ short |",
        "|---|---|---|---|---|",
    ]
    for family, ch in report["checks"].items():
        lines.append(
            f"| {family} | {_mark(ch.get('time_per_token'), '{ratio:.2f} ({long}÷{short})')} | "
            f"{_mark(ch.get('time_per_score'), '{ratio:.2f}')} | "
            f"{_mark(ch.get('vs_softmax'), '{ratio:.2f}')} | "
            f"{_mark(ch.get('memory'), '{ratio:.1f} (length ×{length_ratio:.0f})')} |"
        )
    return "\n".join(lines) + "\n"


def _length_label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def plot(report: dict[str, Any], path: Path) -> None:
    """Time and memory against N, log-log, from a report (also one read back from its JSON:
    ``scripts/bench_attention.py --replot``). The legend sits right of both panels, off the data;
    the settings (batch, width, heads) are in the title; a family's skipped lengths are written
    where its line stops, with the predicted memory drawn hollow when XLA gave one."""
    try:
        import matplotlib
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f'{e}: the figure needs the tables extra, pip install -e ".[tables]"; the '
            "JSON is written: redraw it with scripts/bench_attention.py --replot JSON",
            name=e.name,
        ) from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained")
    cases = report["cases"]
    colours = [plt.get_cmap("tab10")(i) for i in range(10)] + [plt.get_cmap("Dark2")(i) for i in range(8)]
    markers = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h"]
    families = list(dict.fromkeys(c["family"] for c in cases))
    attention_families = [f for f in families if f.partition(":")[0] not in REFERENCES]
    skipped_notes = []
    for family in families:
        ok = _ok(cases, family)
        ns = sorted(ok)
        style: dict[str, Any]
        if family.partition(":")[0] in REFERENCES:
            style = dict(color="black", linestyle="--", marker="x", label=f"{family} (reference: dense layers only)")
        else:
            i = attention_families.index(family)
            style = dict(color=colours[i % len(colours)], linestyle="-", marker=markers[i % len(markers)], label=family)
        if ns:
            ax_t.plot(ns, [ok[n]["seconds"] for n in ns], markersize=5, **style)
            mem = [(n, (ok[n].get("memory") or {}).get("total_bytes")) for n in ns]
            mem = [(n, b / 2**20) for n, b in mem if b]
            if mem:
                ax_m.plot(*zip(*mem, strict=False), markersize=5, **style)
        missing = sorted((c for c in cases if c["family"] == family and c["status"] != "ok"), key=lambda c: c["n"])
        if not missing:
            continue
        missed = ", ".join(_length_label(c["n"]) for c in missing)
        skipped_notes.append(f"{family} at N = {missed} {missing[0]['status']}: {missing[0].get('reason', '')}")
        if ns:
            last = ns[-1]
            ax_t.annotate(
                f"{family}: N = {missed} {missing[0]['status']}",
                (last, ok[last]["seconds"]),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color=style["color"],
            )
        predicted = [
            (c["n"], c["memory"]["total_bytes"] / 2**20) for c in missing if (c.get("memory") or {}).get("total_bytes")
        ]
        if predicted:
            start = [(ns[-1], ok[ns[-1]]["memory"]["total_bytes"] / 2**20)] if ns and ok[ns[-1]].get("memory") else []
            ax_m.plot(*zip(*(start + predicted), strict=False), color=style["color"], linestyle=":", marker=None)
            ax_m.plot(
                *zip(*predicted, strict=False),
                linestyle="none",
                marker=style["marker"],
                markersize=7,
                markerfacecolor="white",
                markeredgecolor=style["color"],
            )
            n, mib = predicted[-1]
            ax_m.annotate(
                f"{family} {_length_label(n)}: predicted, not run",
                (n, mib),
                xytext=(-8, 1),
                textcoords="offset points",
                ha="right",
                va="bottom",
                fontsize=8,
                color=style["color"],
            )
    lengths = sorted({c["n"] for c in cases})
    for ax, ylabel in ((ax_t, "seconds per forward + backward"), (ax_m, "memory (MiB, XLA's compiled step)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [_length_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    if len(lengths) > 1:  # room on the right for the notes of a line that stops early
        ax_t.set_xlim(lengths[0] / 1.2, lengths[-1] * (2.0 if skipped_notes else 1.2))
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8, title="family", title_fontsize=8)
    env, s = report["environment"], report["settings"]
    fig.suptitle(
        f"One attention layer, forward + backward: batch {s['batch']}, width {s['dim']}, "
        f"{s['num_heads']} heads, qkv {s['qkv_dim']}, {s['dtype']}; median of {s['repeats']} calls\n"
        f"{env['device_kind']}"
        + (f" ({env['cpu_count']} CPUs)" if env.get("backend") == "cpu" else "")
        + f", jax {env['jax_version']}",
        fontsize=10,
    )
    if skipped_notes:
        fig.supxlabel("skipped: " + "; ".join(skipped_notes), fontsize=8, color="dimgray")
    fig.savefig(path, dpi=120)
    plt.close(fig)
