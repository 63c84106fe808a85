"""Reading committed records and the statistics the verdict rules use.

Records are read, never trusted: a missing or malformed one is reported as missing (the claim is
then "incomplete"), not turned into a number.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lra.reports.stats import friedman_p, holm  # noqa: F401  (the judges' statistics: one module for the suite)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None if it is absent or not a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def seed_accuracies(root: Path, run_dir: str, seeds: Sequence[int], steps: int | None = None,
                    variant: str | None = None, task: str | None = None,
                    program: tuple[str, int | None] | None = None) -> tuple[dict[int, float], list[str]]:
    """Test accuracy (percent) per seed from ``<run_dir>/seed<k>/result.json``, and what is missing.

    A record counts only if it is a finished run's that agrees with its own run files
    (``run_files.record_problem``: every field present and in range, the same run as its config.json,
    metrics.jsonl and sessions.jsonl), matches its committed version, and is the run it stands for: its seed, ``task``, ``steps`` and
    ``variant`` (a row label such as ``"ConvLuna-16 (reference) [model.param_init=xavier]"``: the
    result's variant is the part before `` [``, and each ``[field=value]`` must match the run's
    config.json), and ran on the design's device and program (``program``: (device kind, seeds in one
    program), else the row's most common: :func:`program_problems`). Anything else is missing, named
    with the reason, never averaged.
    """
    from lra.training.run_files import record_problem

    found: dict[int, float] = {}
    missing: list[str] = []
    edited = uncommitted_edits(root, run_dir)
    programs: dict[int, tuple[str, int | None]] = {}
    for k in seeds:
        rel = f"{run_dir}/seed{k}/result.json"
        problem = record_problem(root / rel)
        if problem is None:
            changed = sorted(e for e in edited if e.startswith(f"{run_dir}/seed{k}/"))
            if changed:
                problem = (f"{', '.join(Path(c).name for c in changed)} differ from the committed version (an "
                           f"uncommitted edit: commit it or restore it with `git checkout -- {run_dir}/seed{k}`)")
        if problem is not None:
            missing.append(rel if problem == "missing" else f"{rel} ({problem})")
            continue
        result = read_json(root / rel) or {}
        why = _identity_problem(root / rel, result, k, steps, variant, task)
        if why:
            missing.append(f"{rel} ({why})")
        else:
            found[k] = 100.0 * float(result["test_accuracy"])
            programs[k] = (str(result.get("device_kind")), result.get("seeds_in_program"))
    for k, why in program_problems(programs, program).items():
        del found[k]
        missing.append(f"{run_dir}/seed{k}/result.json ({why})")
    return found, missing


# Whether a registered design's device and program are required (the default). A replication
# (lra_lab.reproduce.replication) judges with the registered judges on another device by design, so it
# sets this off: then only one device and program per row is required.
DESIGN_PROGRAM: contextvars.ContextVar[bool] = contextvars.ContextVar("DESIGN_PROGRAM", default=True)


def program_problems(programs: Mapping[int, tuple[str, int | None]],
                     design: tuple[str, int | None] | None = None) -> dict[int, str]:
    """The seeds whose record ran on another device or program than the row's (issue 52 RP8: a
    replication's seeds copied into the registered runs): ``design`` (device kind, seeds in one
    program; None: one process per seed) where the claim registered one, else the row's most
    common (ties: the first seed's). A row pools one device and program; the others are named."""
    if not programs:
        return {}
    if design is None or not DESIGN_PROGRAM.get():
        counts: dict[tuple[str, int | None], int] = {}
        for value in programs.values():
            counts[value] = counts.get(value, 0) + 1
        first = next(iter(programs.values()))
        design = max(counts, key=lambda v: (counts[v], v == first))
    return {
        k: (f"ran on {device} ({_program(seeds)}), the row's design is {design[0]} ({_program(design[1])}): "
            "a record of another machine or program")
        for k, (device, seeds) in programs.items()
        if (device, seeds) != design
    }


def _program(seeds: int | None) -> str:
    return "one process per seed" if seeds is None else f"{seeds} seeds in one program"


def uncommitted_edits(root: Path, folder: str) -> set[str]:
    """The tracked files under ``root/folder`` (repo-relative) that differ from git's HEAD: a
    committed record edited by hand is not judged (issue 52 RP6). Empty without git."""
    import subprocess

    try:
        proc = subprocess.run(["git", "-C", str(root), "diff", "--name-only", "--relative", "HEAD", "--", folder],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return set()
    return set(proc.stdout.splitlines()) if proc.returncode == 0 else set()


def _identity_problem(path: Path, result: dict[str, Any], seed: int, steps: int | None, variant: str | None,
                      task: str | None) -> str | None:
    """Why a valid result.json is not the run of this row and seed (None: it is)."""
    if result.get("seed") != seed:
        return f"it holds seed {result.get('seed')}, not {seed}"
    if steps is not None and result.get("num_train_steps") != steps:
        return f"at {steps} steps (it holds {result.get('num_train_steps')})"
    if task is not None and result.get("task") != task:
        return f"it holds task {result.get('task')!r}, not {task!r}"
    if variant is None:
        return None
    base, *settings = variant.split(" [")
    if result.get("variant") != base:
        return f"it holds variant {result.get('variant')!r}, not {base!r}"
    if settings:
        config = read_json(path.parent / "config.json")
        if config is None:
            return "its config.json, which names the row's settings, is missing"
        from lra.training.run_files import flatten_config

        flat = flatten_config(config)
        for setting in settings:
            field, _, value = setting.rstrip("]").partition("=")
            if str(flat.get(field)) != value:
                return f"its config has {field}={flat.get(field)!r}, the row {value!r}"
    return None


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), by numpy."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else 0.0


def fmt_mean_std(values: Sequence[float], unit: str = "%") -> str:
    mean, std = mean_std(values)
    return f"{mean:.1f} +- {std:.1f}{unit} ({len(values)} seed{'s' if len(values) != 1 else ''})"


def paired_greater(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[float, float, int]:
    """Mean of a - b over the seeds both have, and the one-sided paired t-test's p (H1: a > b).

    Paired by seed: the same seed draws the same data order and (for equal shapes) similar
    initial weights, so pairing removes the shared part of the seed-to-seed spread.
    """
    from scipy import stats  # the tables extra (installed with the tests)

    seeds = sorted(set(a) & set(b))
    diffs = [a[k] - b[k] for k in seeds]
    if len(diffs) < 2:
        raise ValueError("a paired test needs at least 2 seeds in common")
    mean = sum(diffs) / len(diffs)
    if all(abs(d - diffs[0]) < 1e-12 for d in diffs):  # zero variance: t is undefined
        return mean, (0.0 if mean > 0 else 1.0), len(diffs)
    p = float(stats.ttest_rel([a[k] for k in seeds], [b[k] for k in seeds], alternative="greater").pvalue)
    return mean, p, len(diffs)
