"""Diagnostics of finished runs (the work behind the command line lra/diagnose.py). ``memory``: the
memory degradation of the memory families (the ConvLuna paper's Figure 1 and Section 2) at each
run's best checkpoint.

    python -m lra.diagnose memory --workdir runs/listops_luna-16_cpu/seed0 runs/listops_convluna-16_cpu/seed0
    python -m lra.diagnose memory --workdir RUN [RUN ...] --out results/diagnostics

For each run (a workdir written by lra.train of a memory family: luna, convluna), on a fixed
batch (the first ``eval_batch_size`` validation examples, :func:`lra.training.memory_stats.probe_inputs`):

* ``memory_<run>.png``: heatmaps (memory cell x feature) of the learned initial memory and of
  each block's output memory for the first example of the batch;
* the statistics of :mod:`lra.training.memory_stats` (distinct vectors, effective rank, mean pairwise
  cosine of the initial memory and of each block's memory, batch means; each block's packing
  entropy / log(real keys));

and across the runs: ``memory_stats.md`` / ``memory_stats.json`` (a row per run),
``memory_degradation.png`` (the last block's statistics per variant and its memory) and, when the
runs logged memory statistics during training (``config.log_memory_stats``),
``memory_curves.png``. Blocks are numbered from 1 in words and in the markdown table;
``block<k>`` keys (as in metrics.jsonl and the JSON) count from 0.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from lra.training.memory_stats import DISTINCT_COSINE, STATS
from lra.training.provenance import stamp
from lra.training.run_files import write_text_atomic

TASK_NAMES = {"listops": "ListOps", "text": "Text", "matching": "Matching", "image": "Image"}
STAT_WORDS = {
    "distinct_vectors": "distinct vectors",
    "effective_rank": "effective rank",
    "mean_pairwise_cosine": "mean pairwise cosine",
    "packing_entropy": "packing entropy / log(tokens)",
}


class DiagnoseError(ValueError):
    """A run that cannot be diagnosed; the message names the run and why."""


def memory_families() -> list[str]:
    from lra import attention

    return sorted(name for name, cls in attention.ATTENTIONS.items() if cls.uses_memory)


def run_name(config: ml_collections.ConfigDict) -> str:
    """``<variant>_seed<k>``, slugified: ``ConvLuna-16 (reference)`` seed 0 -> ``ConvLuna-16-reference_seed0``."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", str(config.variant)).strip("-") or "run"
    return f"{slug}_seed{config.seed}"


def describe(config: ml_collections.ConfigDict) -> str:
    """``ConvLuna-16 (ListOps, cpu)``."""
    return f"{config.variant} ({TASK_NAMES.get(config.task, config.task)}, {config.preset})"


def check_run(workdir: Path) -> ml_collections.ConfigDict:
    """The run's config, or a DiagnoseError: not a run, not a memory family, no best checkpoint."""
    path = workdir / "config.json"
    if not path.is_file():
        raise DiagnoseError(
            f"run {workdir}: no config.json there; --workdir takes run directories written " f"by lra.train"
        )
    from lra.training.run_files import load_run_config  # as lra.evaluate reads a run (older runs' configs upgraded)

    config = load_run_config(workdir)
    families = memory_families()
    attention = config.model.attention
    if attention not in families:
        raise DiagnoseError(
            f"run {workdir} ({config.variant}, attention {attention!r}) has no shared memory: "
            f"lra.diagnose memory takes runs of a memory family ({', '.join(families)})"
        )
    best = workdir / "checkpoints" / "best"
    if not best.is_dir() or not any(p.name.isdigit() for p in best.iterdir()):
        raise DiagnoseError(
            f"run {workdir} ({config.variant}): no best checkpoint in {best}; has the run "
            f"evaluated yet (the first evaluation is at step {config.eval_every})?"
        )
    return config


def memory_records(workdir: Path) -> list[dict[str, Any]]:
    """The ``"memory"`` records of the run's metrics.jsonl (logged with config.log_memory_stats),
    read as lra.train reads it: the torn last line a kill leaves is dropped with a warning."""
    from lra.training.run_files import MetricsLog

    return [r for r in MetricsLog(workdir / "metrics.jsonl").read() if r["split"] == "memory"]


def probe_run(workdir: Path, config: ml_collections.ConfigDict, log=print) -> dict[str, Any]:
    """Restore the best checkpoint and measure the memory on the fixed validation batch.

    Returns the flat statistics (the keys of :func:`lra.training.memory_stats.collect`), the per-example
    statistics of the first example, the memories to draw, the checkpoint step and the batch."""
    import jax
    import jax.numpy as jnp

    from lra.data import load_task
    from lra.data.types import PAD_ID
    from lra.model import build_model
    from lra.training import memory_stats
    from lra.training.checkpoints import Checkpoints

    log(f"  loading {config.task} data and building the model")
    data = load_task(config)
    model = build_model(config.model, data.vocab_size, data.num_classes, data.dual)
    sample = jnp.zeros((1,) + data.train.inputs.shape[1:], jnp.int32)
    params = jax.jit(lambda: model.init(jax.random.key(0), sample)["params"])()
    checkpoints = Checkpoints(workdir)
    try:
        try:
            best = checkpoints.restore_best({"params": params, "step": jnp.zeros((), jnp.int32)})
        except (ValueError, KeyError) as e:
            raise DiagnoseError(
                f"run {workdir} ({config.variant}): its best checkpoint does not fit the model "
                f"of its config.json: {e}"
            ) from None
    finally:
        checkpoints.close()
    if best is None:
        raise DiagnoseError(f"run {workdir} ({config.variant}): no best checkpoint in {workdir}/checkpoints/best")
    step = int(best["step"])
    params = best["params"]
    log(f"  restored the best checkpoint: step {step}")

    inputs = memory_stats.probe_inputs(data.validation, config.eval_batch_size)
    log(f"  probing the first {len(inputs)} validation examples (padded to {inputs.shape[-1]} tokens)")
    memories, entropies = jax.device_get(memory_stats.make_probe(model)(params, inputs))
    initial = np.asarray(jax.device_get(params["encoder"]["memory"]), np.float32)

    stats: dict[str, float | None] = {f"initial/{k}": v for k, v in memory_stats.memory_summary(initial).items()}
    first: dict[str, float | None] = dict(stats)
    for i, (memory, entropy) in enumerate(zip(memories, entropies, strict=False)):
        stats.update({f"block{i}/{k}": v for k, v in memory_stats.batch_summary(memory).items()})
        stats[f"block{i}/packing_entropy"] = float(entropy)
        first.update({f"block{i}/{k}": v for k, v in memory_stats.memory_summary(memory[0]).items()})
    first_doc = np.asarray(inputs[0]).reshape(-1, inputs.shape[-1])[0]  # matching: the first document
    return {
        "step": step,
        "stats": stats,
        "first_example": first,
        "initial_memory": initial,
        "block_memories": [np.asarray(m[0], np.float32) for m in memories],
        "batch": {
            "split": "validation",
            "examples": int(len(inputs)),
            "padded_length": int(inputs.shape[-1]),
            "first_example_tokens": int(np.sum(first_doc != PAD_ID)),
        },
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
    from lra.reports import plots

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
    return plots.memory_heatmaps(panels, path, title, note)


def curves_figure(runs: list[dict[str, Any]], records: dict[str, list[dict[str, Any]]], path: Path) -> Path | None:
    from lra.reports import plots

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
    return plots.memory_curves(
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
        f"(`lra.training.memory_stats.probe_inputs(data.validation, config.eval_batch_size)`).",
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
    from lra.reports import plots

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
    return plots.memory_degradation(entries, path, title)


def _unique_name(name: str, config: ml_collections.ConfigDict, taken: set[str]) -> str:
    if name in taken:
        name = f"{config.task}_{config.preset}_{name}"
    base, k = name, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _result(workdir: Path) -> dict[str, Any]:
    """The run's result.json, or {} (with a warning naming it) when it is missing or not a finished run's."""
    from lra.training.run_files import result_problem

    path = workdir / "result.json"
    problem = result_problem(path)
    if problem is None:
        return json.loads(path.read_text())
    if problem != "missing":
        print(f"warning: {path} is not a valid result ({problem}); its test accuracy is left out", file=sys.stderr)
    return {}


def diagnose_memory(workdirs: Sequence[str], out: str | None, command: str, log=print) -> dict[str, Any]:
    """Everything ``memory`` writes; returns the JSON document. DiagnoseError for a bad run."""
    paths = [Path(w) for w in workdirs]
    configs = [check_run(p) for p in paths]  # refuse bad runs before any work
    out_dir = Path(out) if out else paths[0] / "diagnostics"
    out_dir.mkdir(parents=True, exist_ok=True)

    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)
    runs, memories, records = [], {}, {}
    taken: set[str] = set()
    for n, (workdir, config) in enumerate(zip(paths, configs, strict=False), 1):
        name = _unique_name(run_name(config), config, taken)
        log(f"[{n}/{len(paths)}] {describe(config)} seed {config.seed}: {workdir}")
        probed = probe_run(workdir, config, log)
        result = _result(workdir)
        run = {
            "run": name,
            "workdir": str(workdir),
            "title": describe(config),
            "variant": config.variant,
            "task": config.task,
            "preset": config.preset,
            "seed": int(config.seed),
            "attention": config.model.attention,
            "memory_size": int(probed["initial_memory"].shape[0]),
            "features": int(probed["initial_memory"].shape[1]),
            "num_blocks": len(probed["block_memories"]),
            "checkpoint_step": probed["step"],
            "test_accuracy": result.get("test_accuracy"),
            "best_step_in_result": result.get("best_step"),
            "batch": probed["batch"],
            "stats": probed["stats"],
            "first_example": probed["first_example"],
        }
        figure = heatmap_figure(run, probed, out_dir / f"memory_{name}.png")
        run["heatmaps"] = figure.name
        log(f"  wrote {figure}")
        runs.append(run)
        memories[name] = probed["block_memories"][-1]
        records[name] = memory_records(workdir)

    document = {
        **{k: v for k, v in stamp().items() if k != "command"},
        "command": command,
        "description": "lra.training.memory_stats of each run's best checkpoint on the first `batch.examples` "
        "validation "
        "examples: initial/<stat> of the learned initial memory, block<k>/<stat> batch means of "
        "block k's output memory (k from 0), block<k>/packing_entropy; first_example: the same "
        "statistics of the first example (the heatmaps)",
        "distinct_cosine": DISTINCT_COSINE,
        "runs": runs,
    }
    md = out_dir / "memory_stats.md"
    write_text_atomic(md, markdown_table(runs, command))
    log(f"wrote {md}")
    js = out_dir / "memory_stats.json"
    write_text_atomic(js, json.dumps(document, indent=2, sort_keys=True) + "\n")
    log(f"wrote {js}")
    figure = degradation_figure(runs, memories, out_dir / "memory_degradation.png")
    log(f"wrote {figure}")
    curves = curves_figure(runs, records, out_dir / "memory_curves.png")
    if curves is None:
        log(
            "no memory statistics in the runs' metrics.jsonl (train with --config.log_memory_stats=True): "
            "memory_curves.png not written"
        )
    else:
        log(f"wrote {curves}")
    return document
