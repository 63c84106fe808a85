"""Diagnostics of finished runs (the work behind the command line lra_lab/diagnose.py). ``memory``: the
memory degradation of the memory families (the ConvLuna paper's Figure 1 and Section 2) at each
run's best checkpoint.

    python -m lra_lab.diagnose memory --workdir runs/listops_luna-16_cpu/seed0 runs/listops_convluna-16_cpu/seed0
    python -m lra_lab.diagnose memory --workdir RUN [RUN ...] --out results/diagnostics

For each run (a workdir written by lra.train of a memory family: luna, convluna), on a fixed
batch (the first ``eval_batch_size`` validation examples, :func:`lra.memory_stats.probe_inputs`):

* ``memory_<run>.png``: heatmaps (memory cell x feature) of the learned initial memory and of
  each block's output memory for the first example of the batch;
* the statistics of :mod:`lra.memory_stats` (distinct vectors, effective rank, mean pairwise
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

from lra.memory_stats import DISTINCT_COSINE
from lra.training.provenance import stamp
from lra.training.run_files import write_text_atomic
from lra_lab.reports.memory_report import TASK_NAMES, curves_figure, degradation_figure, heatmap_figure, markdown_table


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
            f"lra_lab.diagnose memory takes runs of a memory family ({', '.join(families)})"
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

    Returns the flat statistics (the keys of :func:`lra.memory_stats.collect`), the per-example
    statistics of the first example, the memories to draw, the checkpoint step and the batch."""
    import jax
    import jax.numpy as jnp

    from lra import memory_stats as metrics
    from lra.data import load_task
    from lra.data.types import PAD_ID
    from lra.model import build_model
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

    inputs = metrics.probe_inputs(data.validation, config.eval_batch_size)
    log(f"  probing the first {len(inputs)} validation examples (padded to {inputs.shape[-1]} tokens)")
    memories, entropies = jax.device_get(metrics.make_probe(model)(params, inputs))
    initial = np.asarray(jax.device_get(params["encoder"]["memory"]), np.float32)

    stats: dict[str, float | None] = {f"initial/{k}": v for k, v in metrics.memory_summary(initial).items()}
    first: dict[str, float | None] = dict(stats)
    for i, (memory, entropy) in enumerate(zip(memories, entropies, strict=False)):
        stats.update({f"block{i}/{k}": v for k, v in metrics.batch_summary(memory).items()})
        stats[f"block{i}/packing_entropy"] = float(entropy)
        first.update({f"block{i}/{k}": v for k, v in metrics.memory_summary(memory[0]).items()})
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
        "description": "lra.memory_stats of each run's best checkpoint on the first `batch.examples` "
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
