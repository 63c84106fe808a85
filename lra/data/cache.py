"""On-disk cache of tokenised splits, so a 25k x 4000 text set is tokenised once, not every run.

An entry ``<cache_root>/<task>-<key>/`` holds ``<split>.<field>.npy`` and ``meta.json``; the key hashes the task,
the sources' (path, size, mtime) and the tokenisation settings. Written atomically, loaded memory-mapped, sealed:
each load checks every array's SHA-256 and the ranges of token ids and labels (docs/design.md, Data)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from lra.data.paths import data_dir
from lra.data.types import DataError, Split

CACHE_FORMAT = 2  # bump when the layout or the tokenisation of any task changes (2: sealed with digests)
FIELDS = ("inputs", "labels", "lengths")


def log(message: str) -> None:
    """Progress messages of the data pipeline (stderr, so they survive absl/pytest capture)."""
    print(f"lra.data: {message}", file=sys.stderr, flush=True)


def cache_root(config: ml_collections.ConfigDict) -> Path:
    custom = config.data.get("cache_dir", "")
    return Path(custom).expanduser() if custom else data_dir(config.get("data_dir")) / "cache"


def file_fingerprint(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of each file: any edit or replacement changes the key."""
    out = []
    for p in paths:
        st = p.stat()
        out.append((str(p.resolve()), st.st_size, st.st_mtime_ns))
    return out


def folder_fingerprint(folder: Path, suffix: str) -> tuple[str, int, int, int]:
    """(folder, file count, total size, newest mtime) of the files ending in ``suffix``."""
    count = size = newest = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(suffix) and entry.is_file():
                st = entry.stat()
                count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime_ns)
    return str(folder.resolve()), count, size, newest


def entry_path(config: ml_collections.ConfigDict, task: str, key: dict[str, Any]) -> Path:
    material = json.dumps({"format": CACHE_FORMAT, "task": task, **key}, sort_keys=True, default=str)
    digest = hashlib.sha256(material.encode()).hexdigest()[:16]
    return cache_root(config) / f"{task}-{digest}"


class Writer:
    """Allocates the arrays of a new entry as memory-mapped .npy files in a temporary folder."""

    def __init__(self, final: Path):
        self.final = final
        self.tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir(parents=True)
        self._arrays: list[np.memmap] = []

    def array(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A zero-filled writable array backed by ``<name>.npy`` of the entry."""
        arr = np.lib.format.open_memmap(self.tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)
        self._arrays.append(arr)
        return arr

    def commit(self, meta: dict[str, Any]) -> Path:
        for arr in self._arrays:
            arr.flush()
        self._arrays.clear()
        digests = {p.name: file_digest(p) for p in sorted(self.tmp.glob("*.npy"))}
        meta = {"format": CACHE_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **meta, "sha256": digests}
        with open(self.tmp / "meta.json", "w") as f:  # written last: its presence means complete
            f.write(json.dumps(meta, indent=1, default=str))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.rename(self.tmp, self.final)
        except OSError:  # another process committed the same entry first: keep theirs
            if not (self.final / "meta.json").is_file():
                raise
            self.abort()
        return self.final

    def abort(self) -> None:
        self._arrays.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file: the suite's one file digest (cache entries, archives, checkpoints)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def _damaged(entry: Path, what: str) -> DataError:
    return DataError(
        f"data cache {what}, so it cannot be trusted\n  to fix: delete the cache folder {entry} "
        f"(the next run rebuilds it from the data files)"
    )


def _read_meta(entry: Path) -> dict[str, Any]:
    path = entry / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise _damaged(entry, f"file {path} is unreadable ({e})") from None
    ok = (
        isinstance(meta, dict)
        and isinstance(meta.get("splits"), list)
        and isinstance(meta.get("sha256"), dict)
        and all(isinstance(n, str) for n in meta["splits"])
    )
    if not ok:
        raise _damaged(entry, f"file {path} lacks its split names or digests")
    return meta


def _check_range(entry: Path, path: Path, values: np.ndarray, limit: int, what: str) -> None:
    """Refuse values outside [0, limit): they would index past the embedding (a NaN, not an error)."""
    if values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= limit:
        bad = low if low < 0 else high
        row = int(np.argwhere(values == bad)[0][0])
        raise DataError(
            f"data cache file {path}: {what} {bad} in row {row} is outside [0, {limit}) of this task"
            f"\n  to fix: delete the cache folder {entry} (the next run rebuilds it from the data files)"
        )


def load_entry(entry: Path, vocab_size: int | None = None, num_classes: int | None = None) -> dict[str, Split]:
    """The splits of a committed entry, memory-mapped read-only, once digests and value ranges are checked."""
    meta = _read_meta(entry)
    splits = {}
    for name in meta["splits"]:
        arrays = {}
        for field in FIELDS:
            path = entry / f"{name}.{field}.npy"
            want = meta["sha256"].get(path.name)
            if not path.is_file() or want is None:
                raise _damaged(entry, f"file {path} is missing" if want else f"file {path} has no digest in meta.json")
            if file_digest(path) != want:
                raise _damaged(entry, f"file {path} differs from what was written (edited, cut short or corrupted)")
            try:
                arrays[field] = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise _damaged(entry, f"file {path} is unreadable ({e})") from None
        if vocab_size is not None:
            _check_range(entry, entry / f"{name}.inputs.npy", arrays["inputs"], vocab_size, "token id")
        if num_classes is not None:
            _check_range(entry, entry / f"{name}.labels.npy", arrays["labels"], num_classes, "label")
        try:
            splits[name] = Split(name=name, **arrays)
        except ValueError as e:
            raise _damaged(entry, str(e)) from None
    return splits


def build_or_load(
    entry: Path,
    build: Callable[[Writer], dict[str, Any]],
    what: str,
    vocab_size: int | None = None,
    num_classes: int | None = None,
) -> dict[str, Split]:
    """Load ``entry``, built first if absent by ``build(writer) -> meta`` (``meta['splits']``: split names)."""
    if (entry / "meta.json").is_file():
        return load_entry(entry, vocab_size, num_classes)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        writer = Writer(entry)
    except OSError as e:
        raise DataError(
            f"cannot write the data cache at {entry.parent} ({e.strerror})\n  to fix: "
            f"make it writable or point --config.data.cache_dir at a writable folder"
        ) from None
    log(f"tokenising {what} once into {entry} (later loads reuse it) ...")
    start = time.time()
    try:
        meta = build(writer)
        writer.commit(meta)
    except BaseException:  # cleanup only, re-raised: a failed or interrupted build leaves no temporary entry
        writer.abort()
        raise
    log(f"cached {what} in {time.time() - start:.1f}s")
    return load_entry(entry, vocab_size, num_classes)


def remove_entry(entry: Path) -> None:
    shutil.rmtree(entry, ignore_errors=True)
