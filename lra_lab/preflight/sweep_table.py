"""``python -m lra_lab.preflight sweep GRID``: every distinct config of a sweep grid on one target.

The summary (written as JSON beside the markdown table) is the record the README's cost figures
are tied to; the table is rendered from it alone, so a table and its record cannot disagree.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lra.console import GIB
from lra_lab.preflight import estimate, targets


def sweep_summary(
    grid: str,
    preset: str,
    target_name: str,
    *,
    tasks=None,
    variants=None,
    group_seeds: bool = False,
    python: str = sys.executable,
    use_cache: bool = True,
    jobs: int = 1,
) -> dict[str, Any]:
    """Compile each distinct (task, variant) once (``jobs`` child processes at a time: a TPU compile
    takes about one core and 3.5 GB) and gather one row per config, in the grid's order."""
    from lra_lab.experiments.sweep import GRIDS, REPO, expand
    from lra_lab.preflight.check import preflight

    runs = expand(grid, preset, tasks=tasks, variants=variants, group_seeds=group_seeds)
    seeds = len(GRIDS[grid].seeds) if group_seeds else 1
    distinct: dict[tuple[str, str], str] = {}
    for run in runs:
        distinct.setdefault((run.task, run.variant.label), f"{run.config_path}:{run.config_arg}")

    def one(item: tuple[int, tuple[tuple[str, str], str]]) -> dict[str, Any]:
        i, ((task, label), spec) = item
        print(f"[{i}/{len(distinct)}] {task} {label}: started", flush=True)
        r = preflight(
            spec,
            target_name,
            seeds=seeds,
            python=python,
            use_cache=use_cache,
            label=f"{task} {label}" if jobs > 1 else "",
        )
        print(f"[{i}/{len(distinct)}] {task} {label}: {r['verdict']}", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, enumerate(distinct.items(), 1)))
    rows = []
    for ((task, label), spec), r in zip(distinct.items(), results, strict=False):
        spec = spec.replace(f"{REPO}/", "")  # the record names the config as the repository does
        st = r.get("step_time")
        ok = r.get("status") == "ok"
        rows.append(
            dict(
                task=task,
                variant=label,
                config=spec,
                verdict=r["verdict"],
                detail=r["verdict_detail"],
                runs=sum(1 for x in runs if (x.task, x.variant.label) == (task, label)),
                memory_gib=r["memory"]["total"] / GIB if ok and r.get("memory") else None,
                gflop_per_step=r["cost"]["flops"] / 1e9 if ok else None,
                hours_per_run=st["estimate"] * r["num_train_steps"] / 3600 if st else None,
                compile_seconds=r.get("compile_seconds"),
                num_params=r.get("num_params"),
                record={**{k: v for k, v in r.items() if k != "traceback"}, "config": spec},
            )
        )  # memory breakdown, versions, step time
    target = targets.parse(target_name)
    estimated = [row for row in rows if row["hours_per_run"] is not None]
    total = sum(row["hours_per_run"] * row["runs"] for row in estimated)
    not_fitting = sum(row["hours_per_run"] * row["runs"] for row in estimated if row["verdict"] != "fits")
    return dict(
        grid=grid,
        preset=preset,
        target=target.name,
        target_description=target.description,
        devices=target.devices,
        tasks=tasks,
        variants=variants,
        group_seeds=group_seeds,
        seeds_per_program=seeds,
        programs=len(runs),
        assumed_mfu=estimate.ASSUMED_MFU,
        rows=rows,
        total_hours=total,
        device_hours=total * target.devices,
        hours_not_fitting=not_fitting,
        configs_not_fitting=sum(row["verdict"] == "does not fit" for row in rows),
        configs_without_estimate=len(rows) - len(estimated),
    )


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def render(s: dict[str, Any]) -> str:
    """The summary as a markdown table with its command and totals."""
    subset = (f" --tasks {' '.join(s['tasks'])}" if s["tasks"] else "") + (
        f" --variants {' '.join(s['variants'])}" if s["variants"] else ""
    )
    mfu = f"{s['assumed_mfu']:.0%}"
    price, currency = s.get("price_per_hour"), s.get("currency", "USD")  # absent: hours only
    head = [
        f"# Preflight: {s['grid']}, preset {s['preset']}, on {s['target']} ({s['target_description']})",
        "",
        f"Command: `python -m lra_lab.preflight sweep {s['grid']} --preset {s['preset']} --target {s['target']}"
        f"{subset}{' --group-seeds on' if s['group_seeds'] else ''}`{' (a subset of the grid)' if subset else ''}. "
        "Each distinct config was compiled once for the target (abstract inputs, nothing trained); "
        + (f"seeds vmapped: {s['seeds_per_program']} per program. " if s["group_seeds"] else "one seed per program. ")
        + f"Hours are roofline estimates at {mfu} assumed MFU: real runs are slower (evaluation, input "
        "pipeline and overheads not included)."
        + (
            f" Cost: device-hours x {price:,.2f} {currency} per device-hour (`--price-per-hour {price:g}`)."
            if price is not None
            else ""
        ),
        "",
        "| task | variant | verdict | GiB per device | GFLOP per step | est. hours per run | "
        + (f"est. {currency} per run | " if price is not None else "")
        + "runs | detail |",
        "|---|---|---|---:|---:|---:|" + ("---:|" if price is not None else "") + "---:|---|",
    ]

    def cost(r: dict[str, Any]) -> str:
        if price is None:
            return ""
        hours = r["hours_per_run"]
        return f"{_num(None if hours is None else hours * s['devices'] * price, ',.2f')} | "

    rows = [
        f"| {r['task']} | {r['variant']} | {r['verdict']} | {_num(r['memory_gib'], '.2f')} | "
        f"{_num(r['gflop_per_step'], ',.0f')} | {_num(r['hours_per_run'], ',.2f')} | {cost(r)}{r['runs']} | "
        f"{r['detail'][:240].replace('|', '/')} |"
        for r in s["rows"]
    ]
    notes = []
    if s["configs_not_fitting"]:
        notes.append(
            f"{s['configs_not_fitting']} config(s) do not fit as configured (see each row's fix)"
            + (
                f", {s['hours_not_fitting']:,.2f} of these hours are theirs, counted as if they ran"
                if s["hours_not_fitting"]
                else ""
            )
        )
    if s["configs_without_estimate"]:
        notes.append(f"{s['configs_without_estimate']} config(s) without an estimate, not in the total")
    foot = [
        "",
        f"Grid total: {s['programs']} program(s) (runs{', seeds vmapped' if s['group_seeds'] else ''}), "
        f"about {s['total_hours']:,.2f} hours on {s['target_description']}, i.e. {s['device_hours']:,.1f} "
        f"device-hours (estimate at {mfu} MFU, run one after another)"
        + (
            f", about {s['device_hours'] * price:,.2f} {currency} at {price:,.2f} {currency} per device-hour"
            if price is not None
            else ""
        )
        + "".join(f"; {n}" for n in notes)
        + ".",
    ]
    return "\n".join(head + rows + foot) + "\n"


def sweep_table(grid: str, preset: str, target_name: str, **kwargs: Any) -> str:
    """The markdown table of :func:`sweep_summary`."""
    return render(sweep_summary(grid, preset, target_name, **kwargs))
