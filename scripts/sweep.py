"""Expand a named grid (tasks x variants x seeds) into runs; list, run or submit them.

    python scripts/sweep.py convluna_table1 --list                       # 140 runs, paper scale
    python scripts/sweep.py convluna_table1 --preset cpu --set num_train_steps=300 --run
    python scripts/sweep.py convluna_table3 --tasks listops --seeds 0 1 --preset cpu --run
    python scripts/sweep.py convluna_table1 --slurm table1.sh && sbatch table1.sh
    python scripts/sweep.py convluna_table1 --index 17                   # run 17 only (what SLURM calls)
    python scripts/sweep.py convluna_table1 --commands                   # one shell command per run

Grids: convluna_table1 (Transformer, Luna-1/16/256, ConvLuna-1/16/256 x 4 tasks x seeds 0-4),
convluna_table3 (OnlyScaling-*, OnlyFiltering-*). Workdirs: <root>/<task>_<variant>/seed<k>, root
by default runs/sweeps/<grid>_<preset>[_<overrides>]. Finished runs are skipped; unfinished ones
resume from their checkpoint. Each run is a separate `python -m lra.train` process (see lra/experiments/sweep.py).
--group-seeds on: one process per setup trains all its seeds in one vmapped program (the default
with a GPU/TPU and for --slurm, where an array task is then one setup x all seeds).
Then: python scripts/make_tables.py --results runs/sweeps --out results/tables
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from lra.experiments import sweep


def _selection_argv(args: argparse.Namespace, root: Path) -> list[str]:
    """The arguments that reproduce this selection of runs (for the SLURM script)."""
    argv = [args.grid, "--preset", args.preset, "--root", str(root.resolve())]
    if args.tasks:
        argv += ["--tasks", *args.tasks]
    if args.seeds is not None:
        argv += ["--seeds", *map(str, args.seeds)]
    if args.variants:
        argv += ["--variants", *args.variants]
    for key, value in args.overrides:
        argv += ["--set", f"{key}={value}"]
    argv += ["--group-seeds", "on" if args.group else "off"]
    return argv


def _accelerator() -> bool:
    """Whether JAX sees a GPU or TPU here (grouped seeds pay off there)."""
    import jax

    return jax.default_backend() in ("gpu", "cuda", "rocm", "tpu")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("grid", choices=sorted(sweep.GRIDS))
    p.add_argument("--preset", default="paper", choices=sweep.PRESETS)
    p.add_argument("--tasks", nargs="+", help=f"subset of {', '.join(sweep.TASKS)}")
    p.add_argument("--seeds", nargs="+", type=int, help="default: 0 1 2 3 4")
    p.add_argument("--variants", nargs="+", help="subset of the grid's rows, e.g. ConvLuna-16 Transformer")
    p.add_argument("--group-seeds", choices=("auto", "on", "off"), default="auto",
                   help="train the seeds of one setup in one vmapped program (auto: on with a GPU/TPU and for "
                        "--slurm, off on CPU)")
    p.add_argument("--root", type=Path, help="folder of the workdirs (default runs/sweeps/<grid>_<preset>[_<overrides>])")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run, e.g. --set num_train_steps=300 (repeatable; recorded "
                        "in each workdir's sweep_run.json and shown in the tables)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the runs with their status")
    mode.add_argument("--commands", action="store_true", help="print one shell command per run")
    mode.add_argument("--run", action="store_true", help="run them here, one after another")
    mode.add_argument("--index", type=int, help="run only run INDEX (0-based; the SLURM array task id)")
    mode.add_argument("--slurm", type=Path, metavar="OUT.sh", help="write a SLURM job-array script")
    p.add_argument("--time", default="24:00:00", help="--slurm: time limit per array task")
    p.add_argument("--cpus", type=int, default=8, help="--slurm: CPUs per array task")
    p.add_argument("--max-parallel", type=int, help="--slurm: at most this many array tasks at once")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                   help="--slurm: extra #SBATCH line, e.g. --sbatch=--partition=gpu (repeatable)")
    p.add_argument("--setup", action="append", default=[], metavar="LINE",
                   help="--slurm: shell line run before training, e.g. 'source .venv/bin/activate'")
    args = p.parse_args(argv)

    args.group = args.group_seeds == "on" or (args.group_seeds == "auto" and (args.slurm is not None
                                                                                or _accelerator()))
    try:
        args.overrides = sweep.parse_overrides(args.sets)
        runs = sweep.expand(args.grid, args.preset, tasks=args.tasks, seeds=args.seeds, variants=args.variants,
                            root=args.root, overrides=args.overrides, group_seeds=args.group)
        sweep.check_overrides(runs)  # a misspelt or mistyped --set: one line, nothing started or written
    except ValueError as e:
        p.error(str(e))
    root = args.root if args.root is not None else sweep.default_root(args.grid, args.preset, args.overrides)
    if not runs:
        p.error("the selection holds no runs")

    if args.list:
        counts: dict[str, int] = {}
        for run in runs:
            state = sweep.status(run, sweep.expected_steps(run))
            counts[state] = counts.get(state, 0) + 1
            seeds = f"seeds {','.join(map(str, run.seeds))}" if run.grouped else f"seed{run.seed}"
            print(f"{run.index:4d}  {state:8s}  {run.task:8s}  {run.variant.label:18s}  {seeds}  "
                  f"{run.config_path.relative_to(sweep.REPO)}:{run.config_arg}  {run.workdir}")
        print(f"{len(runs)} runs in {root}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
              + (f"; overrides {dict(args.overrides)}" if args.overrides else ""))
        return 0
    if args.commands:
        for run in runs:
            print(shlex.join(run.command("python")))
        return 0
    if args.slurm is not None:
        text = sweep.slurm_script(runs, _selection_argv(args, root), root, time_limit=args.time, cpus=args.cpus,
                                  max_parallel=args.max_parallel, sbatch=args.sbatch, setup=args.setup)
        args.slurm.parent.mkdir(parents=True, exist_ok=True)
        args.slurm.write_text(text)
        (root / "slurm").mkdir(parents=True, exist_ok=True)  # sbatch does not create the log folder
        sweep.write_manifest(runs, root, ["scripts/sweep.py", *(argv if argv is not None else sys.argv[1:])])
        print(f"wrote {args.slurm}: {len(runs)} array tasks (0-{len(runs) - 1}); submit with: sbatch {args.slurm}")
        return 0
    if args.index is not None:
        if not 0 <= args.index < len(runs):
            p.error(f"--index {args.index} out of range: this selection has {len(runs)} runs (0-{len(runs) - 1})")
        return sweep.exec_run(runs[args.index], len(runs))
    sweep.write_manifest(runs, root, ["scripts/sweep.py", *(argv if argv is not None else sys.argv[1:])])
    return sweep.run_sweep(runs, sweep.subprocess_runner).exit_code


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
    sys.exit(main())
