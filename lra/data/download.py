"""``python -m lra.data download TASK``: fetch a task's official archive, verify, extract, prepare.

Archives, mirrors and layout: docs/data.md. Steps: ``archives`` (the table), ``http_fetch`` (into
``<data_dir>/downloads/<file>.part``, resumed), ``archive_verify`` (the LRA release publishes no checksum: the
server's length and the gzip trailer are checked), ``tar_extract``, ``stale_extractions``; each says what pooch does
not do. The LRA release serves listops/matching (``listops-1000``, ``tsv_data``) and pathfinder/pathx
(``pathfinder32``, ``pathfinder128``), downloaded again unless ``--keep_archive`` kept it. Re-exports its steps."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lra.console import format_bytes
from lra.data.archive_verify import verify
from lra.data.archives import (
    ARCHIVES,
    BASE_ENV,
    CHUNK,
    TASK_ARCHIVE,
    Archive,
    DownloadError,
    Place,
    archive_url,
    missing_entries,
)
from lra.data.byte_progress import Progress
from lra.data.cache import log
from lra.data.http_fetch import fetch
from lra.data.paths import data_dir
from lra.data.stale_extractions import EXTRACT_PREFIX, remove_stale_extractions
from lra.data.tar_extract import BadArchive, check_places, extract, member_path
from lra.errors import InputError

__all__ = [
    "ARCHIVES",
    "BASE_ENV",
    "CHUNK",
    "DOWNLOADS",
    "TASK_ARCHIVE",
    "Archive",
    "BadArchive",
    "DownloadError",
    "EXTRACT_PREFIX",
    "Place",
    "Progress",
    "add_parser",
    "archive_url",
    "check_places",
    "download",
    "extract",
    "fetch",
    "member_path",
    "present",
    "remove_stale_extractions",
    "run",
    "verify",
]

DOWNLOADS = "downloads"  # under the data dir


def present(root: Path, finals: Sequence[str]) -> bool:
    """Whether every folder in ``finals`` is at its final path with every required entry."""
    places = {p.final: p for a in ARCHIVES.values() for p in a.places}
    return all((root / f).is_dir() and not missing_entries(root / f, places[f]) for f in finals)


def download(
    task: str,
    root: str | os.PathLike | None = None,
    url: str | None = None,
    force: bool = False,
    keep_archive: bool = False,
    timeout: float = 60.0,
) -> Path:
    """Make ``task``'s source folders exist under the data dir (download, verify, extract); returns the dir."""
    if task not in TASK_ARCHIVE:
        raise InputError(f"unknown task {task!r}; valid tasks: {', '.join(TASK_ARCHIVE)}")
    name, finals = TASK_ARCHIVE[task]
    archive = ARCHIVES[name]
    root = data_dir(root)
    remove_stale_extractions(root)
    if not force and present(root, finals):
        log(f"{task}: {', '.join(str(root / f) for f in finals)} already there (--force downloads again)")
        return root
    check_places(root, archive, force)
    source = archive_url(archive, url)
    dest = root / DOWNLOADS / archive.filename
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DownloadError(
            f"cannot create {dest.parent} ({e.strerror}); " f"to fix: choose a writable --data_dir"
        ) from None
    size = archive.size
    if dest.is_file():
        log(f"using the earlier download {dest}")
    else:
        log(f"{task}: downloading {source}" + (f" ({format_bytes(size)})" if size else "") + f" into {dest}")
        announced = fetch(source, dest, size, timeout)
        size = size if size is not None else announced
    verify(dest, archive, size)
    log(
        f"verified {dest.name} ({'size, ' if size else ''}"
        f"{', '.join(a for a in ('md5', 'sha256') if getattr(archive, a)) or 'no published checksum'})"
    )
    placed = extract(dest, archive, root, replace=force)
    for folder in placed:
        log(f"extracted {folder}")
    if not keep_archive:
        dest.unlink()
    return root


def add_parser(sub: argparse._SubParsersAction, tasks: Sequence[str]) -> None:
    p = sub.add_parser(
        "download",
        help="download, verify and extract a task's official archive, then prepare it",
        description="Download a task's official archive (resumable), verify its size and checksum, "
        "extract it into the data dir's layout, then run `prepare` for the task.",
    )
    p.add_argument("task", choices=[*tasks, "all"])
    p.add_argument("--data_dir", default=None, help="data folder (default: $LRA_DATA_DIR, else ~/.cache/lra)")
    p.add_argument(
        "--url",
        default=None,
        help=f"download from this URL instead (a mirror of the same file; ${BASE_ENV} replaces the "
        f"folder of every archive's URL)",
    )
    p.add_argument("--max_len", type=int, default=None, help="passed to prepare")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the extracted folders (downloading again unless a verified archive is in "
        f"<data_dir>/{DOWNLOADS}/) and rebuild the cache",
    )
    p.add_argument("--keep_archive", action="store_true", help=f"keep the archive in <data_dir>/{DOWNLOADS}/")
    p.add_argument("--no_prepare", action="store_true", help="stop after extracting")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a network error")


def run(args: argparse.Namespace) -> int:
    """The ``download`` command's download part: 0 done, 2 an error; ``prepare.main`` runs prepare after it."""
    tasks = list(TASK_ARCHIVE) if args.task == "all" else [args.task]
    try:
        if args.url and len(tasks) > 1:
            raise InputError("--url names one archive: give one task, not all")
        for task in tasks:
            download(task, args.data_dir, args.url, args.force, args.keep_archive, args.timeout)
    except InputError as e:  # DataError included; any other ValueError is a bug and keeps its traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # anything not foreseen above, e.g. a data dir that cannot be written
        print(
            f"error: {e.strerror or e} ({e.filename or args.data_dir}); to fix: check the data dir's permissions "
            f"and free space, or choose another --data_dir",
            file=sys.stderr,
        )
        return 2
    return 0
