"""The files of a run's workdir: config.json, metrics.jsonl and result.json (docs/design.md, A run).

config.json's helpers live in :mod:`lra.training.run_config` and ``RunFileError`` in
:mod:`lra.training.run_errors`; both are re-exported here, the import path every caller uses."""

from __future__ import annotations

import datetime
import errno
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ml_collections

from lra.training.run_config import RESUMABLE_CHANGES as RESUMABLE_CHANGES
from lra.training.run_config import WorkdirMismatchError as WorkdirMismatchError
from lra.training.run_config import check_workdir as check_workdir
from lra.training.run_config import config_differences as config_differences
from lra.training.run_config import config_digest as config_digest
from lra.training.run_config import config_to_dict as config_to_dict
from lra.training.run_config import describe_differences as describe_differences
from lra.training.run_config import flatten_config as flatten_config
from lra.training.run_config import load_run_config as load_run_config
from lra.training.run_config import slug as slug
from lra.training.run_errors import RunFileError as RunFileError
from lra.training.run_errors import StorageError
from lra.training.workdir_lock import open_run_file


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write, fsync, rename: a reader sees the old file or the new one, never a torn one. The
    temporary name is this writer's own (pid and a random tag), so two writers of one file never
    write into each other's temporary: the last rename wins, whole."""
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
    """Refuse, before any work, an output that could not be written (a parent that is a file, a
    read-only folder): StorageError naming it (exit 4). A probe file in the nearest existing folder
    is made and removed; nothing is left. ``folder``: ``path`` is a folder to write into."""
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
    """A matplotlib figure drawn into memory, then :func:`write_bytes_atomic`: a full disk leaves
    the previous image, never a torn one (the format is the file's suffix)."""
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
    """Why ``path`` (a run's result.json) is not a finished run's record that agrees with its own run
    files (None: it is): :func:`result_problem`, then its task, variant, seed, steps, family and
    preset against the folder's config.json, its test accuracy against metrics.jsonl's test record
    and its start commit against sessions.jsonl's first line (each file checked when present). The
    one check every reader of records makes (reproduce, replication, export, tables, compare): a
    record edited by hand or copied from another run is named, never counted (issue 52 RP6, RP9, EX3)."""
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


# Files whose presence means the workdir holds (part of) a run worth keeping.
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


# What ``--start_over`` removes: every file a run writes (not the lock, not sweep records), in
# this order: the checkpoints first and config.json last, so that a kill midway never leaves
# checkpoints without the config that guards them (issue 26 D3).
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
    """Delete the run's outputs from ``workdir``; the names removed. Each is renamed out of the
    way first (atomic), so a kill midway never leaves half a checkpoints/ folder under its name;
    a leftover ``.removing-*`` of a killed removal is deleted too."""
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


# The splits a metrics.jsonl record may name ("memory": config.log_memory_stats, lra.diagnose reads them).
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
        """The records; a torn final line (a kill during an append) is dropped with a warning,
        any other malformed line is a RunFileError naming the file and line."""
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
    """The commit of the code that ran (``-dirty`` when the tree has uncommitted changes).

    ``$LRA_GIT_COMMIT`` declares the commit a copy of the tree was made from (a machine that gets the
    files without ``.git``: a container, a cloud VM, docs/gpu_runbook.md): unless the local git's HEAD
    is that very commit, the declared one is reported with ``-declared`` appended, since nothing
    there can check it. The local git does not win: a copy can carry a ``.git`` of its own, a
    snapshot commit that names nothing in this repository (it happened: records of 2026-11-26 first
    named 08af3b7-dirty). Without either: ``unknown``."""
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


def append_session(workdir: Path, step: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Append one line to ``workdir/sessions.jsonl`` for a process that starts (or resumes) the run at
    ``step``: its date, commit (``-dirty`` when the tree has changes), command line and ``extra``
    (the speed settings). The first line is the run's start: provenance that a later resume on
    another commit cannot overwrite. ``code_start``: the tree ids of the code on disk as this process
    starts (lra.training.code_tree). A line torn by a full disk is cut off before appending."""
    from lra.training.code_tree import code_evidence

    record = {
        "step": step,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "code_start": code_evidence(),
        "argv": list(sys.argv),
        **extra,
    }
    append_jsonl(workdir / SESSIONS, record)
    return record


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line, fsynced; a line torn by a full disk or a kill is cut off
    first, so this one never joins the fragment. StorageError (exit 4) naming the file when it cannot
    be written."""
    fd = open_run_file(path, os.O_RDWR | os.O_CREAT)  # never through a symlink (issue 52 SEC2)
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


def truncate_to_last_newline(path: Path) -> None:
    """Cut a torn final line (a write stopped by a full disk or a kill) before appending, so the
    next line does not join the fragment."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            f.truncate(end)


# What a run's record is made of: enough to rebuild every table and plot, no checkpoints.
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
    """Copy the record files of every finished run under ``runs_root`` to ``out_root`` (same
    relative layout), for committing under results/. Returns the exported run folders.

    Each run folder is replaced as a whole (:func:`replace_folder`): an export killed midway leaves
    every run's record either as it was or complete, never a torn file nor a folder mixing two runs.
    A record that fails :func:`record_problem` (damaged, or disagreeing with its own run files) is
    not exported and never replaces a good copy."""
    exported = []
    for result in sorted(Path(runs_root).rglob("result.json")):
        run = result.parent
        problem = record_problem(result)  # the check every reader makes: the run's own files agree (EX3)
        if problem is not None:  # never export, and never let replace a good copy with, a broken record
            _warn(f"{result} is not a finished run's record ({problem}); not exported")
            continue
        target = Path(out_root) / run.relative_to(runs_root)
        replace_folder(target, {name: (run / name).read_bytes() for name in RECORD_FILES if (run / name).exists()})
        exported.append(target)
        missing = commit_not_in_history(result, target)
        if missing:
            _warn(
                f"{target / 'result.json'} names commit {missing}, which this repository's history does not have "
                "(a mistyped LRA_GIT_COMMIT, or a commit never brought here): `python -m lra.reproduce --audit` "
                "cannot place the run after its claim's rule; fix the declaration, or say in the record why it differs"
            )
    return exported


def replace_folder(target: Path, files: dict[str, bytes]) -> None:
    """Make ``target`` hold exactly ``files`` (name -> bytes; other files already there are kept) as a
    whole: the new folder is written and fsynced beside it, the old one renamed aside, the new one
    renamed in, the old one deleted. A kill at any moment leaves the old run or the new one under
    ``target``, never a mix of two runs (issue 52 EX4); a kill between the two renames leaves the old
    folder as ``.<name>.old-*``, which the next call puts back before it starts."""
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
    """The commit a :func:`git_commit` value names: ``-declared`` (a copy told its commit) and ``-dirty``
    (uncommitted changes on top) taken off."""
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
    """The commit a run's result.json started from (``git_commit_start``, else ``git_commit``; less
    ``-declared``/``-dirty``) when the git repository holding ``where`` lacks it; None when it has it,
    when the record names none (``unknown``), or when ``where`` is in no git repository. Records made
    on a copy of the tree without ``.git`` name a commit declared by hand (``LRA_GIT_COMMIT``): this
    catches a typo at export, before the audit would call the claim exploratory (it happened once:
    6f44cbb5b97e for 6f44cbb1c708)."""
    commit, _field = record_commit(result)  # the commit the audit will judge the record by
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
        if shallow.stdout.strip() == "true":  # its history stops short: absent says nothing (issue 52 EX6)
            return None
        known = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=where, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return None if known.returncode == 0 else commit
