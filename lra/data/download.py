"""``python -m lra.data download TASK``: fetch a task's official archive, verify, extract, prepare.

One command replaces "find the URL, download 7.7 GB, extract into the right folder, run prepare":

  * ``ARCHIVES`` (below) is the table of archives: URL, published size and checksums, and the
    folders each one provides under the data dir (the layout docs/data.md documents). Which archive
    serves which task: ``TASK_ARCHIVE`` (listops and matching: the LRA release; text: IMDB;
    image: CIFAR-10, python version).
  * Download into ``<data_dir>/downloads/<file>.part``, resumed with an HTTP Range request when a
    ``.part`` is there (a server that ignores Range answers 200: the part is discarded and the
    download restarts from byte 0). A progress bar on a terminal (tqdm: bytes, rate, ETA), plain
    lines otherwise (logs, CI).
  * Verified before extraction: the published size and checksums where they are published; the
    LRA release has none, so its size is checked against the server's Content-Length and its
    integrity by the gzip trailer (CRC-32 and length of the whole stream) while it is extracted.
    A file that fails is moved to ``<file>.corrupt`` (so the next run downloads it afresh).
  * Extracted member by member into a temporary folder inside the data dir, then each provided
    folder is renamed into place: nothing half-extracted is ever at a final path. Members with an
    absolute path or ``..`` refuse the whole archive; only files and folders are written (no
    links, devices or permissions from the archive). Of the LRA release only ``listops-1000`` and
    ``tsv_data`` are extracted for listops and matching; pathfinder and pathx extract
    ``pathfinder32`` and ``pathfinder128`` (most of its 7.7 GB) from the same file, downloaded
    again unless an earlier ``--keep_archive`` left it in ``<data_dir>/downloads/``.
  * Then ``prepare`` runs for the task (lra/data/prepare.py), unless ``--no_prepare``.

Mirrors and tests: ``--url URL`` replaces one archive's URL; ``$LRA_DOWNLOAD_BASE`` replaces the
folder of every URL (``$LRA_DOWNLOAD_BASE/<file name>``). The published size and checksums still
apply: a mirror must serve the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import gzip
import http.client
import os
import re
import shutil
import socket
import sys
import tarfile
import time
import urllib.error
import urllib.request
import uuid
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Sequence

from lra.errors import InputError
from lra.data.cache import file_digest, log
from lra.data.paths import data_dir
from lra.data.types import DataError

BASE_ENV = "LRA_DOWNLOAD_BASE"
DOWNLOADS = "downloads"  # under the data dir
CHUNK = 1 << 20


class DownloadError(DataError):
    """A failed download, verification or extraction; the message names the URL or path and the fix."""


class _BadArchive(Exception):
    """Raised while extracting: the archive is refused (unsafe or unexpected members)."""


@dataclasses.dataclass(frozen=True)
class Place:
    """A folder an archive provides: its path under the data dir, where it may sit inside the
    archive (first candidate holding every required entry wins) and the entries it must hold."""

    final: str
    candidates: tuple[str, ...]
    required: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Archive:
    name: str
    url: str
    size: int | None  # published size in bytes; None: none published (the server's length is checked)
    md5: str | None
    sha256: str | None
    places: tuple[Place, ...]
    source: str  # where the size and checksums come from

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_LISTOPS = Place("lra_release/listops-1000",
                 ("lra_release/lra_release/listops-1000", "lra_release/listops-1000", "listops-1000"),
                 tuple(f"basic_{s}.tsv" for s in ("train", "val", "test")))
_AAN = Place("lra_release/tsv_data",
             ("lra_release/lra_release/tsv_data", "lra_release/tsv_data", "tsv_data"),
             tuple(f"new_aan_pairs.{s}.tsv" for s in ("train", "eval", "test")))
_PATHFINDER = {side: Place(f"lra_release/pathfinder{side}",
                          tuple(f"{prefix}pathfinder{side}"
                                for prefix in ("lra_release/lra_release/", "lra_release/", "")),
                          tuple(f"{setting}/metadata" for setting in
                                ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")))
               for side in (32, 128)}
_IMDB = Place("aclImdb", ("aclImdb",), ("train/pos", "train/neg", "test/pos", "test/neg"))
_CIFAR = Place("cifar-10-batches-py", ("cifar-10-batches-py",),
               tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",))

ARCHIVES: dict[str, Archive] = {
    "lra_release": Archive(
        name="lra_release", url="https://storage.googleapis.com/long-range-arena/lra_release.gz",
        size=None, md5=None, sha256=None, places=(_LISTOPS, _AAN),
        source="no size or checksum published (LRA's README gives none; about 7.7 GB); the length "
               "the server announces and the gzip CRC-32 are checked"),
    "lra_release_pathfinder": Archive(
        name="lra_release_pathfinder", url="https://storage.googleapis.com/long-range-arena/lra_release.gz",
        size=None, md5=None, sha256=None, places=(_PATHFINDER[32], _PATHFINDER[128]),
        source="the LRA release again (see lra_release), its Pathfinder folders"),
    "aclImdb": Archive(
        name="aclImdb", url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        size=84_125_825, md5="7c2ac02c03563afcf9b574c7e56c153a",
        sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe", places=(_IMDB,),
        source="size and sha256: tensorflow-datasets url_checksums/imdb_reviews.txt; md5: PaddlePaddle's imdb dataset"),
    "cifar10": Archive(
        name="cifar10", url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        size=170_498_071, md5="c58f30108f718f92721af3b95e74349a",
        sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", places=(_CIFAR,),
        source="md5: torchvision CIFAR10.tgz_md5; sha256: keras.datasets.cifar10 file_hash; size: "
               "the server's Content-Length in published download logs"),
}
# task -> (archive, the folders the task reads)
TASK_ARCHIVE: dict[str, tuple[str, tuple[str, ...]]] = {
    "listops": ("lra_release", (_LISTOPS.final,)),
    "matching": ("lra_release", (_AAN.final,)),
    "text": ("aclImdb", (_IMDB.final,)),
    "image": ("cifar10", (_CIFAR.final,)),
    "pathfinder": ("lra_release_pathfinder", (_PATHFINDER[32].final,)),
    "pathx": ("lra_release_pathfinder", (_PATHFINDER[128].final,)),
}


def archive_url(archive: Archive, url: str | None = None) -> str:
    """``url`` if given, else ``$LRA_DOWNLOAD_BASE/<file name>`` if set, else the official URL."""
    if url:
        return url
    base = os.environ.get(BASE_ENV, "").strip()
    return f"{base.rstrip('/')}/{archive.filename}" if base else archive.url


def _gb(n: float) -> str:
    """Bytes for people: 7.73 GB, 170.5 MB, 12.3 kB, 80 B."""
    for unit, scale, digits in (("GB", 1e9, 2), ("MB", 1e6, 1), ("kB", 1e3, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n:.0f} B"


# ----------------------------------------------------------------------------------------- progress


class Progress:
    """Bytes done of a total: a tqdm bar on a terminal, else a plain line per 10% (or 30 s)."""

    def __init__(self, what: str, total: int | None, initial: int = 0, stream=None):
        self.what, self.total, self.done = what, total, initial
        self.stream = stream or sys.stderr
        self.start, self.start_done, self.last_line, self.printed = time.time(), initial, time.time(), initial
        self.next_pct = (initial * 10 // total + 1) * 10 if total else 0
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                            desc=what, file=self.stream, dynamic_ncols=True, miniters=1)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.time()
        pct = 100 * self.done // self.total if self.total else 0
        if (self.total and pct >= self.next_pct) or now - self.last_line >= 30:
            self._line(now)
            self.next_pct = (pct // 10 + 1) * 10

    def _line(self, now: float) -> None:
        self.last_line, self.printed = now, self.done
        rate = (self.done - self.start_done) / max(now - self.start, 1e-6)
        if self.total:
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta_s = time.strftime("%H:%M:%S", time.gmtime(eta)) if eta < 1e6 else "?"
            log(f"{self.what}: {_gb(self.done)} of {_gb(self.total)} ({100 * self.done / self.total:.0f}%), "
                f"{_gb(rate)}/s, ETA {eta_s}")
        else:
            log(f"{self.what}: {_gb(self.done)}, {_gb(rate)}/s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.done != self.printed:
            self._line(time.time())

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------------------- download


def _network_fix(url: str, dest: Path) -> str:
    return (f"to fix: check the URL and your network/proxy, retry later, or download the file by hand "
            f"into {dest} and run the command again; a mirror: --url URL or ${BASE_ENV}")


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """(first byte, total) of a ``Content-Range: bytes a-b/total`` header."""
    m = re.fullmatch(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*", value or "")
    if not m:
        return None
    return int(m.group(1)), None if m.group(2) == "*" else int(m.group(2))


def _disk_full(path: Path, need: int | None = None) -> DownloadError:
    free = shutil.disk_usage(path.parent if not path.is_dir() else path).free
    what = f"needs {_gb(need)}, " if need else ""
    return DownloadError(f"no space left on the device of {path} ({what}{_gb(free)} free); to fix: free space "
                         f"there or choose another data dir (--data_dir or LRA_DATA_DIR)")


def fetch(url: str, dest: Path, size: int | None, timeout: float = 60.0) -> int | None:
    """Download ``url`` to ``dest`` through ``dest.part`` (resumed if present); returns the total
    length the server announced (None if it did not). An incomplete ``.part`` is kept for resume."""
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:  # longer than the file: not a prefix of it
        part.unlink()
        offset = 0
    if size is not None and offset == size:
        os.replace(part, dest)
        return size
    headers = {"User-Agent": "lra-data-download/1", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # the range starts at or past the end of the file
            m = re.fullmatch(r"\s*bytes\s+\*/(\d+)\s*", e.headers.get("Content-Range") or "")
            if m and int(m.group(1)) == offset:  # the part is the whole file
                os.replace(part, dest)
                return offset
            log(f"the server refused to resume {part} (HTTP 416): downloading from the start")
            part.unlink()
            return fetch(url, dest, size, timeout)
        raise DownloadError(f"HTTP {e.code} ({e.reason}) from {url}; {_network_fix(url, dest)}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", None) or e
        raise DownloadError(f"cannot download {url} ({reason}); {_network_fix(url, dest)}") from None
    with response:
        mode, total = "wb", None
        if offset and response.status == 206:
            first, total = _content_range(response.headers.get("Content-Range")) or (-1, None)
            if first != offset:
                log(f"the server resumed {url} at byte {first}, not {offset}: downloading from the start")
                part.unlink()
                return fetch(url, dest, size, timeout)
            mode = "ab"
            log(f"resuming {dest.name} at {_gb(offset)}")
        else:
            if offset:
                log(f"the server ignored the resume request for {url} (HTTP {response.status}, not 206): "
                    f"downloading from the start")
            offset = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if size is not None and total is not None and total != size:
            raise DownloadError(f"{url} serves {total} bytes, but the published size of {dest.name} is {size}; "
                                f"to fix: check that --url or ${BASE_ENV} points at the official file")
        expected = total if total is not None else size
        dest.parent.mkdir(parents=True, exist_ok=True)
        if expected is not None and shutil.disk_usage(dest.parent).free < expected - offset:
            raise _disk_full(part, expected - offset)
        try:
            with open(part, mode) as f, Progress(f"downloading {dest.name}", expected, offset) as bar:
                while chunk := response.read(CHUNK):
                    f.write(chunk)
                    bar.update(len(chunk))
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(part) from None
            if isinstance(e, (urllib.error.URLError, TimeoutError, ConnectionError)) or e.errno is None:
                pass  # a network failure mid-stream: reported below as an interrupted download
            else:
                raise DownloadError(f"cannot write {part} ({e.strerror}); to fix: make {part.parent} "
                                    f"writable or choose another --data_dir") from None
        except http.client.HTTPException:
            pass
    got = part.stat().st_size
    if expected is not None and got < expected:
        raise DownloadError(f"download of {url} stopped after {_gb(got)} of {_gb(expected)}; to fix: run the same "
                            f"command again: it resumes from {part}")
    if expected is not None and got > expected:
        part.unlink()
        raise DownloadError(f"{url} sent {got} bytes, more than the {expected} announced; the download was deleted; "
                            f"to fix: run the command again (a mirror: --url URL)")
    os.replace(part, dest)
    return total


def _quarantine(path: Path) -> Path:
    """Move a bad archive aside (``<file>.corrupt``, replacing an older one): the next run downloads afresh."""
    bad = path.with_name(path.name + ".corrupt")
    os.replace(path, bad)
    return bad


def verify(path: Path, archive: Archive, size: int | None) -> None:
    """Check ``path`` against the published size and checksums (``size``: the length expected when
    none is published); a mismatch moves it to ``<file>.corrupt`` and raises."""
    problem = None
    got = path.stat().st_size
    if size is not None and got != size:
        problem = f"{got} bytes, expected {size}"
    else:
        for algorithm in ("md5", "sha256"):
            want = getattr(archive, algorithm)
            if want and (digest := file_digest(path, algorithm)) != want:
                problem = f"{algorithm} {digest}, expected {want}"
                break
    if problem:
        bad = _quarantine(path)
        raise DownloadError(f"corrupt download {path}: {problem}; it was moved to {bad} and nothing was extracted; "
                            f"to fix: run the command again to download it afresh (if it fails again, a proxy or "
                            f"mirror alters the file: try another --url)")


# ----------------------------------------------------------------------------------------- extract


class _Counting:
    """A read-only file wrapper that reports how many bytes were read (for the extraction bar)."""

    def __init__(self, raw: BinaryIO, report: Callable[[int], None]):
        self.raw, self.report = raw, report

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.report(len(data))
        return data


def member_path(name: str) -> PurePosixPath:
    """The member's relative path; an absolute path or a ``..`` component refuses the archive."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise _BadArchive(f"member {name!r} would be written outside the extraction folder (absolute path or '..')")
    return PurePosixPath(*[p for p in path.parts if p != "."])


def _wanted(path: PurePosixPath, archive: Archive) -> bool:
    text = path.as_posix()
    return any(text == c or text.startswith(c + "/") or c.startswith(text + "/")
               for place in archive.places for c in place.candidates)


def _write_member(src: BinaryIO, target: Path) -> None:
    with open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)


def _unpack(path: Path, archive: Archive, into: Path) -> None:
    """Write the archive's wanted files and folders under ``into`` (a .tar.gz, read as a stream)."""
    with open(path, "rb") as raw, Progress(f"extracting {path.name}", path.stat().st_size) as bar:
        gz = gzip.GzipFile(fileobj=_Counting(raw, bar.update), mode="rb")
        with tarfile.open(fileobj=gz, mode="r|") as tar:
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
                    raise _BadArchive(f"member {member.name!r} is a link or special file")
        while gz.read(CHUNK):  # read to the end: the gzip trailer's CRC-32 and length get checked
            pass


def _find(tmp: Path, place: Place) -> Path | None:
    for candidate in place.candidates:
        folder = tmp / candidate
        if folder.is_dir() and all((folder / r).exists() for r in place.required):
            return folder
    return None


def _missing(folder: Path, place: Place) -> list[str]:
    return [r for r in place.required if not (folder / r).exists()]


def check_places(root: Path, archive: Archive, force: bool) -> None:
    """Before downloading: an incomplete folder at a final path would block the rename; say so now."""
    if force:
        return
    for place in archive.places:
        final = root / place.final
        if final.exists() and (missing := _missing(final, place)):
            raise DownloadError(f"{final} exists but is incomplete (missing {', '.join(missing)}); to fix: remove "
                                f"it, or pass --force to replace it with the archive's copy")


EXTRACT_PREFIX = ".lra-extract-"
_IMPORTED = time.time()  # about when this process started: older legacy folders are not this run's


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_extractions(root: Path, started: float | None = None) -> list[Path]:
    """Remove the temporary extraction folders (``.lra-extract-<archive>-<host>-<pid>-<id>``) that
    a killed download left in ``root`` (up to 7.7 GB each); returns those removed.

    Only folders whose owner is certainly gone are removed: made on this host by a process that
    no longer runs. A folder named without a host (made before hosts were recorded) is removed
    when its pid does not run here and it is older than ``started`` (this process's start: its
    owner began before us). Another host's folders are kept (its owner may be running there)."""
    host = socket.gethostname()
    started = _IMPORTED if started is None else started
    legacy = {EXTRACT_PREFIX + name for name in ARCHIVES}
    removed = []
    for folder in sorted(root.glob(EXTRACT_PREFIX + "*")) if root.is_dir() else []:
        head, pid, _ = (folder.name.rsplit("-", 2) + ["", ""])[:3]
        if not pid.isdigit() or folder.is_symlink() or not folder.is_dir() or _running(int(pid)):
            continue  # a symlink is no extraction folder of ours: kept, and not reported as removed
        try:
            stale = head.endswith(f"-{host}") or (head in legacy and folder.stat().st_mtime < started)
        except OSError:
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            if folder.exists():  # only what is gone is said to be
                log(f"warning: could not remove {folder}, left by a download killed while extracting "
                    f"(process {pid} is gone); delete it by hand")
                continue
            log(f"removed {folder}, left by a download killed while extracting (process {pid} is gone)")
            removed.append(folder)
    return removed


def extract(path: Path, archive: Archive, root: Path, replace: bool = False) -> list[Path]:
    """Extract ``path`` into a temporary folder in ``root``, then rename each provided folder into
    place; returns the folders placed. Complete existing folders are kept unless ``replace``.
    The temporary folder names this host and process, so a later run can tell it is stale
    (:func:`remove_stale_extractions`)."""
    tmp = root / f"{EXTRACT_PREFIX}{archive.name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    placed = []
    try:
        try:
            _unpack(path, archive, tmp / "new")
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(tmp) from None
            if not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
                raise DownloadError(f"cannot extract into {tmp} ({e.strerror}); to fix: make {root} writable or "
                                    f"choose another --data_dir") from None
            raise _corrupt(path, e) from None
        except (tarfile.TarError, EOFError, zlib.error) as e:
            raise _corrupt(path, e) from None
        except _BadArchive as e:
            raise _corrupt(path, e, "refused") from None
        sources = {}
        for place in archive.places:
            found = _find(tmp / "new", place)
            if found is None:
                raise _corrupt(path, f"no folder with {', '.join(place.required)} at "
                                     f"{' or '.join(place.candidates)}: not the expected archive")
            sources[place] = found
        for place, found in sources.items():
            final = root / place.final
            if final.exists():
                if not replace and not _missing(final, place):
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
                raise DownloadError(f"cannot move the extracted {place.final} to {final} ({e.strerror}); to fix: "
                                    f"make {final.parent} a writable folder on the same disk as {root}") from None
            placed.append(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return placed


def _corrupt(path: Path, reason: object, what: str = "corrupt") -> DownloadError:
    bad = _quarantine(path)
    return DownloadError(f"{what} archive {path} ({reason}); it was moved to {bad} and nothing was extracted; "
                         f"to fix: run the command again to download it afresh (if it fails again, check that "
                         f"--url or ${BASE_ENV} points at the official file)")


# ----------------------------------------------------------------------------------------- command


def present(root: Path, finals: Sequence[str]) -> bool:
    """Whether every folder in ``finals`` is at its final path with every required entry."""
    places = {p.final: p for a in ARCHIVES.values() for p in a.places}
    return all((root / f).is_dir() and not _missing(root / f, places[f]) for f in finals)


def download(task: str, root: str | os.PathLike | None = None, url: str | None = None, force: bool = False,
             keep_archive: bool = False, timeout: float = 60.0) -> Path:
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
        raise DownloadError(f"cannot create {dest.parent} ({e.strerror}); "
                            f"to fix: choose a writable --data_dir") from None
    size = archive.size
    if dest.is_file():
        log(f"using the earlier download {dest}")
    else:
        log(f"{task}: downloading {source}" + (f" ({_gb(size)})" if size else "") + f" into {dest}")
        announced = fetch(source, dest, size, timeout)
        size = size if size is not None else announced
    verify(dest, archive, size)
    log(f"verified {dest.name} ({'size, ' if size else ''}"
        f"{', '.join(a for a in ('md5', 'sha256') if getattr(archive, a)) or 'no published checksum'})")
    placed = extract(dest, archive, root, replace=force)
    for folder in placed:
        log(f"extracted {folder}")
    if not keep_archive:
        dest.unlink()
    return root


def add_parser(sub: argparse._SubParsersAction, tasks: Sequence[str]) -> None:
    p = sub.add_parser("download", help="download, verify and extract a task's official archive, then prepare it",
                       description="Download a task's official archive (resumable), verify its size and checksum, "
                                   "extract it into the data dir's layout, then run `prepare` for the task.")
    p.add_argument("task", choices=[*tasks, "all"])
    p.add_argument("--data_dir", default=None, help="data folder (default: $LRA_DATA_DIR, else ~/.cache/lra)")
    p.add_argument("--url", default=None,
                   help=f"download from this URL instead (a mirror of the same file; ${BASE_ENV} replaces the "
                        f"folder of every archive's URL)")
    p.add_argument("--max_len", type=int, default=None, help="passed to prepare")
    p.add_argument("--force", action="store_true",
                   help="replace the extracted folders (downloading again unless a verified archive is in "
                        f"<data_dir>/{DOWNLOADS}/) and rebuild the cache")
    p.add_argument("--keep_archive", action="store_true", help=f"keep the archive in <data_dir>/{DOWNLOADS}/")
    p.add_argument("--no_prepare", action="store_true", help="stop after extracting")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a network error")


def run(args: argparse.Namespace) -> int:
    """The ``download`` command: 0 done, 2 a download/data error (one ``error:`` line), else prepare's status."""
    from lra.data import prepare

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
        print(f"error: {e.strerror or e} ({e.filename or args.data_dir}); to fix: check the data dir's permissions "
              f"and free space, or choose another --data_dir", file=sys.stderr)
        return 2
    if args.no_prepare:
        return 0
    status = 0
    for task in tasks:
        status = max(status, prepare.run(task, args.data_dir, args.max_len, force=args.force, download=False))
    return status
