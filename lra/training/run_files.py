"""The files of a run's workdir: config.json, the lock, metrics.jsonl, result.json, sessions, export
(docs/design.md, A run).

Also the suite's one atomic writer (``write_bytes/text/json/figure_atomic``: write aside, fsync, rename) and the one
record check every reader makes (:func:`record_problem`). Imports no jax: the tables and the audit read runs with it.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import filelock
import ml_collections

from lra.errors import InputError, RunFileError, RunStateError, StorageError, WorkdirLockedError

# -- config.json: the config as JSON, its digest, the resume guard -------------------------------------------
# may differ when a run resumes: they change neither the model nor the batches
RESUMABLE_CHANGES = frozenset({"log_every", "data_dir", "num_train_steps", "checkpoint_every", "seeds"})


class WorkdirMismatchError(InputError):
    """The workdir holds a run of a different config."""


def slug(text: str) -> str:
    """File-name form of a label (``"ConvLuna-16 (reference)"`` -> ``"convluna-16-reference"``) for run folders.
    A decimal point stays (``"meanpool-x0.5"``, not ``x0-5``, which reads as a range)."""
    kept = re.sub(r"(?<=\d)\.(?=\d)", "\0", text.lower())
    return re.sub(r"[^a-z0-9\0]+", "-", kept).strip("-").replace("\0", ".")


def config_to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
    return json.loads(config.to_json_best_effort())


def flatten_config(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"num_layers": 2}}`` -> ``{"model.num_layers": 2}``. An empty dict stays a value: sealed
    config digests depend on it, which is why this is not ``flax.traverse_util.flatten_dict``."""
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
    """SHA-256 of every field but RESUMABLE_CHANGES: two configs with one digest train the same run."""
    d = config if isinstance(config, dict) else config_to_dict(config)
    kept = {k: v for k, v in flatten_config(d).items() if k.split(".")[0] not in RESUMABLE_CHANGES}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


SUITE_CONFIG_FIELDS = ("task", "variant", "model", "num_train_steps")  # a config.json without them is not ours
CHECKPOINT_FOLDERS = ("latest", "best")


def foreign_problem(workdir: Path) -> str | None:
    """Why ``workdir`` is not this suite's run (None: it is, or holds none): a config.json that is not an
    lra.train config, or files in checkpoints/ this suite never writes. Never resumed nor emptied by --start_over."""
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
    """Refuse a workdir whose config.json differs in anything that changes the run, or that is not this suite's
    run (then no advice deletes it). ``fix``: what to do instead (default: a new --workdir or --start_over)."""
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
    """A finished run's config.json, fields added since taking the values it trained with (lra.evaluate,
    lra_lab.diagnose). FileNotFoundError when there is none; RunFileError (exit 5) when it is damaged."""
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


# -- one process per workdir, and no file written through a link ---------------------------------------------
LOCK_NAME = ".lock"


def open_run_file(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a run file with ``O_NOFOLLOW``: never written through a link to elsewhere. A symlink is a
    RunStateError (exit 2, nothing written); any other failure a StorageError (exit 4)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as e:
        if Path(path).is_symlink():
            raise RunStateError(
                f"{path} is a symlink (to {os.readlink(path)}); a run's files are never written through a "
                "link. Nothing was written: remove the link (or use another --workdir)"
            ) from None
        raise StorageError(path, e) from None


# filelock releases a garbage-collected FileLock; a WorkdirLock is held until release() or the process's end
_HELD_LOCKS: set[filelock.FileLock] = set()


class WorkdirLock:
    """One process per workdir: filelock's ``FileLock`` on ``<workdir>/.lock``, held until ``release()`` or the
    process's end. The OS drops an ``fcntl.flock`` when its process dies (even by SIGKILL) and the file is kept
    (no soft-lock fallback), so a stale file never blocks a rerun. Added: the holder's pid and host, named in the
    refusal; a symlink refused by name; the suite's errors (exit 3 held, 2 a symlink, 4 the disk)."""

    def __init__(self, workdir: Path, flag: str = "--workdir"):
        self.path = Path(workdir) / LOCK_NAME
        self.flag = flag  # the option that names this folder in the refusing command's own terms
        self._lock: filelock.FileLock | None = None

    @staticmethod
    def _write_holder(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)

    def _holder(self) -> str:
        try:
            fd = open_run_file(self.path, os.O_RDONLY)
        except (RunStateError, StorageError):
            return "unknown"
        try:
            return os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
        finally:
            os.close(fd)

    def acquire(self) -> WorkdirLock:
        lock = filelock.FileLock(
            self.path, timeout=0, thread_local=False, preserve_lock_file=True, on_acquired=self._write_holder
        )
        try:
            lock.acquire()
        except filelock.Timeout:  # another process (or another lock of this one) holds it
            raise WorkdirLockedError(
                f"{self.flag} {self.path.parent} is in use by another process ({self._holder()}); nothing was "
                f"changed. Wait for it to finish (or stop it), or use another {self.flag}."
            ) from None
        except OSError as e:
            if self.path.is_symlink():
                raise RunStateError(
                    f"{self.path} is a symlink (to {os.readlink(self.path)}); a run's files are never written "
                    "through a link. Nothing was written: remove the link (or use another --workdir)"
                ) from None
            raise StorageError(self.path, e) from None
        self._lock = lock
        _HELD_LOCKS.add(lock)  # held until release() or the process ends, not until this object is collected
        return self

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()  # closes the descriptor, which drops the lock
            _HELD_LOCKS.discard(self._lock)
            self._lock = None

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- the atomic writers, metrics.jsonl, result.json, sessions, removal and export ----------------------------
def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write, fsync, rename: a reader sees the old file or the new one, never a torn one. The temporary name is
    this writer's own (pid, random tag), so of two writers of one file the last rename wins, whole."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StorageError(path, e) from None


def write_text_atomic(path: Path, text: str) -> None:
    """:func:`write_bytes_atomic` of UTF-8 text."""
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, obj: Any) -> None:
    """:func:`write_bytes_atomic` of ``obj`` as indented, key-sorted JSON."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def check_can_write(path: Path, folder: bool = False) -> None:
    """StorageError (exit 4), before any work, for an output that could not be written (a parent that is a file,
    a read-only folder), probed with a temporary file. ``folder``: ``path`` is a folder to write into."""
    if not folder and path.is_dir():
        raise StorageError(path, IsADirectoryError(errno.EISDIR, "it is a folder"))
    start = path if folder else path.parent
    for parent in (start, *start.parents):
        if parent.exists():
            if not parent.is_dir():
                raise StorageError(path, NotADirectoryError(errno.ENOTDIR, f"{parent} is a file, not a folder"))
            try:
                with tempfile.TemporaryFile(dir=parent):
                    pass
            except OSError as e:
                raise StorageError(path, e) from None
            return


def write_figure_atomic(fig: Any, path: Path, **savefig: Any) -> None:
    """A matplotlib figure drawn into memory (format from the suffix), then :func:`write_bytes_atomic`."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", **savefig)
    write_bytes_atomic(path, buffer.getvalue())


# result.json: field -> (type, check). A file missing any of them is not a finished run.
_UNIT = (float, lambda v: 0.0 <= v <= 1.0)
RESULT_FIELDS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "task": (str, bool),
    "attention": (str, bool),
    "variant": (str, bool),
    "seed": (int, lambda v: True),
    "best_val_accuracy": _UNIT,
    "best_step": (int, lambda v: v >= 1),
    "test_accuracy": _UNIT,
    "test_loss": (float, math.isfinite),
    "num_train_steps": (int, lambda v: v >= 1),
    "train_seconds": (float, lambda v: v >= 0),
    "steps_per_second": (float, lambda v: v >= 0),
    "num_params": (int, lambda v: v >= 1),
    "config_preset": (str, bool),
    "device_kind": (str, bool),
    "num_devices": (int, lambda v: v >= 1),
    "jax_version": (str, bool),
    "git_commit": (str, bool),
}


def result_problem(path: Path, config: ml_collections.ConfigDict | None = None) -> str | None:
    """Why ``path`` is not the result of a finished run of ``config`` (None: it is; "missing")."""
    if not path.exists():
        return "missing"
    try:
        result = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return f"not valid JSON ({e})"
    if not isinstance(result, dict):
        return "not a JSON object"
    for name, (kind, ok) in RESULT_FIELDS.items():
        value = result.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool) or not ok(value):
            return f"field {name!r} is {'missing' if name not in result else f'invalid ({value!r})'}"
    if result["best_step"] > result["num_train_steps"]:
        return f"best_step {result['best_step']} > num_train_steps {result['num_train_steps']}"
    if config is not None:
        for name, want in (
            ("task", config.task),
            ("variant", config.variant),
            ("seed", config.seed),
            ("num_train_steps", config.num_train_steps),
        ):
            if result[name] != want:
                return f"{name} is {result[name]!r}, this config's is {want!r}"
    return None


# result.json field -> config.json field (flattened) that must agree for the record to be its run's.
_IDENTITY_FIELDS = (
    ("task", "task"),
    ("variant", "variant"),
    ("seed", "seed"),
    ("num_train_steps", "num_train_steps"),
    ("attention", "model.attention"),
    ("config_preset", "preset"),
)


def record_problem(path: Path) -> str | None:
    """Why a result.json is not a finished run's record agreeing with its own run files (None: it is): its identity
    fields against config.json, test accuracy against metrics.jsonl, start commit against sessions.jsonl. Every
    reader of records makes this check: a record edited by hand or copied from another run is never counted."""
    problem = result_problem(path)
    if problem is not None:
        return problem
    result = json.loads(path.read_text())
    run = path.parent
    folder_seed = run.name.removeprefix("seed")
    if run.name.startswith("seed") and folder_seed.isdigit() and int(folder_seed) != result["seed"]:
        return f"it holds seed {result['seed']}, its folder {run.name} (a record of another run)"
    config_path = run / "config.json"
    if config_path.exists():
        try:
            config = json.loads(config_path.read_text())
            if not isinstance(config, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError, UnicodeDecodeError) as e:
            return f"its config.json is damaged ({str(e)[:80]})"
        flat = flatten_config(config)
        for field, key in _IDENTITY_FIELDS:
            if key in flat and flat[key] != result[field]:
                return f"its {field} is {result[field]!r}, its config.json's {flat[key]!r} (a record of another run)"
    metrics = run / "metrics.jsonl"
    if metrics.exists():
        try:
            tests = [r for r in _quiet_records(metrics) if r["split"] == "test"]
        except RunFileError as e:
            return f"its metrics.jsonl is damaged ({str(e)[:80]})"
        if tests and isinstance(tests[-1].get("accuracy"), (int, float)):
            logged = float(tests[-1]["accuracy"])
            if not math.isclose(logged, result["test_accuracy"], rel_tol=1e-6, abs_tol=1e-9):
                return (
                    f"its test_accuracy {result['test_accuracy']!r} is not the {logged!r} its metrics.jsonl "
                    "logged (an edited or copied record)"
                )
    start = result.get("git_commit_start")
    sessions = read_sessions(run)
    if isinstance(start, str) and sessions and sessions[0]["git_commit"] != start:
        first = sessions[0]["git_commit"]
        return f"its git_commit_start {start[:12]} is not its sessions.jsonl's first commit {first[:12]}"
    return None


def _quiet_records(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records, a torn last line dropped without the warning (a reader of records)."""
    import contextlib

    with contextlib.redirect_stderr(io.StringIO()):
        return MetricsLog(path).read()


def run_traces(workdir: Path) -> list[str]:
    """The parts of a run in ``workdir`` besides its latest checkpoints (metrics, best, result)."""
    traces = []
    metrics = workdir / "metrics.jsonl"
    if metrics.exists() and metrics.stat().st_size > 0:
        traces.append("metrics.jsonl")
    best = workdir / "checkpoints" / "best"
    if best.is_dir() and any(p.name[:1].isdigit() for p in best.iterdir()):
        traces.append("checkpoints/best")
    if (workdir / "result.json").exists():
        traces.append("result.json")
    return traces


# what --start_over removes (not the lock, not sweep records): checkpoints first and config.json last, so that a
# kill midway never leaves checkpoints without the config that guards them
RUN_OUTPUTS = (
    "checkpoints",
    "result.json",
    "result.json.seal",
    "metrics.jsonl",
    "tensorboard",
    "evaluations.jsonl",
    "sessions.jsonl",
    "config.json",
)
REMOVING = ".removing-"  # an output being deleted is first renamed to .removing-<name>


def remove_run(workdir: Path) -> list[str]:
    """Delete the run's outputs, each renamed aside first (a kill never leaves half a folder); the names removed."""
    removed = []
    for name in RUN_OUTPUTS:
        path = workdir / name
        if not path.exists():
            continue
        doomed = workdir / f"{REMOVING}{name}"
        _delete(doomed)
        os.replace(path, doomed)
        _delete(doomed)
        removed.append(name)
    for leftover in workdir.glob(f"{REMOVING}*"):
        _delete(leftover)
    return removed


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


METRICS_SPLITS = ("train", "validation", "test", "memory")


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step and split."""

    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` and the test record (a resumed run re-logs them, identically)."""
        if not self.path.exists():
            return
        keep = [r for r in self.read() if _kept(r, step)]
        write_text_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        fd = open_run_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            with os.fdopen(fd, "a") as f:
                f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        except OSError as e:
            raise StorageError(self.path, e) from None

    def read(self) -> list[dict[str, Any]]:
        """The records; a torn final line (a kill during an append) is dropped with a warning, any other
        malformed line is a RunFileError naming the file and line."""
        if not self.path.exists():
            return []
        text = self.path.read_bytes().decode("utf-8", "replace")
        lines = text.split("\n")
        torn = lines.pop() if lines else ""  # text after the last newline: "" unless torn
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            record = _parse_record(line)
            if record is None:
                raise RunFileError(
                    f"{self.path} line {number} is not a metrics record: {line[:60]!r}. Fix or delete "
                    f"that line (a resumed run rewrites the records after its checkpoint)."
                )
            records.append(record)
        if torn.strip():
            record = _parse_record(torn)
            if record is None:
                _warn(
                    f"{self.path} line {len(lines) + 1} is cut short (a write interrupted by a kill); "
                    f"dropping it: {torn[:60]!r}"
                )
            else:
                records.append(record)
        return records


def _parse_record(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    ok = isinstance(record, dict) and isinstance(record.get("step"), int) and record.get("split") in METRICS_SPLITS
    return record if ok else None


def _kept(record: dict[str, Any], step: int) -> bool:
    return record["step"] <= step and record["split"] != "test"


def git_commit() -> str:
    """The commit of the code that ran (``-dirty`` with uncommitted changes; ``unknown`` without git). A declared
    ``$LRA_GIT_COMMIT`` (a copy without ``.git``) gets ``-declared`` unless the local HEAD is that commit: a copy's
    own ``.git`` may be a snapshot commit naming nothing in this repository."""
    root = Path(__file__).resolve().parent.parent
    declared = os.environ.get("LRA_GIT_COMMIT", "").strip()
    fallback = f"{declared}-declared" if declared else "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0 or (declared and head.stdout.strip() != declared):
            return fallback
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return fallback


SESSIONS = "sessions.jsonl"


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one fsynced JSON line after cutting a torn last line; StorageError (exit 4) if it cannot."""
    fd = open_run_file(path, os.O_RDWR | os.O_CREAT)
    try:
        with os.fdopen(fd, "rb+") as f:
            data = f.read()
            end = data.rfind(b"\n") + 1  # a torn final line is cut first
            if end != len(data):
                f.truncate(end)
            f.seek(0, os.SEEK_END)
            f.write((json.dumps(record, sort_keys=True) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise StorageError(path, e) from None


def read_sessions(workdir: Path) -> list[dict[str, Any]]:
    """The parsed lines of ``workdir/sessions.jsonl`` (unparsable lines skipped; [] when absent)."""
    path = workdir / SESSIONS
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("git_commit"), str):
            out.append(record)
    return out


# enough to rebuild every table and plot, no checkpoints
RECORD_FILES = (
    "config.json",
    "metrics.jsonl",
    "result.json",
    "result.json.seal",
    "sweep_run.json",
    "evaluations.jsonl",
    "sessions.jsonl",
)


def export_records(runs_root: Path, out_root: Path) -> list[Path]:
    """Copy every run's record files to ``out_root`` (same layout), each folder replaced whole; a record failing
    :func:`record_problem` is not exported and never replaces a good copy. The exported folders."""
    exported = []
    for result in sorted(Path(runs_root).rglob("result.json")):
        run = result.parent
        problem = record_problem(result)
        if problem is not None:
            _warn(f"{result} is not a finished run's record ({problem}); not exported")
            continue
        target = Path(out_root) / run.relative_to(runs_root)
        replace_folder(target, {name: (run / name).read_bytes() for name in RECORD_FILES if (run / name).exists()})
        exported.append(target)
        missing = commit_not_in_history(result, target)
        if missing:
            _warn(
                f"{target / 'result.json'} names commit {missing}, which this repository's history does not have "
                "(a mistyped LRA_GIT_COMMIT, or a commit never brought here): `python -m lra_lab.reproduce --audit` "
                "cannot place the run after its claim's rule; fix the declaration, or say in the record why it differs"
            )
    return exported


def replace_folder(target: Path, files: dict[str, bytes]) -> None:
    """Make ``target`` hold ``files`` (name -> bytes; non-record files there are kept) as a whole: the new folder
    written and fsynced beside it, the old renamed aside, the new renamed in, the old deleted. A kill leaves the old
    run or the new, never a mix; a kill between the renames leaves ``.<name>.old-*``, which the next call puts back."""
    parent, name = target.parent, target.name
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for leftover in sorted(parent.glob(f".{name}.old-*")):
            if target.exists():
                shutil.rmtree(leftover)
            else:
                os.replace(leftover, target)
        for leftover in parent.glob(f".{name}.new-*"):
            shutil.rmtree(leftover)
        if (
            target.is_dir()
            and all((target / n).is_file() and (target / n).read_bytes() == data for n, data in files.items())
            and not any((target / n).exists() for n in RECORD_FILES if n not in files)
        ):
            return  # already this run's record
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        new, old = parent / f".{name}.new-{tag}", parent / f".{name}.old-{tag}"
        new.mkdir()
    except OSError as e:
        raise StorageError(target, e) from None
    writing = target
    try:
        kept = [p for p in target.iterdir() if p.name not in RECORD_FILES] if target.is_dir() else []
        for path in kept:  # files of the folder that are not records (notes a user added) stay
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, new / path.name)
        for n, data in files.items():
            writing = target / n
            with open(new / n, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        writing = target
        if target.exists():
            os.replace(target, old)
        os.replace(new, target)
    except OSError as e:
        if new.exists():
            shutil.rmtree(new, ignore_errors=True)
        raise StorageError(writing, e) from None
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def commit_base(commit: str) -> str:
    """A :func:`git_commit` value without ``-declared`` and ``-dirty``."""
    return commit.removesuffix("-declared").removesuffix("-dirty")


def record_commit(path: Path) -> tuple[str | None, str]:
    """(the commit the record's data came from, which field said so)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, "unreadable"
    if not isinstance(data, dict):
        return None, "not a JSON object"
    if isinstance(data.get("git_commit_start"), str):
        return data["git_commit_start"], "git_commit_start"
    if isinstance(data.get("git_commit"), str):
        field = "git_commit (end of the run)" if path.name == "result.json" else "git_commit"
        return data["git_commit"], field
    return None, "no commit recorded"


def commit_not_in_history(result: Path, where: Path) -> str | None:
    """``result``'s start commit if ``where``'s git history lacks it (None: it has it, or cannot tell): a mistyped
    ``LRA_GIT_COMMIT`` caught at export, before the audit would call the claim exploratory."""
    commit, _field = record_commit(result)
    if commit is None:
        return None
    commit = commit_base(commit)
    if not commit or commit == "unknown":
        return None
    try:
        inside = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=where, capture_output=True, timeout=10)
        if inside.returncode != 0:
            return None
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"], cwd=where, capture_output=True, text=True, timeout=10
        )
        if shallow.stdout.strip() == "true":  # its history stops short: absent says nothing
            return None
        known = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=where, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return None if known.returncode == 0 else commit
