"""Checkpoints of a run: ``latest`` (for resuming, the newest two) and ``best`` (by validation).

Layout: ``checkpoints/<kind>/<step>/state/`` (an orbax checkpoint) and
``checkpoints/<kind>/<step>/integrity.json`` (lra.training.integrity: SHA-256 of every file and array,
and the config that trained it with its digest, so that a checkpoint is never resumed under
another config even when config.json is gone).
A save writes ``<kind>/.tmp-<step>/``, seals it, and renames it into place, so a kill at any
moment leaves either the whole new checkpoint or none of it; a half-written temporary folder is
removed by the next save. A restore checks every file and every restored array against the
record: a flipped bit is a CorruptCheckpointError naming the checkpoint, never a wrong state.
No state holding a NaN or Inf is ever saved.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from lra.training import integrity
from lra.training.run_errors import CorruptFileError, Interrupted, NonFiniteLossError, StorageError
from lra.training.run_files import config_digest

KEEP = {"latest": 2, "best": 1}  # two latest: a damaged newest one can fall back to the previous
RECORD = "integrity.json"
FORMAT = 1


class CorruptCheckpointError(CorruptFileError):
    """A checkpoint folder fails its integrity check."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"checkpoint {path} is corrupt: {reason}")
        self.path, self.reason = path, reason


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpoints:
    """The ``latest`` and ``best`` checkpoints under ``workdir/checkpoints``."""

    def __init__(self, workdir: Path, primary: bool | None = None, config: dict[str, Any] | None = None):
        self.root = Path(workdir).absolute() / "checkpoints"
        self.primary = jax.process_index() == 0 if primary is None else primary
        self.config = config  # the run's config (config.json's contents): sealed into every save
        self._checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())

    def path(self, kind: str, step: int) -> Path:
        return self.root / kind / str(step)

    def steps(self, kind: str) -> list[int]:
        """Steps with a checkpoint folder of ``kind`` (verified or not), oldest first."""
        folder = self.root / kind
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and p.is_dir())

    def latest_step(self, kind: str = "latest") -> int | None:
        steps = self.steps(kind)
        return steps[-1] if steps else None

    # -- checking -------------------------------------------------------------------------------

    def verify(self, kind: str, step: int) -> dict[str, Any]:
        """The integrity record of a checkpoint whose files all match it; else CorruptCheckpointError."""
        folder = self.path(kind, step)
        try:
            record = integrity.read_sealed_json(folder / RECORD)
            if record.get("format") != FORMAT or record.get("step") != step:
                raise integrity.IntegrityError(f"{RECORD} describes another checkpoint")
            integrity.compare(record["files"], integrity.file_digests(folder / "state"), "file")
        except (integrity.IntegrityError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpointError(folder, str(e)) from None
        return record

    def saved_config(self, kind: str, step: int) -> dict[str, Any] | None:
        """The config sealed into a checkpoint (``config`` and ``config_digest``), or None for a
        checkpoint saved before configs were sealed (issue 26)."""
        record = self.verify(kind, step)
        if not isinstance(record.get("config"), dict) or not isinstance(record.get("config_digest"), str):
            return None
        return {"config": record["config"], "config_digest": record["config_digest"]}

    def newest_intact(self, kind: str) -> tuple[int | None, list[CorruptCheckpointError]]:
        """The newest checkpoint of ``kind`` whose files are intact, and every damaged one."""
        intact, damaged = None, []
        for step in reversed(self.steps(kind)):
            try:
                self.verify(kind, step)
                intact = step if intact is None else intact
            except CorruptCheckpointError as e:
                damaged.append(e)
        return intact, damaged

    def set_aside(self, kind: str, step: int) -> Path:
        """Rename a damaged checkpoint out of the way (kept for inspection, never read again)."""
        folder = self.path(kind, step)
        target, n = folder.with_name(f"{step}.corrupt"), 1
        while target.exists():
            n += 1
            target = folder.with_name(f"{step}.corrupt{n}")
        if self.primary:
            os.replace(folder, target)
        return target

    # -- saving ---------------------------------------------------------------------------------

    def save(self, kind: str, step: int, state: Any) -> None:
        """Save ``state`` as checkpoint ``step`` of ``kind`` (a no-op if an intact one is there)."""
        final = self.path(kind, step)
        if final.exists():
            try:
                self.verify(kind, step)
                return
            except CorruptCheckpointError:
                self.set_aside(kind, step)
        host = jax.device_get(state)
        bad = integrity.nonfinite_leaves(host)
        if bad:
            raise NonFiniteLossError(
                f"refusing to save a state with NaN/Inf values at step {step} ({', '.join(bad[:3])}"
                f"{', ...' if len(bad) > 3 else ''})"
            )
        tmp = self.root / kind / f".tmp-{step}"
        try:
            if self.primary:
                (self.root / kind).mkdir(parents=True, exist_ok=True)
                for stale in (self.root / kind).glob(".tmp-*"):
                    shutil.rmtree(stale)
            self._checkpointer.save(tmp / "state", args=ocp.args.StandardSave(state))
            if self.primary:
                record = {
                    "format": FORMAT, "kind": kind, "step": step,
                    "files": integrity.file_digests(tmp / "state"),
                    "arrays": integrity.array_digests(host),
                }
                if self.config is not None:
                    record.update(config=self.config, config_digest=config_digest(self.config))
                integrity.write_sealed_json(tmp / RECORD, record)
                for p in (tmp / "state").rglob("*"):
                    if p.is_file():
                        with open(p, "rb") as f:
                            os.fsync(f.fileno())
                os.replace(tmp, final)
                _fsync_dir(final.parent)
                self._prune(kind)
        except (NonFiniteLossError, Interrupted, KeyboardInterrupt):
            raise
        except Exception as e:  # orbax/tensorstore report a full disk in their own exception types
            raise StorageError(final, e) from e

    def _prune(self, kind: str) -> None:
        for step in self.steps(kind)[:-KEEP[kind]]:
            doomed = self.root / kind / f".tmp-del-{step}"
            os.replace(self.path(kind, step), doomed)  # atomic: never a half-deleted checkpoint
            shutil.rmtree(doomed)

    def save_latest(self, step: int, state: Any) -> None:
        self.save("latest", step, state)

    def save_best(self, step: int, state: Any) -> None:
        self.save("best", step, state)

    # -- restoring ------------------------------------------------------------------------------

    def restore(self, kind: str, step: int, like: Any) -> Any:
        """Checkpoint ``step`` shaped like ``like`` (shardings included), verified file by file
        before loading and array by array after; CorruptCheckpointError if anything differs."""
        record = self.verify(kind, step)
        folder = self.path(kind, step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        state = self._checkpointer.restore(folder / "state", args=ocp.args.StandardRestore(abstract))
        try:
            integrity.compare(record["arrays"], integrity.array_digests(jax.device_get(state)), "array")
        except integrity.IntegrityError as e:
            raise CorruptCheckpointError(folder, str(e)) from None
        return state

    def restore_best(self, like: Any) -> Any | None:
        """The newest best checkpoint (verified), or None if there is none."""
        step = self.latest_step("best")
        return None if step is None else self.restore("best", step, like)

    def close(self) -> None:
        self._checkpointer.close()
