"""Sealed checkpoints and resume planning: what a workdir holds, and whether it resumes.

``latest`` (the newest two, for resuming) and ``best`` (highest validation accuracy) are orbax CheckpointManagers
(synchronous saves). Each step folder also holds our ``integrity.json``: sealed JSON (lra.training.provenance) with
the SHA-256 of every file and array and the config with its digest, so a checkpoint is never resumed under another
config even when config.json is gone. The seal is the last write before orbax's one atomic rename, and every restore
checks it: damage is a CorruptCheckpointError naming the checkpoint, never a wrong state. No NaN/Inf state is saved.
Integrity format 1 (before the CheckpointManager: digests of ``state/`` only) still verifies and restores.
``plan_resume`` raises every refusal before anything is written; ``apply`` then makes the few changes a plan needs,
each announced. docs/reliability.md has the fault table.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
from orbax.checkpoint.path import atomicity

from lra.errors import CorruptFileError, Interrupted, NonFiniteLossError, RunStateError, StorageError
from lra.training import provenance
from lra.training.run_files import (
    WorkdirMismatchError,
    check_workdir,
    config_differences,
    config_digest,
    describe_differences,
    result_problem,
    run_traces,
)

# -- checkpoints: latest and best, sealed --------------------------------------------------------------------
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
    """orbax's atomic-rename ``finalize`` with ``seal(folder)`` and an fsync of every file just before the rename."""

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
                if p.name != str(int(p.name)):  # orbax would look for <kind>/17, not 0017
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
        """Synchronous: a save returns once sealed and renamed into place (the loop's resume guarantees)."""
        if kind not in self._managers:
            sealed = type("Sealed", (SealedTemporaryPath,), {"seal": staticmethod(self._seal)})
            # a checkpoint without metrics (format 1, or saved without) is never pruned; restore_best reads the newest
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

    def verify(self, kind: str, step: int) -> dict[str, Any]:
        """The integrity record of a checkpoint whose files all match it; else CorruptCheckpointError.

        Threat model: silent damage on disk or in transit (a flipped bit, a truncated or partly copied file, a file
        lost or added, a record edited by hand, another step's or run's folder in its place), which neither orbax
        0.12 (no checksums) nor the atomic rename (only a killed save) would notice; found before use, so the run
        falls back to an older ``latest`` or stops with one error line. Not a defence against malice: unkeyed SHA-256
        can be recomputed by whoever can write the files. A state wrong in memory is sealed as it is (only NaN/Inf
        are refused)."""
        folder = self.path(kind, step)
        try:
            record = provenance.read_sealed_json(folder / RECORD)
            if record.get("format") not in (1, FORMAT) or record.get("step") != step:
                raise provenance.IntegrityError(f"{RECORD} describes another checkpoint")
            provenance.compare(record["files"], self._file_digests(folder, record["format"]), "file")
        except (provenance.IntegrityError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpointError(folder, str(e)) from None
        return record

    @staticmethod
    def _file_digests(folder: Path, fmt: int) -> dict[str, str]:
        if fmt == 1:
            return provenance.file_digests(folder / ITEM)
        return {name: digest for name, digest in provenance.file_digests(folder).items() if name != RECORD}

    def saved_config(self, kind: str, step: int) -> dict[str, Any] | None:
        """``config`` and ``config_digest`` sealed into a checkpoint; None if saved before configs were sealed."""
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

    def save(self, kind: str, step: int, state: Any, metrics: dict[str, float] | None = None) -> None:
        """A no-op if an intact checkpoint is there. ``metrics`` (``best``): what ``best_fn`` ranks (accuracy)."""
        final = self.path(kind, step)
        if final.exists():
            try:
                self.verify(kind, step)
                return
            except CorruptCheckpointError:
                self.set_aside(kind, step)
        host = jax.device_get(state)
        bad = provenance.nonfinite_leaves(host)
        if bad:
            raise NonFiniteLossError(
                f"refusing to save a state with NaN/Inf values at step {step} ({', '.join(bad[:3])}"
                f"{', ...' if len(bad) > 3 else ''})"
            )
        record: dict[str, Any] = {
            "format": FORMAT,
            "kind": kind,
            "step": step,
            "arrays": provenance.array_digests(host),
        }
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
        """The integrity record of a finished temporary folder (SealedTemporaryPath.finalize, before the rename)."""
        record = {**self._sealing[_final_folder(folder)], "files": self._file_digests(folder, FORMAT)}
        provenance.write_sealed_json(folder / RECORD, record)

    def _remove_leftovers(self, kind: str) -> None:
        """A save's temporary folder left by a kill, and pruned checkpoints not yet deleted."""
        folder = self.root / kind
        if folder.is_dir():
            deleted = folder / DELETED
            if deleted.is_symlink() or (deleted.exists() and not deleted.is_dir()):
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

    def restore(self, kind: str, step: int, like: Any) -> Any:
        """Checkpoint ``step`` shaped like ``like`` (shardings too), verified file by file, then array by array."""
        record = self.verify(kind, step)
        folder = self.path(kind, step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        restored = self._manager(kind).restore(
            step, args=ocp.args.Composite(**{ITEM: ocp.args.StandardRestore(abstract)})
        )
        state = restored[ITEM]
        try:
            provenance.compare(record["arrays"], provenance.array_digests(jax.device_get(state)), "array")
        except provenance.IntegrityError as e:
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


# -- resume: what a rerun in an existing workdir may do ------------------------------------------------------
START_OVER = (
    "use a new --workdir, or pass --start_over to delete this run's config, metrics, "
    "checkpoints and result and train from step 0"
)


@dataclasses.dataclass
class ResumePlan:
    step: int | None  # the newest intact latest checkpoint; None: a fresh run
    damaged: list[CorruptCheckpointError]  # newer latest checkpoints that failed their check
    result: dict[str, Any] | None  # result.json of this config's finished run
    result_problem: str | None  # why result.json (if there) is not that


def plan_resume(
    workdir: Path, config: ml_collections.ConfigDict, checkpoints: Checkpoints, fix: str | None = None
) -> ResumePlan:
    """Every reason to refuse ``workdir`` for ``config``, before anything is written. ``fix`` replaces START_OVER in
    the advice: a bundle's seed gets its own command, as --start_over on the bundle would delete every seed's run."""
    fix = fix or START_OVER
    check_workdir(workdir, config, fix=fix if fix is not START_OVER else None)
    step, damaged = checkpoints.newest_intact("latest")
    if step is None:
        traces = run_traces(workdir)
        if damaged:
            raise damaged[0].__class__(
                damaged[0].path,
                f"{damaged[0].reason}; no intact checkpoint in "
                f"{checkpoints.root / 'latest'} to fall back to. Nothing was changed: {fix}",
            )
        if traces:
            missing = (
                "checkpoints/ is missing" if not checkpoints.root.exists() else "checkpoints/latest holds no checkpoint"
            )
            raise RunStateError(
                f"workdir {workdir} holds a run ({', '.join(traces)}) but {missing}, so it cannot be "
                f"resumed, and training from step 0 would overwrite it. Nothing was changed: {fix}."
            )
    elif step > config.num_train_steps:
        raise RunStateError(
            f"config.num_train_steps={config.num_train_steps} is below the {step} steps this workdir "
            f"({workdir}) already trained: pass --config.num_train_steps={step} or more, or use a new "
            f"--workdir. Nothing was changed."
        )
    best = checkpoints.latest_step("best")
    if best is not None:
        try:
            checkpoints.verify("best", best)  # the test accuracy is measured on it: no fallback
        except CorruptCheckpointError as e:
            raise CorruptCheckpointError(
                e.path,
                f"{e.reason}; the test accuracy is measured on the best "
                f"checkpoint, so there is nothing to fall back to. Nothing was "
                f"changed: {fix}",
            ) from None
    for kind, at in (("latest", step), ("best", best)):
        if at is not None:
            check_saved_config(workdir, config, checkpoints, kind, at, fix)
    problem = result_problem(workdir / "result.json", config)
    result = None
    if problem is None and step == config.num_train_steps:
        result = json.loads((workdir / "result.json").read_text())
    return ResumePlan(step, damaged, result, problem)


def check_saved_config(
    workdir: Path, config: ml_collections.ConfigDict, checkpoints: Checkpoints, kind: str, step: int, fix: str
) -> None:
    """Refuse a checkpoint sealed by another config, or of unknown config (saved before configs were sealed, with
    config.json gone, e.g. by a killed --start_over): resuming it would report its run under this config."""
    path = checkpoints.path(kind, step)
    saved = checkpoints.saved_config(kind, step)
    if saved is None:
        if not (workdir / "config.json").exists():
            raise RunStateError(
                f"checkpoint {path} records no config (it was saved by an older version) and {workdir}/config.json "
                f"is missing, so which config trained it is unknown. Nothing was changed: {fix}."
            )
        return  # config.json, checked above, stands for it
    if saved["config_digest"] == config_digest(config):
        return
    diffs = config_differences(saved["config"], config) or [
        ("config digest", saved["config_digest"], config_digest(config))
    ]
    raise WorkdirMismatchError(
        f"checkpoint {path} was saved by a run of a different config "
        f"({describe_differences(diffs, 'the checkpoint')}), so it cannot be resumed by this one. Nothing "
        f"was changed: rerun with the checkpoint's config to resume it; or {fix}."
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def report_damaged(plan: ResumePlan, checkpoints: Checkpoints, set_aside: bool) -> None:
    """Warn about each damaged latest checkpoint (and move it out of the way if ``set_aside``)."""
    for error in plan.damaged:
        assert plan.step is not None  # plan_resume refuses damaged checkpoints with no intact one to fall back to
        step = int(error.path.name)
        moved = f"; moved to {checkpoints.set_aside('latest', step)}" if set_aside else ""
        then = (
            f"resuming from the previous intact checkpoint {checkpoints.path('latest', plan.step)}"
            if step > plan.step
            else "a newer intact checkpoint is used"
        )
        _say(f"warning: {error}{moved}. {then[0].upper() + then[1:]}")


def apply(plan: ResumePlan, workdir: Path, checkpoints: Checkpoints) -> None:
    """Set damaged checkpoints and a stale or damaged result.json aside, saying so."""
    report_damaged(plan, checkpoints, set_aside=True)
    path = workdir / "result.json"
    # None: result.json is this config's valid result but the final checkpoint fell back (damaged): kept as it is
    if plan.result is None and plan.result_problem is not None and plan.result_problem != "missing":
        try:
            steps = json.loads(path.read_text())["num_train_steps"]
            aside = (
                path.with_name(f"result_{int(steps)}steps.json")
                if plan.result_problem.startswith("num_train_steps")
                else None
            )
        except (ValueError, KeyError, TypeError):
            aside = None
        if aside is None:
            aside = path.with_name("result.json.corrupt")
            _say(
                f"warning: {path} is not a valid result ({plan.result_problem}); moved to {aside}, "
                f"a new one is written from the best checkpoint when the run ends"
            )
        else:
            _say(
                f"{path} is the result of a {steps}-step run; it is kept as {aside} while this run "
                f"trains to its new num_train_steps"
            )
        os.replace(path, aside)
