"""The sweep command line (``scripts/sweep.py``): its parser and the runs a command selects.

``lra_lab.reproduce`` reads its claims' sweep commands through :func:`command_selection` (which runs a
command names, without running them) and narrows them with :func:`with_variants`.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lra_lab.experiments.sweep_grids import GRIDS, TASKS
from lra_lab.experiments.sweep_runs import PRESETS, Run, default_root, expand


def parse_overrides(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``["num_train_steps=300", "data.num_train=2000"]`` (each ``--config.FIELD=VALUE``, read under its
    old spelling ``--set``) -> sorted (field, value) pairs."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().removeprefix("config.")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
            raise ValueError(
                "expected --config.FIELD=VALUE (key=value with a config field as key, e.g. "
                f"--config.num_train_steps=300), got {item!r}"
            )
        if key == "seed":
            raise ValueError("--config.seed is not for a sweep: choose seeds with --seeds")
        out[key] = value.strip()
    return tuple(sorted(out.items()))


def _accelerator() -> bool:
    """Whether JAX sees a GPU or TPU here (grouped seeds pay off there)."""
    import jax

    return jax.default_backend() in ("gpu", "cuda", "rocm", "tpu")


class _Parser(argparse.ArgumentParser):
    """The sweep's parser: ``--config.KEY=VALUE`` (lra.config_args, the suite's one grammar) is read as
    the old spelling ``--set KEY=VALUE``, in place, so both build the same overrides."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        from lra.config_args import as_old_spelling

        argv = sys.argv[1:] if args is None else args
        try:
            argv = as_old_spelling(argv, "--set")
        except ValueError as e:
            self.error(str(e))
        return super().parse_known_args(argv, namespace)


def make_parser(description: str = "") -> argparse.ArgumentParser:
    """scripts/sweep.py's arguments: the selection (grid, preset, tasks, seeds, variants, root, --config.FIELD,
    --group-seeds) and one mode (--list, --commands, --run, --index, --slurm)."""
    import argparse

    p = _Parser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("grid", choices=sorted(GRIDS))
    p.add_argument("--preset", default="paper", choices=PRESETS)
    p.add_argument("--tasks", nargs="+", help=f"subset of {', '.join(TASKS)}")
    p.add_argument("--seeds", nargs="+", type=int, help="default: 0 1 2 3 4")
    p.add_argument("--variants", nargs="+", help="subset of the grid's rows, e.g. ConvLuna-16 Transformer")
    p.add_argument(
        "--group-seeds",
        choices=("auto", "on", "off"),
        default="auto",
        help="train the seeds of one setup in one vmapped program (auto: on with a GPU/TPU and for "
        "--slurm, off on CPU)",
    )
    p.add_argument(
        "--root", type=Path, help="folder of the workdirs (default runs/sweeps/<grid>_<preset>[_<overrides>])"
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="old spelling of --config.KEY=VALUE: a config override for every run, e.g. "
        "--config.num_train_steps=300 (repeatable; recorded in each workdir's sweep_run.json and "
        "shown in the tables)",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--list",
        action="store_true",
        help="print the runs: done / started / missing / data absent, with the estimated CPU time "
        "from earlier records (lra_lab.experiments.plan)",
    )
    mode.add_argument("--commands", action="store_true", help="print one shell command per run")
    mode.add_argument("--run", action="store_true", help="run them here, one after another (--jobs: several at once)")
    mode.add_argument("--index", type=int, help="run only run INDEX (0-based; the SLURM array task id)")
    mode.add_argument("--slurm", type=Path, metavar="OUT.sh", help="write a SLURM job-array script")
    p.add_argument("--time", default="24:00:00", help="--slurm: time limit per array task")
    p.add_argument("--cpus", type=int, default=8, help="--slurm: CPUs per array task")
    p.add_argument("--max-parallel", type=int, help="--slurm: at most this many array tasks at once")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="--run: runs at once, each pinned to a core of its own after "
        "its first compile (2 on a 2-core laptop; bit-identical)",
    )
    p.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="--slurm: extra #SBATCH line, e.g. --sbatch=--partition=gpu (repeatable)",
    )
    p.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="LINE",
        help="--slurm: shell line run before training, e.g. 'source .venv/bin/activate'",
    )
    return p


def select(args: argparse.Namespace) -> tuple[list[Run], Path]:
    """The runs and root the parsed arguments name (sets ``args.group`` and ``args.overrides``);
    ValueError for an unknown task, variant or a malformed --config.FIELD=VALUE."""
    args.group = args.group_seeds == "on" or (args.group_seeds == "auto" and (args.slurm is not None or _accelerator()))
    args.overrides = parse_overrides(args.sets)
    runs = expand(
        args.grid,
        args.preset,
        tasks=args.tasks,
        seeds=args.seeds,
        variants=args.variants,
        root=args.root,
        overrides=args.overrides,
        group_seeds=args.group,
    )
    root = args.root if args.root is not None else default_root(args.grid, args.preset, args.overrides)
    return runs, root


SWEEP_SCRIPT = "scripts/sweep.py"


def command_selection(command: str, cwd: Path | None = None) -> tuple[list[Run], argparse.Namespace] | None:
    """The runs a ``python scripts/sweep.py ...`` command line selects and its parsed arguments
    (None for any other command): how lra_lab.reproduce plans its claims' commands. With ``cwd`` (where
    the command would run) the workdirs are under it."""
    argv = shlex.split(command)
    if SWEEP_SCRIPT not in argv:
        return None
    args = make_parser().parse_args(argv[argv.index(SWEEP_SCRIPT) + 1 :])
    if cwd is not None:
        args.root = cwd / (
            args.root if args.root is not None else default_root(args.grid, args.preset, parse_overrides(args.sets))
        )
    runs, _ = select(args)
    return runs, args


def with_variants(command: str, labels: Sequence[str]) -> str:
    """``command`` (a sweep command line) selecting only the rows ``labels``: its ``--variants``
    replaced (or added before the mode flag); labels are double-quoted as the claims write them."""
    argv = shlex.split(command)
    if "--variants" in argv:
        at = argv.index("--variants")
        end = next((i for i in range(at + 1, len(argv)) if argv[i].startswith("--")), len(argv))
        argv[at:end] = []
    else:
        at = len(argv) - 1 if argv[-1].startswith("--") else len(argv)
    quoted = [f'"{label}"' for label in labels]
    words = [shlex.quote(word) for word in argv]
    return " ".join(words[:at] + ["--variants", *quoted] + words[at:])
