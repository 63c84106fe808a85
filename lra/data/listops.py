"""ListOps (LRA): nested MIN/MAX/MED/SM expressions over digits; the label is the value (10 classes).

Data: the LRA release's ``lra_release/listops-1000/basic_{train,val,test}.tsv`` or a seeded generator writing that
format under ``listops_generated/`` (docs/data.md); one reader, tokens cached. The generator is LRA's
``lra_benchmarks/data/listops.py`` (same distribution of kept trees): the root has depth 1; below depth 10 a node is
an operator with probability 0.25 (``randint(2, 10)`` arguments, closed by ``]``), else a digit. A tree is kept iff
``min_len < length < max_len`` (digits, operators and brackets; LRA: 500, 2000); examples are unique strings, the
splits consecutive slices of one stream. MED is ``int(np.median(args))`` (even count: the middle two's mean,
truncated); SM is the sum mod 10. Where this differs from LRA's code:
  * Speed (96k/2k/2k: ~1 CPU minute, ~8 s to parse once): trees are sampled as token sequences with a stack and
    abandoned at ``max_len`` (rejecting independent trees keeps the distribution); one uniform draw per node, its
    rescaled mixed-radix digits picking argument count and operator; labels computed on the way; seeded.
  * Parentheses (they only mirror LRA's binary tuple nesting) are dropped and ``]`` is a token, keeping the
    expression unambiguous (as LRA's current pipeline, which keeps it as ``X``; its pre-2021 one dropped it).
  * An example longer than ``config.data.max_len`` is an error, not truncated; no CLS token (the model adds its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import ml_collections
import numpy as np

from lra.data import cache
from lra.data.listops_format import (
    END,
    GENERATED_SUBDIR,
    GENERATOR_VERSION,
    HEADER,
    MAX_ARGS,
    MAX_DEPTH,
    NUM_CLASSES,
    OPERATOR_P,
    OPERATORS,
    READER_VERSION,
    RELEASE_MAX_LEN,
    RELEASE_SUBDIR,
    SPLIT_FILES,
    VOCAB,
)
from lra.data.listops_gen import apply_operator, generate, sample_tree, to_string
from lra.data.listops_reader import Allocator, read_split, tokenize
from lra.data.listops_store import MANIFEST, check_generated, ensure_generated, generated_dir, say
from lra.data.paths import data_dir, require_file
from lra.data.types import DataError, TaskData
from lra.errors import InputError

__all__ = [
    "END",
    "GENERATED_SUBDIR",
    "GENERATOR_VERSION",
    "HEADER",
    "MANIFEST",
    "MAX_ARGS",
    "MAX_DEPTH",
    "NUM_CLASSES",
    "OPERATORS",
    "OPERATOR_P",
    "READER_VERSION",
    "RELEASE_MAX_LEN",
    "RELEASE_SUBDIR",
    "SPLIT_FILES",
    "VOCAB",
    "Allocator",
    "apply_operator",
    "cache_entry",
    "check_generated",
    "ensure_generated",
    "generate",
    "generated_dir",
    "load",
    "read_split",
    "release_dir",
    "sample_tree",
    "to_string",
    "tokenize",
]


def _release_present(folder: Path, fix: str) -> bool:
    """Whether all the release's split files are in ``folder``; a partial release is an error, never a fallback."""
    missing = [folder / f for f in SPLIT_FILES.values() if not (folder / f).is_file()]
    if missing and len(missing) < len(SPLIT_FILES):
        raise DataError(
            f"partial ListOps release in {folder}: missing {', '.join(map(str, missing))}\n"
            f"  to fix: {fix}; or remove the folder's split files to use a generated set"
        )
    return not missing


def release_dir(root: Path) -> Path:
    return root / RELEASE_SUBDIR


def _source(config: ml_collections.ConfigDict) -> tuple[str, Path]:
    """("release" | "generated", folder); auto: the release if present and ``max_len`` holds its trees."""
    d = config.data
    root = data_dir(config.data_dir)
    max_len = int(d.max_len)
    if d.source not in ("auto", "release", "generated"):
        raise InputError(f"config.data.source={d.source!r}: valid values are auto, release, generated")
    fix = (
        f"download the LRA release (lra_release.gz) and extract it under the data dir {root} "
        f"(`python -m lra.data download listops --data_dir {root}` does both; or set "
        f"--config.data_dir or LRA_DATA_DIR), or use --config.data.source=generated"
    )
    use_release = d.source == "release" or (
        d.source == "auto" and _release_present(release_dir(root), fix) and max_len >= RELEASE_MAX_LEN - 1
    )
    if use_release:
        folder = release_dir(root)
        for f in SPLIT_FILES.values():
            require_file(folder / f, fix)
        return "release", folder
    counts = (int(d.num_train), int(d.num_val), int(d.num_test))
    return "generated", ensure_generated(root, int(d.min_len), max_len, counts, int(d.generator_seed))


def cache_entry(config: ml_collections.ConfigDict, source: tuple[str, Path] | None = None) -> Path:
    """The token cache folder, keyed by the split files' (path, size, mtime) and ``max_len``."""
    kind, folder = source or _source(config)
    files = [folder / f for f in SPLIT_FILES.values()]
    key = {
        "source": kind,
        "fingerprint": cache.file_fingerprint(files),
        "max_len": int(config.data.max_len),
        "reader": READER_VERSION,
    }
    return cache.entry_path(config, "listops", key)


def _build(kind: str, folder: Path, max_len: int, counts: Sequence[int] = ()) -> Callable[[cache.Writer], dict]:
    """The cache builder: checks a generated set (:func:`check_generated`), then tokenises the three files."""

    def build(writer: cache.Writer) -> dict:
        if kind == "generated":
            check_generated(folder, counts)
        sizes = {}
        for name, file in SPLIT_FILES.items():

            def alloc(field: str, shape: tuple, dtype: type, name: str = name) -> np.ndarray:
                return writer.array(f"{name}.{field}", shape, dtype)

            sizes[name] = len(read_split(folder / file, name, max_len, alloc))
        return {"splits": list(SPLIT_FILES), "sizes": sizes, "source": kind, "folder": str(folder), "max_len": max_len}

    return build


def load(config: ml_collections.ConfigDict) -> TaskData:
    """ListOps as ``config.data`` describes; the TSVs are parsed once into the cache that later loads memory-map."""
    max_len = int(config.data.max_len)
    kind, folder = _source(config)
    say(f"{kind} data from {folder}")
    counts = (int(config.data.num_train), int(config.data.num_val), int(config.data.num_test))
    splits = cache.build_or_load(
        cache_entry(config, (kind, folder)),
        _build(kind, folder, max_len, counts),
        f"ListOps ({kind}, max_len {max_len})",
        len(VOCAB),
        NUM_CLASSES,
    )
    return TaskData(
        train=splits["train"],
        validation=splits["validation"],
        test=splits["test"],
        vocab_size=len(VOCAB),
        num_classes=NUM_CLASSES,
        max_len=max_len,
        dual=False,
    )
