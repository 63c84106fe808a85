"""What a record proves: sealed JSON, record seals and corrections, provenance and code trees.

Sealed JSON: a file whose first line is its body's SHA-256, so one flipped bit is found before use (checkpoints'
``integrity.json``, records' seals). A record's seal, ``<name>.seal``, holds its digest: an edit after writing is
found and named. A correction never edits the record: a sealed ``<name>.correction-<n>.json`` says who changed which
fields from what to what, why and when; :func:`corrected` applies them in order.

Provenance: an end commit alone cannot show a rule was committed before the data, and a commit may be typed by hand
(``LRA_GIT_COMMIT``) or dirty. So a record's command calls :func:`mark_start` first, and :func:`stamp` gives the
command, the start and end commits and ``code_start``: the git tree ids of the code on disk (files as git tracks them,
hashed as ``git write-tree`` would, from git's documented object format, without ``.git``), which the audit compares
with ``git rev-parse <commit>:lra`` (docs/design.md, Reproductions).
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import os
import shlex
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np


# -- sealed JSON: checksums that tell an intact file from a damaged one --------------------------------------
class IntegrityError(ValueError):
    """What differs from the record; the caller adds which checkpoint."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def array_digests(tree: Any) -> dict[str, str]:
    """SHA-256 of each leaf's dtype, shape and bytes, keyed by its path in the tree (host arrays)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        a = np.ascontiguousarray(np.asarray(leaf))
        header = f"{a.dtype.str}{a.shape}".encode()
        out[jax.tree_util.keystr(path)] = _sha256(header + a.tobytes())
    return out


def nonfinite_leaves(tree: Any) -> list[str]:
    """Paths of the floating-point leaves that hold a NaN or Inf (host arrays)."""
    bad = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        a = np.asarray(leaf)
        if np.issubdtype(a.dtype, np.inexact) and not np.isfinite(a).all():
            bad.append(jax.tree_util.keystr(path))
    return bad


def file_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``, keyed by its relative path."""
    from lra.data.cache import file_digest

    return {str(p.relative_to(folder)): file_digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def write_sealed_json(path: Path, obj: Any) -> None:
    """``obj`` as JSON under a first line holding the body's SHA-256, written atomically and fsynced."""
    from lra.training.run_files import write_text_atomic

    body = json.dumps(obj, indent=1, sort_keys=True)
    write_text_atomic(path, _sha256(body.encode()) + "\n" + body)


def read_sealed_json(path: Path) -> Any:
    """The object ``write_sealed_json`` wrote; IntegrityError if the file was changed at all."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise IntegrityError(f"{path.name} is missing") from None
    digest, _, body = raw.partition(b"\n")
    if _sha256(body) != digest.decode("ascii", "replace"):
        raise IntegrityError(f"{path.name} does not match its own checksum")
    return json.loads(body)


def compare(recorded: dict[str, str], actual: dict[str, str], what: str) -> None:
    """IntegrityError naming the first missing, extra or changed entry."""
    for name in sorted(recorded.keys() | actual.keys()):
        if name not in actual:
            raise IntegrityError(f"{what} {name} is missing")
        if name not in recorded:
            raise IntegrityError(f"{what} {name} is not in the record")
        if recorded[name] != actual[name]:
            raise IntegrityError(f"{what} {name} does not match its checksum")


# -- record seals and corrections ----------------------------------------------------------------------------
SEALED = "sealed"  # the record matches its seal
UNSEALED = "unsealed"  # no seal: a record written before seals (or by hand)
EDITED = "edited after it was written"  # the record does not match its seal
SEAL_DAMAGED = "seal damaged"  # the seal itself does not match its own checksum


def seal_path(record: Path) -> Path:
    return record.with_name(record.name + ".seal")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def seal(record: Path) -> Path:
    """Write ``record``'s seal beside it (call right after writing the record); returns its path."""
    from lra.data.cache import file_digest

    path = seal_path(record)
    write_sealed_json(path, {"file": record.name, "sha256": file_digest(record), "sealed": _now()})
    return path


def seal_state(record: Path) -> tuple[str, str]:
    """(SEALED, UNSEALED, EDITED or SEAL_DAMAGED; a sentence naming the record and what differs)."""
    from lra.data.cache import file_digest

    path = seal_path(record)
    if not path.exists():
        return UNSEALED, f"{record.name} has no seal (written before records were sealed)"
    try:
        recorded = read_sealed_json(path)
    except (IntegrityError, ValueError) as e:
        return SEAL_DAMAGED, f"{path.name} is damaged ({e})"
    if not isinstance(recorded, dict) or recorded.get("file") != record.name:
        return SEAL_DAMAGED, f"{path.name} does not name {record.name}"
    if file_digest(record) != recorded.get("sha256"):
        return EDITED, (
            f"{record.name} was changed after it was written (sealed {recorded.get('sealed')}; "
            "a correction belongs in a separate file: lra.training.provenance.write_correction)"
        )
    return SEALED, f"{record.name} matches its seal of {recorded.get('sealed')}"


def correction_paths(record: Path) -> list[Path]:
    """The record's corrections, oldest first."""
    found = record.parent.glob(f"{record.name}.correction-*.json")

    def number(p: Path) -> int:
        tail = p.name[len(record.name) + len(".correction-") : -len(".json")]
        return int(tail) if tail.isdigit() else -1

    return sorted((p for p in found if number(p) >= 0), key=number)


def write_correction(record: Path, changes: dict[str, Any], who: str, why: str) -> Path:
    """A new sealed file correcting ``changes`` (field -> new value) of ``record``, which stays untouched."""
    from lra.data.cache import file_digest

    if not who.strip() or not why.strip():
        raise ValueError("a correction says who made it and why")
    current = corrected(record)
    path = record.with_name(f"{record.name}.correction-{len(correction_paths(record)) + 1}.json")
    body = {
        "file": record.name,
        "record_sha256": file_digest(record),
        "who": who,
        "why": why,
        "date": _now(),
        "changes": {k: {"from": current.get(k), "to": v} for k, v in changes.items()},
    }
    json.dumps(body)  # not JSON-serializable: fail before writing anything
    write_sealed_json(path, body)
    return path


def read_corrections(record: Path) -> list[dict[str, Any]]:
    """Each correction of ``record`` (IntegrityError: one was edited, or corrects another file)."""
    from lra.data.cache import file_digest

    out = []
    digest = file_digest(record)
    for path in correction_paths(record):
        body = read_sealed_json(path)
        if body.get("file") != record.name or body.get("record_sha256") != digest:
            raise IntegrityError(f"{path.name} corrects another version of {record.name}")
        out.append(body)
    return out


def corrected(record: Path) -> dict[str, Any]:
    """The record (a JSON object) with its corrections applied in order."""
    data = json.loads(record.read_text())
    for body in read_corrections(record):
        for field, change in body["changes"].items():
            data[field] = change["to"]
    return data


# -- provenance: the command and the commit at a process's start ---------------------------------------------
_start: dict[str, Any] | None = None


def command_line() -> str:
    """This process's command as typed (``python -m pkg.mod --flag``), not the default one."""
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    return shlex.join(["python", *argv[1:]])


def mark_start() -> dict[str, Any]:
    """Record this process's start commit, date and code trees (first call wins)."""
    global _start
    if _start is None:
        from lra.training.run_files import git_commit

        _start = {"git_commit_start": git_commit(), "started": _now(), "code_start": code_evidence()}
    return _start


def stamp() -> dict[str, Any]:
    """The provenance fields of a record written now."""
    from lra.training.run_files import git_commit

    # None: the command never marked its start
    start: Mapping[str, Any] = {"git_commit_start": None, "started": None} if _start is None else _start
    end = git_commit()
    return {
        "command": command_line(),
        **start,
        "git_commit": end,
        "date": _now(),
        "dirty": end.endswith("-dirty") or str(start["git_commit_start"]).endswith("-dirty"),
    }


# -- code trees: the git tree hash of the code a process runs ------------------------------------------------
ALWAYS_IGNORED = ("__pycache__", "*.pyc", "*.pyo", ".DS_Store")  # whatever .gitignore says
CODE_FOLDERS = ("lra", "lra_lab", "configs")


def git_object_id(kind: str, data: bytes) -> str:
    """The id git gives an object of ``kind`` ("blob", "tree") holding ``data``."""
    return hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest()


def ignore_patterns(repo_root: Path) -> tuple[str, ...]:
    """Root ``.gitignore``'s name patterns (outer ``/`` dropped; negations, paths not understood) + ALWAYS_IGNORED."""
    patterns = list(ALWAYS_IGNORED)
    try:
        lines = (repo_root / ".gitignore").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            patterns.append(line.strip("/"))
    return tuple(patterns)


def _ignored(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def tree_id(folder: Path, patterns: Iterable[str] = ALWAYS_IGNORED) -> str | None:
    """``folder``'s tree id as ``git write-tree`` would give it with every file added (None: git has no tree)."""
    patterns = tuple(patterns)
    entries: list[tuple[str, bytes]] = []  # (sort key, entry bytes)
    try:
        children = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        return None
    for entry in children:
        if _ignored(entry.name, patterns):
            continue
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            oid, git_mode = git_object_id("blob", os.readlink(entry.path).encode()), "120000"
        elif stat.S_ISDIR(mode):
            sub = tree_id(Path(entry.path), patterns)
            if sub is None:
                continue
            oid, git_mode = sub, "40000"
        elif stat.S_ISREG(mode):
            oid = git_object_id("blob", Path(entry.path).read_bytes())
            git_mode = "100755" if mode & stat.S_IXUSR else "100644"
        else:
            continue
        key = entry.name + ("/" if git_mode == "40000" else "")
        entries.append((key, f"{git_mode} {entry.name}\0".encode() + bytes.fromhex(oid)))
    if not entries:
        return None
    entries.sort(key=lambda e: e[0].encode())
    return git_object_id("tree", b"".join(e for _, e in entries))


def package_root() -> Path:
    """The root of the imported ``lra`` package's repository (not the working directory: PYTHONPATH)."""
    import lra

    return Path(lra.__file__).resolve().parent.parent


def code_trees(repo_root: Path | None = None) -> dict[str, str | None]:
    """The tree id of each of CODE_FOLDERS present under ``repo_root`` (default: :func:`package_root`)."""
    root = repo_root or package_root()
    patterns = ignore_patterns(root)
    return {name: tree_id(root / name, patterns) for name in CODE_FOLDERS if (root / name).is_dir()}


def _git_out(root: Path, *args: str) -> bytes | None:
    import subprocess

    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def uncommitted_digest(root: Path) -> str | None:
    """SHA-256 of the code folders' diff from ``HEAD`` and untracked files (None without git): the diff is not kept
    (it can be large), but whoever kept it can show it is the one that ran."""
    diff = _git_out(root, "diff", "--binary", "HEAD", "--", *CODE_FOLDERS)
    others = _git_out(root, "ls-files", "--others", "--exclude-standard", "-z", "--", *CODE_FOLDERS)
    if diff is None or others is None:
        return None
    h = hashlib.sha256(diff)
    for name in sorted(n for n in others.split(b"\0") if n):
        h.update(b"\0" + name + b"\0" + (root / name.decode()).read_bytes())
    return h.hexdigest()


def code_evidence(repo_root: Path | None = None) -> dict[str, str | None]:
    """``code_start``: :func:`code_trees`, and ``diff_sha256`` when they differ from ``HEAD``'s."""
    root = repo_root or package_root()
    out: dict[str, str | None] = dict(code_trees(root))
    if _git_out(root, "rev-parse", "--verify", "HEAD") is not None:  # git here: compare with HEAD's trees
        head = {name: _git_out(root, "rev-parse", "--verify", "-q", f"HEAD:{name}") for name in CODE_FOLDERS}
        if any(out.get(name) != (h.decode().strip() if h else None) for name, h in head.items()):
            out["diff_sha256"] = uncommitted_digest(root)
    return out


def append_session(workdir: Path, step: int, extra: dict[str, Any]) -> dict[str, Any]:
    """One sessions.jsonl line per process starting or resuming the run; the first is the run's start, which a
    resume on another commit cannot overwrite. Here, not in run_files: it needs :func:`code_evidence`."""
    from lra.training.run_files import SESSIONS, append_jsonl, git_commit

    record = {
        "step": step,
        "started": _now(),
        "git_commit": git_commit(),
        "code_start": code_evidence(),
        "argv": list(sys.argv),
        **extra,
    }
    append_jsonl(workdir / SESSIONS, record)
    return record
