"""Tar extraction, sanitised: a .tar.gz streamed once into a temporary folder in the data dir (an absolute or ``..``
member refuses the archive; files and folders only: no links, devices or permissions; gzip trailer checked), then
each provided folder renamed into place. Not pooch's ``Untar``: below Python 3.12 it uses no tar filter (pooch 1.9.0
wrote through an archive's symlink outside its folder here), ignores the gzip trailer, reads the archive twice."""

from __future__ import annotations

import errno
import gzip
import io
import os
import shutil
import socket
import tarfile
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, cast

from lra.data.archive_verify import corrupt
from lra.data.archives import CHUNK, Archive, DownloadError, Place, disk_full, missing_entries
from lra.data.byte_progress import Progress
from lra.data.cache import log
from lra.data.stale_extractions import EXTRACT_PREFIX


class BadArchive(Exception):
    """Raised while extracting: the archive is refused (unsafe or unexpected members)."""


class _Counting:
    """A read-only file wrapper that reports how many bytes were read (for the extraction bar)."""

    def __init__(self, raw: BinaryIO, report: Callable[[int], None]):
        self.raw, self.report = raw, report

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.report(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        """Refused: the archive is read once, as a stream (GzipFile's file protocol names seek)."""
        raise io.UnsupportedOperation("the extraction stream is not seekable")


def member_path(name: str) -> PurePosixPath:
    """The member's relative path; an absolute path or a ``..`` component refuses the archive."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise BadArchive(f"member {name!r} would be written outside the extraction folder (absolute path or '..')")
    return PurePosixPath(*[p for p in path.parts if p != "."])


def _wanted(path: PurePosixPath, archive: Archive) -> bool:
    text = path.as_posix()
    return any(
        text == c or text.startswith(c + "/") or c.startswith(text + "/")
        for place in archive.places
        for c in place.candidates
    )


def _write_member(src: IO[bytes], target: Path) -> None:
    with open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)


def _unpack(path: Path, archive: Archive, into: Path) -> None:
    with open(path, "rb") as raw, Progress(f"extracting {path.name}", path.stat().st_size) as bar:
        gz = gzip.GzipFile(fileobj=_Counting(raw, bar.update), mode="rb")
        # typeshed asks tarfile.open for an IO[bytes]; a GzipFile is a BufferedIOBase, which streams the same
        with tarfile.open(fileobj=cast(IO[bytes], gz), mode="r|") as tar:
            for member in tar:
                rel = member_path(member.name)
                if not rel.parts or not _wanted(rel, archive):
                    continue
                target = into.joinpath(*rel.parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(member)
                    assert src is not None
                    _write_member(src, target)
                else:
                    raise BadArchive(f"member {member.name!r} is a link or special file")
        while gz.read(CHUNK):  # read to the end: the gzip trailer's CRC-32 and length get checked
            pass


def _find(tmp: Path, place: Place) -> Path | None:
    for candidate in place.candidates:
        folder = tmp / candidate
        if folder.is_dir() and all((folder / r).exists() for r in place.required):
            return folder
    return None


def check_places(root: Path, archive: Archive, force: bool) -> None:
    """Before downloading: an incomplete folder at a final path would block the rename; say so now."""
    if force:
        return
    for place in archive.places:
        final = root / place.final
        if final.exists() and (missing := missing_entries(final, place)):
            raise DownloadError(
                f"{final} exists but is incomplete (missing {', '.join(missing)}); to fix: remove "
                f"it, or pass --force to replace it with the archive's copy"
            )


def extract(path: Path, archive: Archive, root: Path, replace: bool = False) -> list[Path]:
    """Extract through a temporary folder in ``root`` named for host and process, then rename each
    provided folder into place (complete ones kept unless ``replace``); returns those placed."""
    tmp = root / f"{EXTRACT_PREFIX}{archive.name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    placed: list[Path] = []
    try:
        try:
            _unpack(path, archive, tmp / "new")
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full(tmp) from None
            if not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
                raise DownloadError(
                    f"cannot extract into {tmp} ({e.strerror}); to fix: make {root} writable or "
                    f"choose another --data_dir"
                ) from None
            raise corrupt(path, e) from None
        except (tarfile.TarError, EOFError, zlib.error) as e:
            raise corrupt(path, e) from None
        except BadArchive as e:
            raise corrupt(path, e, "refused") from None
        sources = {}
        for place in archive.places:
            found = _find(tmp / "new", place)
            if found is None:
                raise corrupt(
                    path,
                    f"no folder with {', '.join(place.required)} at "
                    f"{' or '.join(place.candidates)}: not the expected archive",
                )
            sources[place] = found
        for place, found in sources.items():
            final = root / place.final
            if final.exists():
                if not replace and not missing_entries(final, place):
                    log(f"kept the existing {final} (--force replaces it)")
                    continue
                if not replace:
                    raise DownloadError(f"{final} exists but is incomplete; to fix: remove it or pass --force")
            try:
                if final.exists():
                    os.rename(final, tmp / f"old-{len(placed)}")  # removed with tmp
                final.parent.mkdir(parents=True, exist_ok=True)
                os.rename(found, final)
            except OSError as e:
                raise DownloadError(
                    f"cannot move the extracted {place.final} to {final} ({e.strerror}); to fix: "
                    f"make {final.parent} a writable folder on the same disk as {root}"
                ) from None
            placed.append(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return placed
