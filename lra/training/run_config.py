"""A run's config.json: the config as JSON, its digest, what differs from a workdir's, the resume
guard (``check_workdir``) and reading it back (``load_run_config``); imported through
:mod:`lra.training.run_files` too, which names a run's files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import ml_collections

from lra.errors import InputError
from lra.training.run_errors import RunFileError

# Fields that may differ when a run is resumed: they change neither the model nor the batches.
RESUMABLE_CHANGES = frozenset({"log_every", "data_dir", "num_train_steps", "checkpoint_every", "seeds"})


class WorkdirMismatchError(InputError):
    """The workdir holds a run of a different config."""


def slug(text: str) -> str:
    """File-name form of a label (``"ConvLuna-16 (reference)"`` -> ``"convluna-16-reference"``): the
    run folders of lra.train (training.seeds.default_workdir) and of the sweeps. A decimal point
    stays (``"MeanPool-x0.5"`` -> ``"meanpool-x0.5"``, not ``x0-5``, which reads as a range)."""
    kept = re.sub(r"(?<=\d)\.(?=\d)", "\0", text.lower())
    return re.sub(r"[^a-z0-9\0]+", "-", kept).strip("-").replace("\0", ".")


def config_to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
    return json.loads(config.to_json_best_effort())


def flatten_config(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"num_layers": 2}}`` -> ``{"model.num_layers": 2}``: configs compared field by field.
    An empty dict stays a value (``{"model.attention_kwargs": {}}``): config digests sealed into
    checkpoints depend on it, which is why this is not ``flax.traverse_util.flatten_dict``."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_config(value, name + "."))
        else:
            out[name] = value
    return out


def config_differences(old: dict[str, Any], config: ml_collections.ConfigDict) -> list[tuple[str, Any, Any]]:
    """(field, recorded value, this config's value) for every field that changes the run."""
    old_flat = flatten_config(old)
    new = flatten_config(config_to_dict(config))
    return [
        (k, old_flat.get(k), new.get(k))
        for k in sorted(old_flat.keys() | new.keys())
        if old_flat.get(k) != new.get(k) and k.split(".")[0] not in RESUMABLE_CHANGES
    ]


def describe_differences(diffs: list[tuple[str, Any, Any]], where: str) -> str:
    """``field: old in <where>, new now; ...`` (the first six)."""
    shown = "; ".join(f"{k}: {old!r} in {where}, {new!r} now" for k, old, new in diffs[:6])
    return shown + ("; ..." if len(diffs) > 6 else "")


def config_digest(config: ml_collections.ConfigDict | dict[str, Any]) -> str:
    """SHA-256 of every field that changes the run (not RESUMABLE_CHANGES): two configs with one
    digest train the same run. Sealed into each checkpoint and compared across the processes
    of a multi-host launch."""
    d = config if isinstance(config, dict) else config_to_dict(config)
    kept = {k: v for k, v in flatten_config(d).items() if k.split(".")[0] not in RESUMABLE_CHANGES}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


# The top-level fields every lra.train config.json has: a config.json without them is another program's.
SUITE_CONFIG_FIELDS = ("task", "variant", "model", "num_train_steps")
# What a run's checkpoints/ folder holds: orbax's managers for the latest and the best checkpoints.
CHECKPOINT_FOLDERS = ("latest", "best")


def foreign_problem(workdir: Path) -> str | None:
    """Why ``workdir`` is not (part of) a run of this suite (None: it is, or it is empty of runs): a
    config.json that is not an lra.train config, or a checkpoints/ folder holding files this suite never
    writes. Such a folder is never resumed, nor emptied by --start_over (issue 52 U1: a user's
    ``checkpoints/my_model.bin`` was deleted)."""
    path = workdir / "config.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict) and not all(k in data for k in SUITE_CONFIG_FIELDS):
            return (
                f"{path} is not an lra.train config (no {', '.join(k for k in SUITE_CONFIG_FIELDS if k not in data)})"
            )
    checkpoints = workdir / "checkpoints"
    if checkpoints.is_dir():
        strange = sorted(
            p.name for p in checkpoints.iterdir() if p.name not in CHECKPOINT_FOLDERS and not p.name.startswith(".")
        )
        if strange:
            return f"{checkpoints} holds files this suite never writes ({', '.join(strange[:3])})"
    elif checkpoints.exists():
        return f"{checkpoints} is a file, not this suite's checkpoint folder"
    return None


def check_workdir(workdir: Path, config: ml_collections.ConfigDict, fix: str | None = None) -> None:
    """Refuse to resume a workdir whose config.json differs in anything that changes the run, or that
    is not this suite's run at all (:func:`foreign_problem`: then nothing is advised that deletes it).
    ``fix``: what to do instead (default: a new --workdir, or delete the workdir)."""
    foreign = foreign_problem(workdir)
    if foreign:
        raise WorkdirMismatchError(
            f"{workdir} is not a run of this suite: {foreign}. Nothing was changed in it; pass another --workdir"
        )
    path = workdir / "config.json"
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text())
        if not isinstance(old, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        where = f" (line {e.lineno} column {e.colno}: {e.msg})" if isinstance(e, json.JSONDecodeError) else f" ({e})"
        raise RunFileError(
            f"{path} is not a valid config{where}; it guards this workdir against another config. "
            f"Restore it, or delete it to accept this command's config (checkpoints are kept, and "
            f"resumed only if they were saved by this config)."
        ) from None
    diffs = config_differences(old, config)
    if diffs:
        names = {k for k, _, _ in diffs}
        if names == {"data.bucket_order_seed"}:
            recorded = diffs[0][1]
            fix = (
                f"this run was trained with data.bucket_order_seed={recorded!r} (the bucket order its "
                f"bundle shared): pass --config.data.bucket_order_seed={recorded} to resume it"
                + (f", or {fix}" if fix else ", or use a new --workdir")
            )
        raise WorkdirMismatchError(
            f"workdir {workdir} holds a run of a different config ({describe_differences(diffs, 'the workdir')}). "
            f"Nothing was changed in it: "
            + (
                fix
                or f"pass a new --workdir, or pass --start_over to delete this run of {workdir} and train from step 0"
            )
            + "."
        )


def load_run_config(workdir: Path) -> ml_collections.ConfigDict:
    """The run's config.json (fields added since it ran take the values it trained with), as
    lra.evaluate and lra.diagnose read a finished run.

    FileNotFoundError when there is none; RunFileError (exit 5) naming the file when it is damaged."""
    from lra.defaults import upgrade_run_config

    path = workdir / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: --workdir must be a run directory written by lra.train")
    try:
        return upgrade_run_config(ml_collections.ConfigDict(json.loads(path.read_text())))
    except (ValueError, UnicodeDecodeError, TypeError, KeyError, AttributeError) as e:
        where = f"line {e.lineno} column {e.colno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else repr(e)
        raise RunFileError(
            f"{path} is not a valid run config ({where}); it is the only record of the model this "
            f"run trained. To fix: restore it (an exported record under results/runs holds a copy) "
            f"or delete the run"
        ) from None
