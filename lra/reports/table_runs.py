"""The runs a results table is built from: valid ``result.json`` records with their sweep overrides, in the paper's
order, grouped by scale and split by config (lra/reports/tables.py gives the rules)."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lra.papers.convluna import FAMILY_ORDER
from lra.training.run_files import RESUMABLE_CHANGES, flatten_config, record_problem

TASK_COLUMNS = {
    "text": "Classification",
    "matching": "Matching",
    "listops": "ListOps",
    "image": "CIFAR-10",
    "pathfinder": "Pathfinder",
    "pathx": "Path-X",
}
IGNORED_OVERRIDES = frozenset(RESUMABLE_CHANGES - {"num_train_steps"})


@dataclasses.dataclass
class RunResult:
    """One finished run: its result.json plus the sweep overrides it was trained with."""

    workdir: Path
    task: str
    variant: str
    seed: int
    test_accuracy: float  # fraction
    num_train_steps: int
    preset: str
    device_kind: str
    overrides: dict[str, str]
    result: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Scale:
    """What makes numbers comparable: preset, steps (None: each task's preset default), overrides."""

    preset: str
    steps: int | None
    overrides: tuple[tuple[str, str], ...]

    @property
    def slug(self) -> str:
        parts = [self.preset] + ([f"{self.steps}steps"] if self.steps is not None else [])
        parts += [re.sub(r"[^A-Za-z0-9.]+", "-", f"{k}-{v}").strip("-") for k, v in self.overrides]
        return "_".join(parts)


def family(variant: str) -> tuple[str, int | None]:
    """``"ConvLuna-16"`` -> ``("ConvLuna", 16)``; ``"Transformer"`` -> ``("Transformer", None)``."""
    m = re.fullmatch(r"(.+)-(\d+)", variant)
    return (m.group(1), int(m.group(2))) if m else (variant, None)


def variant_order(variant: str, family_order: Sequence[str] = FAMILY_ORDER) -> tuple:
    """Sort key of a row: ``family_order``'s families, then others by name; within a family by memory size."""
    name, size = family(variant)
    rank = family_order.index(name) if name in family_order else len(family_order)
    return (rank, name if rank == len(family_order) else "", size if size is not None else -1, variant)


def task_order(task: str) -> tuple:
    names = list(TASK_COLUMNS)
    return (names.index(task) if task in names else len(names), task)


def column_name(task: str) -> str:
    return TASK_COLUMNS.get(task, task)


RESULT_KEYS = ("task", "variant", "seed", "test_accuracy", "num_train_steps")


def read_json_object(path: Path) -> dict[str, Any]:
    """``path`` as a JSON object; ValueError saying why not (cut short, not an object, unreadable)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"unreadable ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def load_results(root: Path) -> tuple[list[RunResult], list[Path]]:
    """Every valid run's result.json under ``root`` (others: a warning, never averaged), and unfinished workdirs."""
    runs = []
    for path in sorted(Path(root).rglob("result.json")):
        workdir = path.parent
        problem = record_problem(path)  # the check every reader makes: a copied or edited record is named
        if problem is not None:
            try:
                r = read_json_object(path)
                lra_like = all(k in r for k in RESULT_KEYS)
            except ValueError:
                lra_like = True  # a cut-short result.json of a run
            if lra_like:
                warnings.warn(
                    f"{path} is not a valid lra.train result ({problem}); skipped. Rerun the run's "
                    f"lra.train command to rebuild it from its best checkpoint, or delete it",
                    stacklevel=2,
                )
            else:
                warnings.warn(f"{path} is not an lra.train result (no {', '.join(RESULT_KEYS)}); skipped", stacklevel=2)
            continue
        r = json.loads(path.read_text())
        sweep_file = workdir / "sweep_run.json"
        try:
            overrides = read_json_object(sweep_file).get("overrides", {}) if sweep_file.exists() else {}
            if not isinstance(overrides, dict):
                raise ValueError("'overrides' is not an object")
        except ValueError as e:
            warnings.warn(
                f"{sweep_file} is damaged ({e}), so the scale of {path} is unknown; skipped. "
                f"Rewrite it by rerunning the sweep command (finished runs are skipped)",
                stacklevel=2,
            )
            continue
        runs.append(
            RunResult(
                workdir,
                r["task"],
                r["variant"],
                int(r["seed"]),
                float(r["test_accuracy"]),
                int(r["num_train_steps"]),
                r.get("config_preset", "paper"),
                r.get("device_kind", "unknown"),
                {k: str(v) for k, v in overrides.items()},
                r,
            )
        )
    unfinished = [c.parent for c in sorted(Path(root).rglob("config.json")) if not (c.parent / "result.json").exists()]
    return runs, unfinished


POOL_IGNORED = frozenset(  # may differ within a cell: the seed and what changes no result
    {
        "seed",
        "seeds",
        "data_dir",
        "log_every",
        "checkpoint_every",
        "data.cache_dir",
        "data.tfds_dir",
        "data.bucket_order_seed",
        "log_memory_stats",
    }
)


def run_config(workdir: Path) -> dict[str, Any] | None:
    """The flattened fields of ``workdir/config.json`` (old records upgraded) that decide its result; None: none."""
    from lra.defaults import LEGACY_FIELDS

    path = workdir / "config.json"
    if not path.exists():
        return None
    try:
        flat = flatten_config(read_json_object(path))
    except ValueError as e:
        raise ValueError(f"{path} is damaged ({e})") from None
    for key, value in LEGACY_FIELDS.items():
        if key not in flat:
            flat[key] = (
                flat.get("model.emb_dim", 1) ** -0.5
                if key == "model.memory_init_scale"
                else list(value)
                if isinstance(value, tuple)
                else value
            )
    _fill_option_defaults(flat)
    return {k: v for k, v in flat.items() if k not in POOL_IGNORED}


def _fill_option_defaults(flat: dict[str, Any]) -> None:
    """A family option left out is its default: ``mem=16`` written out and ConvLuna's default 16 pool as one model."""
    from lra.attention import option_defaults

    try:
        defaults = option_defaults(flat.get("model.attention", ""))
    except ValueError:  # a family this checkout does not know: compare what is written
        return
    if flat.get("model.attention_kwargs") == {}:  # no option written: an empty leaf, not a field
        del flat["model.attention_kwargs"]
    for key, value in defaults.items():
        flat.setdefault(f"model.attention_kwargs.{key}", list(value) if isinstance(value, tuple) else value)


def _difference(config: dict[str, Any] | None, others: Sequence[dict[str, Any] | None]) -> list[str]:
    """The fields (``key=value``) in which ``config`` differs from any of ``others``."""
    if config is None:
        return ["no config.json"]
    keys = sorted({k for o in others if o is not None for k in config.keys() | o.keys() if config.get(k) != o.get(k)})
    return [f"{k}={config.get(k)}" for k in keys] or (["no config.json"] if None in others else [])


def split_by_config(runs: Sequence[RunResult]) -> list[RunResult]:
    """``runs`` with each (scale, task, variant) cell pooling one config; others get `` [field=value, ...]``."""
    configs: dict[Path, dict[str, Any] | None] = {}
    kept = []
    for run in runs:
        try:
            configs[run.workdir] = run_config(run.workdir)
            kept.append(run)
        except ValueError as e:
            warnings.warn(f"{e}: cannot tell which runs {run.workdir} may be pooled with; skipped", stacklevel=2)
    cells: dict[tuple, list[RunResult]] = {}
    for run in kept:
        cells.setdefault((scale_of(run), run.task, run.variant), []).append(run)
    out = []
    for (_, task, variant), members in cells.items():
        groups: dict[str, list[RunResult]] = {}
        for run in members:
            groups.setdefault(json.dumps(configs[run.workdir], sort_keys=True, default=str), []).append(run)
        if len(groups) == 1:
            out += members
            continue
        ordered = sorted(groups.values(), key=len, reverse=True)
        plain = ordered[0] if len(ordered[0]) > len(ordered[1]) else None
        described = []
        for group in ordered:
            if group is plain:
                out += group
                described.append(f"{variant}: {', '.join(str(r.workdir) for r in group)}")
                continue
            others = [configs[g[0].workdir] for g in ordered if g is not group]
            label = f"{variant} [{', '.join(_difference(configs[group[0].workdir], others))}]"
            out += [dataclasses.replace(r, variant=label) for r in group]
            described.append(f"{label}: {', '.join(str(r.workdir) for r in group)}")
        warnings.warn(
            f"{column_name(task)} / {variant}: runs of {len(groups)} different configs (not only "
            f"the seed); not pooled, one row each: " + "; ".join(described),
            stacklevel=2,
        )
    return out


@functools.cache
def default_steps(task: str, preset: str) -> int | None:
    """``num_train_steps`` of ``task`` under ``preset`` (None for an unknown task or preset)."""
    from lra.defaults import make_config

    try:
        return int(make_config(task, "softmax", preset).num_train_steps)
    except ValueError:
        return None


def scale_of(run: RunResult) -> Scale:
    steps = None if run.num_train_steps == default_steps(run.task, run.preset) else run.num_train_steps
    overrides = tuple(
        sorted((k, v) for k, v in run.overrides.items() if k not in IGNORED_OVERRIDES and k != "num_train_steps")
    )
    return Scale(run.preset, steps, overrides)


def group_by_scale(runs: Iterable[RunResult]) -> dict[Scale, list[RunResult]]:
    groups: dict[Scale, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(scale_of(run), []).append(run)
    preset_rank = {"paper": 0, "laptop": 1, "cpu": 2, "smoke": 3}
    return dict(
        sorted(
            groups.items(),
            key=lambda kv: (
                preset_rank.get(kv[0].preset, 4),
                kv[0].preset,
                kv[0].steps is not None,
                -(kv[0].steps or 0),
                kv[0].overrides,
            ),
        )
    )
