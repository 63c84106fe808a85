"""Generated ListOps sets on disk: a folder named for everything that determines the set, written through a
temporary folder (the first rename wins), with a manifest of rows and SHA-256 checked before tokenising."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lra.console import binary_bytes
from lra.data.listops_format import GENERATED_SUBDIR, GENERATOR_VERSION, HEADER, SPLIT_FILES
from lra.data.listops_gen import generate
from lra.data.types import DataError
from lra.errors import InputError


def generated_dir(root: Path, min_len: int, max_len: int, counts: Sequence[int], seed: int) -> Path:
    """Cache folder of one generated set: everything that determines its content is in the name."""
    n_train, n_val, n_test = counts
    name = f"v{GENERATOR_VERSION}_len{min_len}-{max_len}_n{n_train}-{n_val}-{n_test}_seed{seed}"
    return root / GENERATED_SUBDIR / name


def say(message: str) -> None:
    print(f"ListOps: {message}", file=sys.stderr, flush=True)


def _complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in SPLIT_FILES.values())


def _remove_stale_temporaries(final: Path) -> None:
    """Temporary folders of this set left by killed generations on this host (they are big)."""
    host = socket.gethostname()
    for tmp in final.parent.glob(f".{final.name}.tmp-{host}-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


MANIFEST = "manifest.json"  # of a generated set: each file's rows and SHA-256, checked before tokenising


def _scan(path: Path, digest: bool) -> tuple[int, str | None]:
    """(rows after the header, SHA-256 if ``digest``) of a TSV in one chunked pass (~0.4 s for 600 MB)."""
    lines, last, h = 0, b"\n", hashlib.sha256() if digest else None
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
            if h is not None:
                h.update(chunk)
    lines += last != b"\n"  # a last line without its newline (a file cut short) still counts
    return max(lines - 1, 0), h.hexdigest() if h is not None else None


def check_generated(folder: Path, counts: Sequence[int]) -> None:
    """Refuse files whose rows differ from ``counts`` or, where there is a manifest, whose SHA-256 does."""
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise DataError(
            f"{manifest_path} is damaged ({e})\n  to fix: delete the folder {folder} (the next run "
            f"generates the same set again)"
        ) from None
    for file, want_rows in zip(SPLIT_FILES.values(), counts, strict=False):
        entry = manifest.get(file, {})
        rows, digest = _scan(folder / file, "sha256" in entry)
        problem = (
            f"holds {rows} examples, but the generated set promises {want_rows} (its folder name"
            f"{' and ' + MANIFEST if entry else ''}): it was cut short or extended"
            if rows != want_rows
            else "differs from what was generated (its SHA-256 is not the one in " + MANIFEST + ")"
            if digest is not None and digest != entry["sha256"]
            else None
        )
        if problem:
            raise DataError(
                f"generated ListOps file {folder / file} {problem}\n  to fix: delete the folder "
                f"{folder} (the next run generates the same set again)"
            )


def _write_set(folder: Path, min_len: int, max_len: int, counts: Sequence[int], seed: int) -> None:
    total, done, start = sum(counts), 0, time.time()
    stream = generate(min_len, max_len, seed)
    for split_file, count in zip(SPLIT_FILES.values(), counts, strict=False):
        with open(folder / split_file, "w", encoding="ascii", newline="\n") as f:
            f.write(HEADER + "\n")
            for _ in range(count):
                source, label = next(stream)
                f.write(f"{source}\t{label}\n")
                done += 1
                if total >= 20_000 and done % (total // 10) == 0:
                    say(f"{done}/{total} ({time.time() - start:.0f}s)")
    manifest = {}
    for split_file in SPLIT_FILES.values():
        rows, digest = _scan(folder / split_file, True)
        manifest[split_file] = {"rows": rows, "sha256": digest}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _check_disk(root: Path, max_len: int, counts: Sequence[int]) -> None:
    """Refuse, before generating, a set whose token cache alone (padded to ``max_len``, int16) exceeds the free disk."""
    need = sum(counts) * max_len * np.dtype(np.int16).itemsize
    existing = next(p for p in (root, *root.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if need > free:
        raise DataError(
            f"this ListOps set cannot be stored: {sum(counts):,} examples (config.data.num_train/num_val/num_test = "
            f"{'/'.join(map(str, counts))}) padded to config.data.max_len={max_len} need at least "
            f"{binary_bytes(need, digits=1)} of token cache, {existing} has {binary_bytes(free, digits=1)} free. "
            f"Nothing was generated: ask for fewer or shorter examples"
        )


def ensure_generated(root: Path, min_len: int, max_len: int, counts: Sequence[int], seed: int) -> Path:
    if not 0 <= min_len < max_len - 1:
        raise InputError(
            f"config.data.min_len={min_len} and config.data.max_len={max_len}: need "
            f"0 <= min_len < max_len - 1 (lengths are kept when min_len < length < max_len)"
        )
    if min(counts) < 1:  # an empty validation or test split selects or reports on nothing
        raise InputError(f"config.data.num_train/num_val/num_test = {tuple(counts)}: need >= 1 each")
    final = generated_dir(root, min_len, max_len, counts, seed)
    if _complete(final):
        return final
    _check_disk(root, max_len, counts)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(final)
    tmp = final.parent / f".{final.name}.tmp-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    sizes = "/".join(map(str, counts))
    say(f"generating {sizes} examples ({min_len} < length < {max_len}, seed {seed}) into {final}")
    start = time.time()
    try:
        _write_set(tmp, min_len, max_len, counts, seed)
        if final.exists() and not _complete(final):  # a partial folder not made by us
            shutil.rmtree(final)
        try:
            os.replace(tmp, final)
        except OSError:
            if not _complete(final):  # else another process finished the same set first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"generated {sum(counts)} examples in {time.time() - start:.1f}s")
    return final
