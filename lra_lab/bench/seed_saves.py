"""What saving vmapped seeds' checkpoints side by side buys (``lra.training.loop.save_each``).

Each validation saves every seed's ``latest`` checkpoint and each improved seed's ``best``; a save
mostly waits (orbax's threads, an fsync per file). This runs the same many-seed training run with
``SAVE_THREADS`` 1 (one save after another) and 8, alternated over rounds, each in a fresh process,
and checks that every seed's logged metrics and result are identical between the two::

    python scripts/bench_seed_saves.py --out results/bench/seed_saves_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_CHILD = (
    "import runpy, sys; import lra.training.loop as loop; loop.SAVE_THREADS = int(sys.argv[1]); "
    "sys.argv = ['lra.train', *sys.argv[2:]]; runpy.run_module('lra.train', run_name='__main__')"
)


def train_command(
    threads: int, config: str, workdir: Path, seeds: int, steps: int, eval_every: int, checkpoint_every: int
) -> list[str]:
    return [
        sys.executable,
        "-c",
        _CHILD,
        str(threads),
        "--config",
        config,
        "--workdir",
        str(workdir),
        f"--config.seeds={','.join(str(k) for k in range(seeds))}",
        f"--config.num_train_steps={steps}",
        f"--config.eval_every={eval_every}",
        f"--config.checkpoint_every={checkpoint_every}",
    ]


def _outcome(workdir: Path) -> dict[str, Any]:
    """Every seed's logged metrics (less the timing) and result (less the timings and commit)."""
    out = {}
    for seed in sorted(workdir.glob("seed*")):
        lines = [json.loads(x) for x in (seed / "metrics.jsonl").read_text().splitlines()]
        result = json.loads((seed / "result.json").read_text())
        out[seed.name] = {
            "metrics": [{k: v for k, v in r.items() if k != "steps_per_second"} for r in lines],
            "result": {k: result[k] for k in ("best_step", "best_val_accuracy", "test_accuracy", "test_loss")},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "configs/listops_convluna.py:smoke"))
    p.add_argument("--seeds", type=int, default=20, help="seeds vmapped in the one program")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 8], help="SAVE_THREADS values, alternated")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="write the record to this JSON file")
    args = p.parse_args(argv)
    from lra.training.provenance import mark_start

    mark_start()  # the record's start commit: the code the timed runs ran
    root = Path(tempfile.mkdtemp(prefix="lra-seed-saves-"))
    walls: dict[int, list[float]] = {t: [] for t in args.threads}
    outcomes: dict[int, dict[str, Any]] = {}
    try:
        for rnd in range(args.rounds):
            for threads in args.threads:
                workdir = root / f"threads{threads}"
                shutil.rmtree(workdir, ignore_errors=True)
                cmd = train_command(
                    threads, args.config, workdir, args.seeds, args.steps, args.eval_every, args.checkpoint_every
                )
                start = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, text=True)
                walls[threads].append(time.perf_counter() - start)
                if done.returncode != 0:
                    print(f"error: the run with SAVE_THREADS={threads} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                outcomes[threads] = _outcome(workdir)
                print(f"round {rnd + 1}: SAVE_THREADS={threads}: {walls[threads][-1]:.1f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    first = outcomes[args.threads[0]]
    identical = all(o == first for o in outcomes.values())
    print(f"every seed's metrics and result identical across SAVE_THREADS values: {identical}")
    if args.out is not None:  # with the suite's provenance: start and end commits, machine, load at the end
        from lra_lab.experiments.records import write_record

        write_record(
            args.out,
            {
                "config": args.config,
                "seeds": args.seeds,
                "steps": args.steps,
                "eval_every": args.eval_every,
                "checkpoint_every": args.checkpoint_every,
                "wall_seconds": {str(t): w for t, w in walls.items()},
                "identical": identical,
                "processor": platform.processor() or platform.machine(),
            },
            "python scripts/bench_seed_saves.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        )
    return 0 if identical else 1
