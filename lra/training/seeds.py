"""Several seeds in one program: which seeds, their configs and workdirs, and the seed axis.

``--config.seeds=0,1,2,3,4`` trains every listed seed in one process (one vmapped step); the
default ``()`` means the single ``config.seed``. Each seed is a run of its own: its config is the
bundle's with ``seed=k`` and ``seeds=()``, exactly the config of the single-seed command, and it
writes exactly the files that command writes, in its own workdir.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from lra.training.run_files import slug

MAX_SEED = 2**31 - 1

# The command line of this lra.train process (set by lra.train's main): refusals print a seed's
# own command built from it. None when train_and_evaluate is called from Python.
_command_line: list[str] | None = None

# Flags a seed's own command replaces (the bundle's seeds, where it writes, what it deletes).
_REPLACED = (
    "--config.seeds",
    "--config.seed",
    "--config.data.bucket_order_seed",
    "--workdir",
    "--start_over",
    "--nostart_over",
    "--profile",
)


def set_command_line(argv: list[str] | None) -> None:
    """Record this process's ``python -m lra.train`` arguments (``argv[1:]``) for :func:`seed_command`."""
    global _command_line
    _command_line = None if argv is None else list(argv[1:])


def seed_command(config: ml_collections.ConfigDict, seed: int, workdir: Path, start_over: bool = False) -> str:
    """The exact command that runs seed ``seed`` of ``config`` alone in ``workdir``: the bundle's
    command with ``--config.seed=<seed> --workdir <workdir>`` for its seeds and workdir, and the
    bundle's ``data.bucket_order_seed`` where the seed shares the first seed's bucket order (so
    the run is the same one and still resumes with the bundle). Without a command line (a call
    from Python) the config file is a placeholder."""
    args: list[str] = []
    if _command_line is None:
        args = ["--config=<this config file>"]
    else:
        skip = False
        for arg in _command_line:
            if skip:
                skip = False
                continue
            name = arg.split("=", 1)[0]
            if name in _REPLACED:
                skip = "=" not in arg and name not in ("--start_over", "--nostart_over")
                continue
            args.append(arg)
    args += [f"--config.seed={int(seed)}"]
    own = seed_config(config, seed)
    if own.data.bucket_order_seed >= 0:
        args += [f"--config.data.bucket_order_seed={int(own.data.bucket_order_seed)}"]
    args += [f"--workdir={workdir}"]
    if start_over:
        args += ["--start_over"]
    return shlex.join(["python", "-m", "lra.train", *args])


def run_seeds(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The seeds a config trains: ``config.seeds`` if given, else ``(config.seed,)``."""
    seeds = tuple(config.get("seeds", ()) or ())
    return seeds if seeds else (int(config.seed),)


def seed_config(config: ml_collections.ConfigDict, seed: int) -> ml_collections.ConfigDict:
    """The config of seed ``seed`` alone: what ``--config.seed=<seed>`` gives, except that with
    length buckets the seeds of one program share the first seed's bucket order
    (``data.bucket_order_seed``, recorded in the seed's config.json), so that their batches stack
    without padding; a single-seed run with that config is the same run."""
    seeds = run_seeds(config)
    c = config.copy_and_resolve_references()
    with c.unlocked():
        c.seed = int(seed)
        c.seeds = ()
        if len(seeds) > 1 and len(c.data.buckets) > 0 and c.data.bucket_order_seed < 0 and seed != seeds[0]:
            c.data.bucket_order_seed = int(seeds[0])
    return c


def default_workdir(config: ml_collections.ConfigDict) -> Path:
    """``runs/<task>_<variant>[_<preset>]/seed<k>``: distinct variants never share a workdir."""
    preset = "" if config.preset == "paper" else f"_{slug(str(config.preset))}"
    # every part is a slug: no name a config holds (a preset "/../../x") leads outside runs/ (issue 52 SEC4)
    return Path("runs") / f"{slug(str(config.task))}_{slug(config.variant)}{preset}" / f"seed{int(config.seed)}"


def seed_workdirs(config: ml_collections.ConfigDict, workdir: str | Path | None) -> list[Path]:
    """Each seed's workdir: the default layout; or, with ``--workdir W``, W itself for one seed
    and ``W/seed<k>`` for several."""
    seeds = run_seeds(config)
    if workdir is None:
        return [default_workdir(seed_config(config, s)) for s in seeds]
    if len(seeds) == 1:
        return [Path(workdir)]
    return [Path(workdir) / f"seed{s}" for s in seeds]


def take(tree: Any, index: int) -> Any:
    """Seed ``index`` of a stacked tree."""
    return jax.tree.map(lambda x: x[index], tree)


def stack(trees: Sequence[Any]) -> Any:
    """Trees of single seeds, stacked on a leading seed axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
