"""The git tree hash of the code a process runs, computed from the files themselves (no ``.git``).

A record that names a commit proves nothing by itself: the commit may be typed in by hand
(``LRA_GIT_COMMIT`` on a machine without this history), or the tree may have had uncommitted edits.
So every record also stores the *tree hash* of the ``lra/`` package the process imported and of the
``configs/`` beside it, computed the way git computes it (``git hash-object`` for each file, then
``git write-tree``'s sorted tree objects), so that the audit (lra.reproduce.record_evidence) can
compare it with ``git rev-parse <commit>:lra`` and know, without trusting the typed-in hash, whether
the declared commit's files are the files that ran.

Git's format, written anew from its documentation: a blob's id is ``sha1(b"blob <size>\\0" + bytes)``;
a tree's is ``sha1(b"tree <size>\\0" + entries)``, each entry ``b"<mode> <name>\\0"`` plus the
child's 20-byte id, sorted by name with a directory's name compared as if it ended in ``/``. Modes:
``100644`` file, ``100755`` executable file, ``120000`` symlink (its target is the blob), ``40000``
tree. Empty directories (or ones holding only ignored files) are not in a git tree, so not here.

Which files count is what git would track: everything except the repository's ignore patterns
(``.gitignore`` at the root: simple name patterns, the ones this project uses) and ``__pycache__``.
A file git ignores but the process imported cannot happen here (``.py`` files are never ignored).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

# Always ignored, whatever .gitignore says: byte-code caches and editors' lock files.
ALWAYS_IGNORED = ("__pycache__", "*.pyc", "*.pyo", ".DS_Store")
# The folders whose trees a record stores (relative to the repository root).
CODE_FOLDERS = ("lra", "configs")


def git_object_id(kind: str, data: bytes) -> str:
    """The id git gives an object of ``kind`` ("blob", "tree") holding ``data``."""
    return hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest()


def ignore_patterns(repo_root: Path) -> tuple[str, ...]:
    """The name patterns of ``repo_root/.gitignore`` (a leading or trailing ``/`` dropped; negations
    and nested paths are not used by this project and are not understood) plus ALWAYS_IGNORED."""
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
    """The git tree id of ``folder`` as ``git write-tree`` would compute it with every file added
    (None: no file in it that git would track, so git has no tree for it)."""
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
    """The repository root of the ``lra`` package this process imported (not the working directory:
    PYTHONPATH may point elsewhere)."""
    import lra

    return Path(lra.__file__).resolve().parent.parent


def code_trees(repo_root: Path | None = None) -> dict[str, str | None]:
    """``{"lra": tree id, "configs": tree id}`` of the code under ``repo_root`` (default: the
    imported package's root), to store in a record at the start of a run."""
    root = repo_root or package_root()
    patterns = ignore_patterns(root)
    return {name: tree_id(root / name, patterns) for name in CODE_FOLDERS}


def _git_out(root: Path, *args: str) -> bytes | None:
    import subprocess

    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def uncommitted_digest(root: Path) -> str | None:
    """SHA-256 of what the code folders hold beyond ``HEAD`` (``git diff --binary HEAD`` of them, then
    each untracked, not ignored file's name and bytes); None without git here. The diff itself is not
    kept (it can be large): the digest lets whoever kept the diff show it is the one that ran."""
    diff = _git_out(root, "diff", "--binary", "HEAD", "--", *CODE_FOLDERS)
    others = _git_out(root, "ls-files", "--others", "--exclude-standard", "-z", "--", *CODE_FOLDERS)
    if diff is None or others is None:
        return None
    h = hashlib.sha256(diff)
    for name in sorted(n for n in others.split(b"\0") if n):
        h.update(b"\0" + name + b"\0" + (root / name.decode()).read_bytes())
    return h.hexdigest()


def code_evidence(repo_root: Path | None = None) -> dict[str, str | None]:
    """What a record stores at its run's start (field ``code_start``): the tree ids of ``lra/`` and
    ``configs/`` as they are on disk, and, when they differ from ``HEAD``'s (uncommitted code),
    ``diff_sha256``: :func:`uncommitted_digest`."""
    root = repo_root or package_root()
    out: dict[str, str | None] = dict(code_trees(root))
    head = {name: _git_out(root, "rev-parse", f"HEAD:{name}") for name in CODE_FOLDERS}
    if all(v is not None for v in head.values()):
        if any(out[name] != head[name].decode().strip() for name in CODE_FOLDERS):  # type: ignore[union-attr]
            out["diff_sha256"] = uncommitted_digest(root)
    return out
