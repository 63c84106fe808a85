"""Expand a named grid (tasks x variants x seeds) into runs; list, run or submit them.

    python scripts/sweep.py convluna_table1 --list                       # 140 runs: done/missing/data absent, CPU time
    python scripts/sweep.py convluna_table1 --preset cpu --config.num_train_steps=300 --run
    python scripts/sweep.py convluna_table3 --tasks listops --seeds 0 1 --preset cpu --run
    python scripts/sweep.py convluna_table1 --slurm table1.sh && sbatch table1.sh
    python scripts/sweep.py convluna_table1 --index 17                   # run 17 only (what SLURM calls)
    python scripts/sweep.py convluna_table1 --commands                   # one shell command per run

Grids: convluna_table1 (Transformer, Luna-1/16/256, ConvLuna-1/16/256 x 4 tasks x seeds 0-4),
convluna_table3 (OnlyScaling-*, OnlyFiltering-*). Workdirs: <root>/<task>_<variant>/seed<k>, root
by default runs/sweeps/<grid>_<preset>[_<overrides>]. Finished runs are skipped; unfinished ones
resume from their checkpoint. Each run is a separate `python -m lra.train` process (see lra_lab/experiments/sweep.py).
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

from lra_lab.experiments import sweep, sweep_cli


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
        argv += [f"--config.{key}={value}"]
    argv += ["--group-seeds", "on" if args.group else "off"]
    return argv


def main(argv: list[str] | None = None) -> int:
    p = sweep_cli.make_parser(__doc__)
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    try:
        runs, root = sweep_cli.select(args)
        sweep.check_overrides(runs)  # a misspelt or mistyped --config.FIELD=VALUE: one line, nothing started or written
    except ValueError as e:  # one line, no usage block: the line says what to fix (issue 52 SO1)
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    if not runs:
        p.error("the selection holds no runs")

    if args.list:
        from lra_lab.experiments import plan

        plans = plan.plan_runs(runs)
        for item in plans:
            print(plan.run_line(item))
        print(
            f"{len(runs)} runs in {root}: "
            + plan.summary(plans)
            + (f"; overrides {dict(args.overrides)}" if args.overrides else "")
        )
        return 0
    if args.commands:
        for run in runs:
            print(shlex.join(run.command("python")))
        return 0
    if args.slurm is not None:
        text = sweep.slurm_script(
            runs,
            _selection_argv(args, root),
            root,
            time_limit=args.time,
            cpus=args.cpus,
            max_parallel=args.max_parallel,
            sbatch=args.sbatch,
            setup=args.setup,
        )
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
    return sweep.run_sweep(runs, sweep.subprocess_runner, jobs=args.jobs).exit_code


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
    sys.exit(main())
