"""Several seeds in one program against the same seeds one after another, with the real training loop.

``python scripts/bench_training.py seeds``: whole ``python -m lra.train`` processes (5 seeds vmapped
against 5 sequential runs), their wall and training time, and what bucketing costs when seeds share
one bucket order (``bucket_padding_cost``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _train_cli(config_path: Path, workdir: Path, seeds: Sequence[int], steps: int, data_dir: str) -> dict[str, Any]:
    """One ``python -m lra.train`` process; its wall time and each seed's result.json."""
    flag = f"--config.seeds={','.join(map(str, seeds))}" if len(seeds) > 1 else f"--config.seed={seeds[0]}"
    cmd = [
        sys.executable,
        "-m",
        "lra.train",
        f"--config={config_path}:cpu",
        f"--workdir={workdir}",
        flag,
        f"--config.num_train_steps={steps}",
        f"--config.eval_every={steps}",
        f"--config.checkpoint_every={steps}",
        *([f"--config.data_dir={data_dir}"] if data_dir else []),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    dirs = [workdir] if len(seeds) == 1 else [workdir / f"seed{k}" for k in seeds]
    return {"wall_seconds": wall, "results": [json.loads((d / "result.json").read_text()) for d in dirs]}


def bucket_padding_cost(config: Any, seeds: Sequence[int], steps: int) -> dict[str, float]:
    """Mean padded tokens per seed-step: each seed's own bucket order, the shared order the
    bundle uses, and padding every step to the longest bucket any seed drew (the alternative)."""
    from lra.data import load_task
    from lra.data.batching import TrainBatches

    train = load_task(config).train
    own = [TrainBatches(train, config.batch_size, s, config.data.buckets, config.data.max_len) for s in seeds]
    shared = [
        TrainBatches(train, config.batch_size, s, config.data.buckets, config.data.max_len, seeds[0]) for s in seeds
    ]
    own_len = np.mean([[b.plan(t)[1] for b in own] for t in range(steps)])
    shared_len = np.mean([[b.plan(t)[1] for b in shared] for t in range(steps)])
    padded_len = np.mean([max(b.plan(t)[1] for b in own) for t in range(steps)])
    return {"own_order": float(own_len), "shared_order": float(shared_len), "pad_to_longest": float(padded_len)}


def seeds_vs_sequential(
    config_paths: Sequence[Path],
    seeds: Sequence[int],
    steps: int,
    root: Path,
    data_dir: str,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """For each config: ``seeds`` trained one after another, then in one vmapped program."""
    from lra.defaults import load_config_file
    from lra.training.runs import seed_config  # noqa: F401  (the bundle's config rule, documented there)

    rows = []
    for path in config_paths:
        config = load_config_file(path).get_config("cpu")
        if data_dir:
            config.data_dir = data_dir
        sequential = []
        for k in seeds:
            sequential.append(_train_cli(path, root / path.stem / f"single{k}", [k], steps, data_dir))
            log(
                f"{config.variant} seed {k} alone: {sequential[-1]['results'][0]['steps_per_second']:.3g} steps/s, "
                f"{sequential[-1]['wall_seconds']:.0f} s wall"
            )
        bundle = _train_cli(path, root / path.stem / "bundle", list(seeds), steps, data_dir)
        seq_train = sum(r["results"][0]["train_seconds"] for r in sequential)
        seq_wall = sum(r["wall_seconds"] for r in sequential)
        bundle_train = bundle["results"][0]["train_seconds"]
        row = {
            "config": str(path),
            "variant": config.variant,
            "seeds": list(seeds),
            "steps": steps,
            "sequential_train_seconds": seq_train,
            "sequential_wall_seconds": seq_wall,
            "bundle_train_seconds": bundle_train,
            "bundle_wall_seconds": bundle["wall_seconds"],
            "sequential_seed_steps_per_second": len(seeds) * steps / seq_train,
            "bundle_seed_steps_per_second": len(seeds) * steps / bundle_train,
            "speedup_train": seq_train / bundle_train,
            "speedup_wall": seq_wall / bundle["wall_seconds"],
            "test_accuracy_sequential": [r["results"][0]["test_accuracy"] for r in sequential],
            "test_accuracy_bundle": [r["test_accuracy"] for r in bundle["results"]],
            "bucket_padding": bucket_padding_cost(config, seeds, steps) if len(config.data.buckets) else None,
        }
        log(
            f"{config.variant}: {len(seeds)} seeds vmapped {row['bundle_seed_steps_per_second']:.3g} seed-steps/s vs "
            f"sequential {row['sequential_seed_steps_per_second']:.3g} (x{row['speedup_train']:.2f} training time, "
            f"x{row['speedup_wall']:.2f} wall)"
        )
        rows.append(row)
    return rows


def seeds_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# {len(report['rows'][0]['seeds'])} seeds in one program vs one after another: {env['device_kind']} "
        f"({env['backend']}, {env['cpu_count']} cores)",
        "",
        f"Command: `{env['command']}` (git {env['git_commit']}, jax {env['jax_version']}, {env['date']}; "
        f"load average at the end {'/'.join(f'{x:.1f}' for x in env.get('load_average_1_5_15min', []))}).",
        "Each run is `python -m lra.train` on the config's `cpu` preset for the steps shown (validation and a "
        "checkpoint at the end only). Training seconds exclude compilation, evaluation and checkpoints "
        "(result.json's `train_seconds`); wall seconds are the whole processes (start-up, data, compilation, "
        "evaluation). Seed-steps/s = seeds x steps / training seconds.",
        "",
        "| variant | steps | sequential seed-steps/s | vmapped seed-steps/s | speed-up (training) | "
        "sequential wall s | vmapped wall s | speed-up (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['variant']} | {r['steps']} | {r['sequential_seed_steps_per_second']:.3g} | "
            f"{r['bundle_seed_steps_per_second']:.3g} | x{r['speedup_train']:.2f} | "
            f"{r['sequential_wall_seconds']:.0f} | {r['bundle_wall_seconds']:.0f} | x{r['speedup_wall']:.2f} |"
        )
    pads = [(r["variant"], r["bucket_padding"]) for r in report["rows"] if r["bucket_padding"]]
    if pads:
        lines += [
            "",
            "Length buckets: mean padded length per seed-step over these steps. The seeds of one program "
            "share the first seed's bucket order (no padding beyond each seed's own bucket); padding every "
            "step to the longest bucket any seed drew would cost the last column.",
            "",
            "| variant | own order | shared order (used) | pad to the longest |",
            "|---|---:|---:|---:|",
        ]
        for variant, p in pads:
            lines.append(
                f"| {variant} | {p['own_order']:.0f} | {p['shared_order']:.0f} | {p['pad_to_longest']:.0f} "
                f"(x{p['pad_to_longest'] / p['shared_order']:.2f}) |"
            )
    return "\n".join(lines) + "\n"
