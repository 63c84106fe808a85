"""Checkpoints of a run: ``latest`` (for resuming, the newest two) and ``best`` (by validation).

Each kind is an orbax ``CheckpointManager`` over ``checkpoints/<kind>/`` (synchronous saves):
``latest`` keeps the newest two (``max_to_keep``), ``best`` the one with the highest validation
accuracy (``best_fn``). A step's folder ``checkpoints/<kind>/<step>/`` holds orbax's items
(``state/``, and for ``best`` its ``metrics/``), orbax's step metadata ``_CHECKPOINT_METADATA``
(with the config that trained it as ``custom_metadata``) and ``commit_success.txt``, and our
``integrity.json`` (lra.training.integrity: SHA-256 of every file and array, and the config with
its digest, so that a checkpoint is never resumed under another config even when config.json is
gone).

Atomicity is orbax's: a save writes ``<kind>/.tmp-<step>.orbax-checkpoint-tmp/`` and renames it
into place once, so a kill at any moment leaves either the whole new checkpoint or none of it;
the seal is the last write before that rename (:class:`SealedTemporaryPath`). A half-written
temporary folder is removed by the next save. Old checkpoints are pruned by a rename into
``<kind>/.deleted/`` (orbax's ``todelete_subdir``) before they are deleted, so a kill never leaves a
half-deleted one. A restore checks every file and every restored array against the record: a
flipped bit is a CorruptCheckpointError naming the checkpoint, never a wrong state. No state
holding a NaN or Inf is ever saved.

Checkpoints written before the CheckpointManager (integrity format 1: only ``state/`` and
``integrity.json``, the files' digests relative to ``state/``) still verify, resume and restore.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.path import atomicity

from lra.training import integrity
from lra.training.run_errors import CorruptFileError, Interrupted, NonFiniteLossError, RunStateError, StorageError
from lra.training.run_files import config_digest

KEEP = {"latest": 2, "best": 1}  # two latest: a damaged newest one can fall back to the previous
RECORD = "integrity.json"
FORMAT = 2  # 2: digests of every file of the step folder; 1 (before the CheckpointManager): of state/ only
ITEM = "state"
TMP_PREFIX = ".tmp-"  # a save in progress: <kind>/.tmp-<step>.orbax-checkpoint-tmp
DELETED = ".deleted"  # pruned checkpoints are renamed here, then deleted
STEP_METADATA = "_CHECKPOINT_METADATA"  # orbax's step metadata file


class CorruptCheckpointError(CorruptFileError):
    """A checkpoint folder fails its integrity check."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"checkpoint {path} is corrupt: {reason}")
        self.path, self.reason = path, reason


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SealedTemporaryPath(atomicity.AtomicRenameTemporaryPath):
    """orbax's atomic-rename protocol with our seal as its last write: the folder is named
    ``.tmp-<step>.orbax-checkpoint-tmp`` while it is written, and finalizing does what orbax's
    ``AtomicRenameTemporaryPath.finalize`` does (the commit time in the step metadata,
    ``commit_success.txt``, one rename) with ``seal(folder)`` and an fsync of every file just before
    the rename. Subclassed per manager with its ``seal``."""

    seal: Callable[[Path], None]

    @classmethod
    def from_final(cls, final_path: Any, **kwargs: Any) -> atomicity.AtomicRenameTemporaryPath:
        if not final_path.name.isdigit():  # an item's folder inside the step's: orbax's own protocol
            return atomicity.AtomicRenameTemporaryPath.from_final(final_path, **kwargs)
        return cls(final_path.parent / f"{TMP_PREFIX}{final_path.name}{atomicity.TMP_DIR_SUFFIX}", final_path, **kwargs)

    @classmethod
    def from_temporary(cls, temporary_path: Any, **kwargs: Any) -> SealedTemporaryPath:
        return cls(temporary_path, _final_folder(temporary_path), **kwargs)

    async def finalize(self) -> None:
        tmp, final = Path(self.get()), Path(self.get_final())
        store = self._checkpoint_metadata_store
        if store is not None:
            store.wait_until_finished()
            store.update(file_path=self.get() / STEP_METADATA, commit_timestamp_nsecs=time.time_ns())
            store.wait_until_finished()
        (tmp / atomicity.COMMIT_SUCCESS_FILE).write_text(f"Checkpoint commit was successful to {final}")
        self.seal(tmp)
        for p in tmp.rglob("*"):
            if p.is_file():
                _fsync(p)
        os.replace(tmp, final)
        _fsync(final.parent)


def _final_folder(temporary: Path) -> Path:
    """``<kind>/<step>`` of a save's temporary folder ``<kind>/.tmp-<step>.orbax-checkpoint-tmp``."""
    name = temporary.name.removeprefix(TMP_PREFIX)
    return temporary.parent / name[: name.index(atomicity.TMP_DIR_SUFFIX)]


class Checkpoints:
    """The ``latest`` and ``best`` checkpoints under ``workdir/checkpoints``."""

    def __init__(self, workdir: Path, primary: bool | None = None, config: dict[str, Any] | None = None):
        self.root = Path(workdir).absolute() / "checkpoints"
        self.primary = jax.process_index() == 0 if primary is None else primary
        self.config = config  # the run's config (config.json's contents): sealed into every save
        self._managers: dict[str, ocp.CheckpointManager] = {}  # made at the first save or restore of a kind
        self._sealing: dict[Path, dict[str, Any]] = {}  # a save's record, by its final folder

    def path(self, kind: str, step: int) -> Path:
        return self.root / kind / str(step)

    def steps(self, kind: str) -> list[int]:
        """Steps with a checkpoint folder of ``kind`` (verified or not), oldest first."""
        folder = self.root / kind
        if not folder.is_dir():
            return []
        steps = []
        for p in folder.iterdir():
            if p.name.isdigit() and p.is_dir():
                if p.name != str(int(p.name)):  # orbax would look for <kind>/17, not 0017 (issue 52 D8)
                    raise RunStateError(
                        f"{p} is not a checkpoint folder name this suite writes (step {int(p.name)} is saved as "
                        f"{int(p.name)}): rename it to {folder / str(int(p.name))} (or move it out of {folder}), "
                        "then rerun; nothing was changed"
                    )
                steps.append(int(p.name))
        return sorted(steps)

    def latest_step(self, kind: str = "latest") -> int | None:
        steps = self.steps(kind)
        return steps[-1] if steps else None

    def _manager(self, kind: str) -> ocp.CheckpointManager:
        """The kind's orbax CheckpointManager (synchronous: a save returns once the checkpoint is
        sealed and renamed into place, which the loop's resume guarantees need)."""
        if kind not in self._managers:
            sealed = type("Sealed", (SealedTemporaryPath,), {"seal": staticmethod(self._seal)})
            # a checkpoint without metrics (saved before the CheckpointManager, or by a caller that gave
            # none) is never pruned: nothing is lost, and restore_best reads the newest
            best = (
                dict(
                    best_fn=lambda metrics: metrics["accuracy"], best_mode="max", keep_checkpoints_without_metrics=True
                )
                if kind == "best"
                else {}
            )
            options = ocp.CheckpointManagerOptions(
                max_to_keep=KEEP[kind],
                enable_async_checkpointing=False,
                save_root_metadata=False,
                todelete_subdir=DELETED,
                temporary_path_class=sealed,
                **best,
            )
            self._managers[kind] = ocp.CheckpointManager(self.root / kind, options=options, item_names=(ITEM,))
        return self._managers[kind]

    # -- checking -------------------------------------------------------------------------------

    def verify(self, kind: str, step: int) -> dict[str, Any]:
        """The integrity record of a checkpoint whose files all match it; else CorruptCheckpointError.

        What the seal is for (threat model): silent damage to a checkpoint on disk or in transit
        (a flipped bit, a truncated or partly copied file, a file lost or added, a record edited
        by hand, the folder of another step or run put in its place), which neither orbax 0.12 (it
        checksums nothing) nor the atomic rename (it guards only a save interrupted by a kill) would
        notice; found before any of it is used, so the run falls back to an older ``latest`` or
        stops with one error line, never trains on or reports a wrong state. Not a defence
        against anyone who means harm: SHA-256 without a key can be recomputed by whoever can
        write the files. A state wrong in memory before the save is saved and sealed as it is
        (only NaN/Inf are refused)."""
        folder = self.path(kind, step)
        try:
            record = integrity.read_sealed_json(folder / RECORD)
            if record.get("format") not in (1, FORMAT) or record.get("step") != step:
                raise integrity.IntegrityError(f"{RECORD} describes another checkpoint")
            integrity.compare(record["files"], self._file_digests(folder, record["format"]), "file")
        except (integrity.IntegrityError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpointError(folder, str(e)) from None
        return record

    @staticmethod
    def _file_digests(folder: Path, fmt: int) -> dict[str, str]:
        if fmt == 1:
            return integrity.file_digests(folder / ITEM)
        return {name: digest for name, digest in integrity.file_digests(folder).items() if name != RECORD}

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
        if kind in self._managers:
            self._managers[kind].reload()
        return target

    # -- saving ---------------------------------------------------------------------------------

    def save(self, kind: str, step: int, state: Any, metrics: dict[str, float] | None = None) -> None:
        """Save ``state`` as checkpoint ``step`` of ``kind`` (a no-op if an intact one is there).
        ``metrics`` (``best``): the validation metrics its ``best_fn`` ranks (accuracy, higher is better)."""
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
        record: dict[str, Any] = {"format": FORMAT, "kind": kind, "step": step, "arrays": integrity.array_digests(host)}
        custom = None
        if self.config is not None:
            custom = {"config": self.config, "config_digest": config_digest(self.config)}
            record.update(custom)
        try:
            if self.primary:
                self._remove_leftovers(kind)
            self._sealing[final] = record
            self._manager(kind).save(
                step,
                args=ocp.args.Composite(**{ITEM: ocp.args.StandardSave(state)}),
                metrics=metrics,
                custom_metadata=custom,
                force=True,
            )
            if self.primary:
                self._remove_leftovers(kind)  # what this save pruned
        except (NonFiniteLossError, Interrupted, KeyboardInterrupt, RunStateError):
            raise
        except Exception as e:  # orbax/tensorstore report a full disk in their own exception types
            raise StorageError(final, e) from e
        finally:
            self._sealing.pop(final, None)

    def _seal(self, folder: Path) -> None:
        """Write the integrity record of a finished temporary checkpoint folder (called by
        SealedTemporaryPath.finalize, just before the rename)."""
        record = {**self._sealing[_final_folder(folder)], "files": self._file_digests(folder, FORMAT)}
        integrity.write_sealed_json(folder / RECORD, record)

    def _remove_leftovers(self, kind: str) -> None:
        """A save's temporary folder left by a kill, and pruned checkpoints not yet deleted."""
        folder = self.root / kind
        if folder.is_dir():
            deleted = folder / DELETED
            if deleted.is_symlink() or (deleted.exists() and not deleted.is_dir()):  # issue 52 D12
                raise RunStateError(
                    f"{deleted} is a {'symlink' if deleted.is_symlink() else 'file'}, where this suite moves pruned "
                    "checkpoints to delete them: move it away, then rerun to resume; nothing was changed"
                )
            for stale in [*folder.glob(f"{TMP_PREFIX}*"), deleted]:
                if stale.exists():
                    shutil.rmtree(stale)

    def save_latest(self, step: int, state: Any) -> None:
        self.save("latest", step, state)

    def save_best(self, step: int, state: Any, metrics: dict[str, float] | None = None) -> None:
        self.save("best", step, state, metrics)

    # -- restoring ------------------------------------------------------------------------------

    def restore(self, kind: str, step: int, like: Any) -> Any:
        """Checkpoint ``step`` shaped like ``like`` (shardings included), verified file by file
        before loading and array by array after; CorruptCheckpointError if anything differs."""
        record = self.verify(kind, step)
        folder = self.path(kind, step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        restored = self._manager(kind).restore(
            step, args=ocp.args.Composite(**{ITEM: ocp.args.StandardRestore(abstract)})
        )
        state = restored[ITEM]
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
        for manager in self._managers.values():
            manager.close()
        self._managers.clear()
