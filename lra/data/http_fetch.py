"""The HTTP transfer of ``python -m lra.data download``: ``<file>.part``, resumed by Range request, then renamed.

Not ``pooch.retrieve``: it deletes its temporary file on any failure (a cut 7.7 GB download restarts from 0) and
never checks status or length. pooch's ``HTTPDownloader`` streams into our part after a response hook checked the
answer: 206 at the part's length appends, 200 starts over, 416 means the part is whole; the announced length must
equal the published size and fit the disk."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any, BinaryIO

import pooch
import requests

from lra.console import format_bytes
from lra.data.archives import BASE_ENV, CHUNK, DownloadError, disk_full
from lra.data.byte_progress import Progress
from lra.data.cache import log

USER_AGENT = "lra-data-download/1"


class _Restart(Exception):
    """The server's answer does not continue the part: delete it and download from byte 0."""


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


def _reason(e: BaseException) -> str:
    """The first cause of a requests error (connection refused, timed out, name unknown), not its wrappers."""
    while e.__context__ is not None:
        e = e.__context__
    return getattr(e, "strerror", None) or str(e)


class _Part:
    """What pooch writes into: ``<file>.part``, opened (append on 206, afresh on 200) once the hook accepts."""

    def __init__(self, url: str, dest: Path, offset: int, size: int | None):
        self.url, self.dest, self.offset, self.size = url, dest, offset, size
        self.path = dest.with_name(dest.name + ".part")
        self.total: int | None = None  # the length the server announced for the whole file
        self.expected: int | None = None
        self.file: BinaryIO | None = None
        self.bar: Progress | None = None

    def check_response(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        """requests' response hook: decide append / start over / refuse before pooch writes a byte."""
        if response.is_redirect or not response.ok:
            return  # a redirect is followed; an error is raised by pooch (raise_for_status)
        if self.offset and response.status_code == 206:
            first, self.total = _content_range(response.headers.get("Content-Range")) or (-1, None)
            if first != self.offset:
                response.close()
                log(f"the server resumed {self.url} at byte {first}, not {self.offset}: downloading from the start")
                raise _Restart
            log(f"resuming {self.dest.name} at {format_bytes(self.offset)}")
        else:
            if self.offset:
                log(
                    f"the server ignored the resume request for {self.url} (HTTP {response.status_code}, "
                    f"not 206): downloading from the start"
                )
                self.offset = 0
            length = response.headers.get("Content-Length")
            self.total = int(length) if length and length.isdigit() else None
        if self.size is not None and self.total is not None and self.total != self.size:
            response.close()
            raise DownloadError(
                f"{self.url} serves {self.total} bytes, but the published size of {self.dest.name} is "
                f"{self.size}; to fix: check that --url or ${BASE_ENV} points at the official file"
            )
        self.expected = self.total if self.total is not None else self.size
        if self.expected is not None and shutil.disk_usage(self.dest.parent).free < self.expected - self.offset:
            response.close()
            raise disk_full(self.path, self.expected - self.offset)
        # A body cut short ends the stream instead of raising (urllib3 would drop its buffered bytes, which
        # belong in the part); the length is checked after the transfer.
        response.raw.enforce_content_length = False
        self.file = open(self.path, "ab" if self.offset else "wb")  # noqa: SIM115 (closed by close())
        self.bar = Progress(f"downloading {self.dest.name}", self.expected, self.offset)

    def write(self, chunk: bytes) -> None:
        assert self.file is not None and self.bar is not None  # pooch writes after the hook accepted
        self.file.write(chunk)
        self.bar.update(len(chunk))

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.bar is not None:
            self.bar.close()


def fetch(url: str, dest: Path, size: int | None, timeout: float = 60.0) -> int | None:
    """Download ``url`` to ``dest`` via ``dest.part`` (resumed, kept if cut); returns the announced length."""
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:  # longer than the file: not a prefix of it
        part.unlink()
        offset = 0
    if size is not None and offset == size:
        os.replace(part, dest)
        return size
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    dest.parent.mkdir(parents=True, exist_ok=True)
    sink = _Part(url, dest, offset, size)
    download = pooch.HTTPDownloader(
        chunk_size=CHUNK, timeout=timeout, headers=headers, hooks={"response": sink.check_response}
    )
    cut: BaseException | None = None  # a failure after the answer was accepted: the part is kept for resume
    try:
        try:
            download(url, sink, None)
        finally:
            sink.close()
    except _Restart:
        part.unlink(missing_ok=True)
        return fetch(url, dest, size, timeout)
    except requests.HTTPError as e:
        response = e.response
        status = response.status_code if response is not None else None
        if status == 416 and offset and response is not None:  # the range starts at or past the end of the file
            m = re.fullmatch(r"\s*bytes\s+\*/(\d+)\s*", response.headers.get("Content-Range") or "")
            if m and int(m.group(1)) == offset:  # the part is the whole file
                os.replace(part, dest)
                return offset
            log(f"the server refused to resume {part} (HTTP 416): downloading from the start")
            part.unlink()
            return fetch(url, dest, size, timeout)
        reason = response.reason if response is not None else e
        raise DownloadError(f"HTTP {status} ({reason}) from {url}; {_network_fix(url, dest)}") from None
    except requests.RequestException as e:  # before OSError: requests' errors are OSErrors
        if sink.file is None:
            raise DownloadError(f"cannot download {url} ({_reason(e)}); {_network_fix(url, dest)}") from None
        cut = e  # a network failure mid-stream: reported below as an interrupted download
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(part) from None
        raise DownloadError(
            f"cannot write {part} ({e.strerror}); to fix: make {part.parent} writable or choose another --data_dir"
        ) from None
    got, expected = part.stat().st_size, sink.expected
    if (expected is not None and got < expected) or (expected is None and cut is not None):
        of = f" of {format_bytes(expected)}" if expected is not None else ""
        raise DownloadError(
            f"download of {url} stopped after {format_bytes(got)}{of}; to fix: run the same "
            f"command again: it resumes from {part}"
        )
    if expected is not None and got > expected:
        part.unlink()
        raise DownloadError(
            f"{url} sent {got} bytes, more than the {expected} announced; the download was deleted; "
            f"to fix: run the command again (a mirror: --url URL)"
        )
    os.replace(part, dest)
    return sink.total
