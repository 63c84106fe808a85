"""Several seeds in one program: which seeds, their configs and workdirs, and the seed axis.

``--config.seeds=0,1,2,3,4`` trains every listed seed in one process (one vmapped step); the
default ``()`` means the single ``config.seed``. Each seed is a run of its own: its config is the
bundle's with ``seed=k`` and ``seeds=()``, exactly the config of the single-seed command, and it
writes exactly the files that command writes, in its own workdir.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections

MAX_SEED = 2**31 - 1


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
    slug = re.sub(r"[^a-z0-9]+", "-", config.variant.lower()).strip("-")
    preset = "" if config.preset == "paper" else f"_{config.preset}"
    return Path("runs") / f"{config.task}_{slug}{preset}" / f"seed{config.seed}"


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
