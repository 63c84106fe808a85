"""What ``python -m lra_lab.diagnose memory`` writes besides the JSON (:mod:`lra_lab.reports.diagnostics`):
each run's memory heatmaps, the memory statistics' curves during training, the degradation figure
and the markdown table of the statistics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from lra.memory_stats import DISTINCT_COSINE, STATS

TASK_NAMES = {"listops": "ListOps", "text": "Text", "matching": "Matching", "image": "Image"}
STAT_WORDS = {
    "distinct_vectors": "distinct vectors",
    "effective_rank": "effective rank",
    "mean_pairwise_cosine": "mean pairwise cosine",
    "packing_entropy": "packing entropy / log(tokens)",
}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value.is_integer() and digits == 0:
        return str(int(value))
    return f"{value:.{digits}f}"


def _panel_note(first: dict[str, Any], key: str, cells: int) -> str:
    parts = [
        f"{_fmt(first[f'{key}/distinct_vectors'], 0)} distinct of {cells} cells",
        f"eff. rank {_fmt(first[f'{key}/effective_rank'], 1)}",
    ]
    if first.get(f"{key}/mean_pairwise_cosine") is not None:
        parts.append(f"mean cos {_fmt(first[f'{key}/mean_pairwise_cosine'], 2)}")
    return ", ".join(parts)


def heatmap_figure(run: dict[str, Any], probed: dict[str, Any], path: Path) -> Path:
    from lra_lab.reports import memory_figures

    cells = run["memory_size"]
    blocks = len(probed["block_memories"])
    panels = [
        (
            f"{run['title']}: learned initial memory\n{_panel_note(probed['first_example'], 'initial', cells)}",
            probed["initial_memory"],
        )
    ]
    for i, memory in enumerate(probed["block_memories"]):
        panels.append(
            (f"after block {i + 1} of {blocks}\n{_panel_note(probed['first_example'], f'block{i}', cells)}", memory)
        )
    batch = probed["batch"]
    title = (
        f"{run['title']}, seed {run['seed']}: memory at the best checkpoint (step {run['checkpoint_step']}), "
        f"first validation example ({batch['first_example_tokens']} tokens)"
    )
    note = f"distinct: cells grouped at cosine >= {DISTINCT_COSINE}; {run['workdir']}"
    return memory_figures.memory_heatmaps(panels, path, title, note)


def curves_figure(runs: list[dict[str, Any]], records: dict[str, list[dict[str, Any]]], path: Path) -> Path | None:
    from lra_lab.reports import memory_figures

    curves: dict[str, dict[str, dict[str, dict[int, float]]]] = {}
    for run in runs:
        recs = records.get(run["run"], [])
        if not recs:
            continue
        by_memory: dict[str, dict[str, dict[int, float]]] = {}
        blocks = sorted({int(k.split("/")[0][5:]) for r in recs for k in r if re.fullmatch(r"block\d+/.+", k)})
        for name, prefix in [("initial memory", "initial")] + [(f"block {b + 1}", f"block{b}") for b in blocks]:
            by_memory[name] = {
                stat: {r["step"]: r[f"{prefix}/{stat}"] for r in recs if f"{prefix}/{stat}" in r}
                for stat in (*STATS, "packing_entropy")
            }
        label = run["title"] + (f", seed {run['seed']}" if len({r["seed"] for r in runs}) > 1 else "")
        if label in curves:
            label += f" [{run['run']}]"
        curves[label] = by_memory
    if not curves:
        return None
    stat_titles = [
        (k, STAT_WORDS[k] + ("\n(1 = uniform)" if k == "packing_entropy" else "")) for k in (*STATS, "packing_entropy")
    ]
    return memory_figures.memory_curves(
        curves, stat_titles, path, "Memory statistics during training (fixed validation batch; batch means)"
    )


def markdown_table(runs: list[dict[str, Any]], command: str) -> str:
    blocks = max(r["num_blocks"] for r in runs)
    examples = sorted({r["batch"]["examples"] for r in runs})
    steps = sorted({r["checkpoint_step"] for r in runs})
    lines = [
        f"<!-- regenerate: {command} -->",
        "# Memory degradation statistics",
        "",
        f"Regenerate with `{command}`. Each run at its best checkpoint (by validation accuracy; step "
        f"{', '.join(map(str, steps))}, also in the *step* column), on a fixed batch: the first "
        f"{' / '.join(map(str, examples))} validation examples in file order "
        f"(`lra.memory_stats.probe_inputs(data.validation, config.eval_batch_size)`).",
        "",
        f"*distinct*: memory cells grouped at cosine >= {DISTINCT_COSINE}; *rank*: effective rank (exp of the "
        "entropy of the normalised singular values); *cos*: mean pairwise cosine of the cells; *entropy*: packing "
        "attention's entropy / log(real tokens), 1 = uniform. Block statistics are batch means; blocks count "
        "from 1 (`block0` in the JSON and metrics.jsonl is block 1).",
        "",
    ]
    header = [
        "run",
        "task",
        "preset",
        "seed",
        "memory cells",
        "step",
        "test acc. (%)",
        "initial distinct",
        "initial rank",
        "initial cos",
    ]
    for b in range(blocks):
        header += [f"block {b + 1} distinct", f"block {b + 1} rank", f"block {b + 1} cos", f"block {b + 1} entropy"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in runs:
        s = r["stats"]
        acc = r["test_accuracy"]
        row = [
            r["variant"],
            TASK_NAMES.get(r["task"], r["task"]),
            r["preset"],
            str(r["seed"]),
            str(r["memory_size"]),
            str(r["checkpoint_step"]),
            "–" if acc is None else f"{100 * acc:.1f}",
            _fmt(s["initial/distinct_vectors"], 0),
            _fmt(s["initial/effective_rank"], 2),
            _fmt(s["initial/mean_pairwise_cosine"]),
        ]
        for b in range(blocks):
            if f"block{b}/distinct_vectors" in s:
                row += [
                    _fmt(s[f"block{b}/distinct_vectors"], 2),
                    _fmt(s[f"block{b}/effective_rank"], 2),
                    _fmt(s[f"block{b}/mean_pairwise_cosine"]),
                    _fmt(s[f"block{b}/packing_entropy"]),
                ]
            else:
                row += ["–"] * 4
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Runs: " + "; ".join(f"{r['run']} = `{r['workdir']}`" for r in runs), ""]
    return "\n".join(lines)


def degradation_figure(runs: list[dict[str, Any]], memories: dict[str, np.ndarray], path: Path) -> Path:
    from lra_lab.reports import memory_figures

    order = sorted(range(len(runs)), key=lambda i: (runs[i]["variant"].endswith("(reference)"), i))
    mixed = len({(x["task"], x["preset"]) for x in runs}) > 1  # tell same-named variants apart
    entries = []
    for i in order:
        r = runs[i]
        last = r["num_blocks"] - 1
        entries.append(
            {
                "variant": r["variant"]
                + (f" [{TASK_NAMES.get(r['task'], r['task'])}, {r['preset']}]" if mixed else ""),
                "reference": r["variant"].endswith("(reference)"),
                "cells": r["memory_size"],
                "distinct_vectors": r["stats"].get(f"block{last}/distinct_vectors"),
                "mean_pairwise_cosine": r["stats"].get(f"block{last}/mean_pairwise_cosine"),
                "packing_entropy": r["stats"].get(f"block{last}/packing_entropy"),
                "memory": memories.get(r["run"]),
            }
        )
    tasks = sorted({TASK_NAMES.get(r["task"], r["task"]) for r in runs})
    presets = sorted({r["preset"] for r in runs})
    title = (
        f"Memory degradation ({', '.join(tasks)}; {', '.join(presets)} preset): does the learned memory "
        f"collapse to a few vectors, and does packing attend uniformly?"
    )
    return memory_figures.memory_degradation(entries, path, title)
