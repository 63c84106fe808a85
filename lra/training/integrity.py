"""Checksums that tell an intact checkpoint from a damaged one.

A checkpoint folder gets an ``integrity.json`` listing the SHA-256 of every file and of every
saved array. The record carries its own checksum on its first line, so one flipped bit anywhere
(a data file, orbax metadata, the record itself) is found before a wrong state is used.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np


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
    """Write ``obj`` as JSON under a first line holding the body's SHA-256 (atomic and fsynced:
    run_files.write_text_atomic)."""
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
