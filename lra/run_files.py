"""The files of a run's workdir: config.json, metrics.jsonl and result.json (docs/design.md, A run)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterable

import ml_collections

# Fields that may differ when a run is resumed: they change neither the model nor the batches.
RESUMABLE_CHANGES = frozenset({"log_every", "data_dir", "num_train_steps", "checkpoint_every"})


class WorkdirMismatchError(ValueError):
    """The workdir holds a run of a different config."""


def config_to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
    return json.loads(config.to_json_best_effort())


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def check_workdir(workdir: Path, config: ml_collections.ConfigDict) -> None:
    """Refuse to resume a workdir whose config.json differs in anything that changes the run."""
    path = workdir / "config.json"
    if not path.exists():
        return
    old = _flatten(json.loads(path.read_text()))
    new = _flatten(config_to_dict(config))
    diffs = sorted(
        k for k in old.keys() | new.keys()
        if old.get(k) != new.get(k) and k.split(".")[0] not in RESUMABLE_CHANGES
    )
    if diffs:
        shown = "; ".join(f"{k}: {old.get(k)!r} in the workdir, {new.get(k)!r} now" for k in diffs[:6])
        raise WorkdirMismatchError(
            f"workdir {workdir} holds a run of a different config ({shown}"
            f"{'; ...' if len(diffs) > 6 else ''}). Nothing was changed in it: pass a new "
            f"--workdir, or delete {workdir} to start over."
        )


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step and split."""

    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` and the test record (a resumed run re-logs them, identically)."""
        if not self.path.exists():
            return
        keep = [line for line in self.path.read_text().splitlines() if line.strip() and _kept(json.loads(line), step)]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, self.path)

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        with self.path.open("a") as f:
            for r in records:
                f.write(json.dumps(r, sort_keys=True) + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def _kept(record: dict[str, Any], step: int) -> bool:
    return record["step"] <= step and record["split"] != "test"


def git_commit() -> str:
    """The commit of the code that ran (``-dirty`` when the tree has uncommitted changes)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# What a run's record is made of: enough to rebuild every table and plot, no checkpoints.
RECORD_FILES = ("config.json", "metrics.jsonl", "result.json", "sweep_run.json", "evaluations.jsonl")


def export_records(runs_root: Path, out_root: Path) -> list[Path]:
    """Copy the record files of every finished run under ``runs_root`` to ``out_root`` (same
    relative layout), for committing under results/. Returns the exported run folders."""
    exported = []
    for result in sorted(Path(runs_root).rglob("result.json")):
        run = result.parent
        target = Path(out_root) / run.relative_to(runs_root)
        target.mkdir(parents=True, exist_ok=True)
        for name in RECORD_FILES:
            if (run / name).exists():
                (target / name).write_bytes((run / name).read_bytes())
        exported.append(target)
    return exported
