"""The HTTP client of ``python -m lra.data download``: one file into ``<file>.part``, resumed with a
Range request when a part is there, renamed into place when complete (lra/data/download.py)."""

from __future__ import annotations

import errno
import http.client
import os
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from lra.console import format_bytes
from lra.data.archives import BASE_ENV, CHUNK, DownloadError, disk_full
from lra.data.byte_progress import Progress
from lra.data.cache import log


def _network_fix(url: str, dest: Path) -> str:
    return (
        f"to fix: check the URL and your network/proxy, retry later, or download the file by hand "
        f"into {dest} and run the command again; a mirror: --url URL or ${BASE_ENV}"
    )


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """(first byte, total) of a ``Content-Range: bytes a-b/total`` header."""
    m = re.fullmatch(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*", value or "")
    if not m:
        return None
    return int(m.group(1)), None if m.group(2) == "*" else int(m.group(2))


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
            log(f"resuming {dest.name} at {format_bytes(offset)}")
        else:
            if offset:
                log(
                    f"the server ignored the resume request for {url} (HTTP {response.status}, not 206): "
                    f"downloading from the start"
                )
            offset = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if size is not None and total is not None and total != size:
            raise DownloadError(
                f"{url} serves {total} bytes, but the published size of {dest.name} is {size}; "
                f"to fix: check that --url or ${BASE_ENV} points at the official file"
            )
        expected = total if total is not None else size
        dest.parent.mkdir(parents=True, exist_ok=True)
        if expected is not None and shutil.disk_usage(dest.parent).free < expected - offset:
            raise disk_full(part, expected - offset)
        try:
            with open(part, mode) as f, Progress(f"downloading {dest.name}", expected, offset) as bar:
                while chunk := response.read(CHUNK):
                    f.write(chunk)
                    bar.update(len(chunk))
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full(part) from None
            if isinstance(e, (urllib.error.URLError, TimeoutError, ConnectionError)) or e.errno is None:
                pass  # a network failure mid-stream: reported below as an interrupted download
            else:
                raise DownloadError(
                    f"cannot write {part} ({e.strerror}); to fix: make {part.parent} "
                    f"writable or choose another --data_dir"
                ) from None
        except http.client.HTTPException:
            pass
    got = part.stat().st_size
    if expected is not None and got < expected:
        raise DownloadError(
            f"download of {url} stopped after {format_bytes(got)} of {format_bytes(expected)}; to fix: run the same "
            f"command again: it resumes from {part}"
        )
    if expected is not None and got > expected:
        part.unlink()
        raise DownloadError(
            f"{url} sent {got} bytes, more than the {expected} announced; the download was deleted; "
            f"to fix: run the command again (a mirror: --url URL)"
        )
    os.replace(part, dest)
    return total
