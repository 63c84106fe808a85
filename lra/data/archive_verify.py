"""Checksums and quarantine: an archive checked against its published size, md5 and sha256 (pooch's
``file_hash``) before extraction; a bad one moved to ``<file>.corrupt`` so the next run downloads afresh.
Not pooch's own check: ``pooch.retrieve`` takes one hash and deletes a failing file, no size check, no copy left."""

from __future__ import annotations

import os
from pathlib import Path

import pooch

from lra.data.archives import BASE_ENV, Archive, DownloadError


def quarantine(path: Path) -> Path:
    """Move a bad archive aside (``<file>.corrupt``, replacing an older one): the next run downloads afresh."""
    bad = path.with_name(path.name + ".corrupt")
    os.replace(path, bad)
    return bad


def verify(path: Path, archive: Archive, size: int | None) -> None:
    """Check ``path`` against ``size`` (published or announced) and the checksums; quarantine a mismatch."""
    problem = None
    got = path.stat().st_size
    if size is not None and got != size:
        problem = f"{got} bytes, expected {size}"
    else:
        for algorithm in ("md5", "sha256"):
            want = getattr(archive, algorithm)
            if want and (digest := pooch.file_hash(str(path), alg=algorithm)) != want:
                problem = f"{algorithm} {digest}, expected {want}"
                break
    if problem:
        bad = quarantine(path)
        raise DownloadError(
            f"corrupt download {path}: {problem}; it was moved to {bad} and nothing was extracted; "
            f"to fix: run the command again to download it afresh (if it fails again, a proxy or "
            f"mirror alters the file: try another --url)"
        )


def corrupt(path: Path, reason: object, what: str = "corrupt") -> DownloadError:
    """Quarantine ``path`` and return the error that says why (``what``: corrupt, or refused)."""
    bad = quarantine(path)
    return DownloadError(
        f"{what} archive {path} ({reason}); it was moved to {bad} and nothing was extracted; "
        f"to fix: run the command again to download it afresh (if it fails again, check that "
        f"--url or ${BASE_ENV} points at the official file)"
    )
