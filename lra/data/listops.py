"""ListOps (LRA): nested MIN/MAX/MED/SM expressions over digits; the label is the value (10 classes).

Data come from the LRA release (``<data_dir>/lra_release/listops-1000/basic_{train,val,test}.tsv``)
or from a local seeded generator that follows the LRA generator's algorithm
(``lra_benchmarks/data/listops.py``) and writes the same TSV format, cached under
``<data_dir>/listops_generated/<limits, counts, seed>/``. Both go through one reader, whose token
arrays are cached (``lra.data.cache``: keyed by the split files' path, size and mtime and by
``max_len``; memory-mapped at load), so only the first load parses the TSVs.

The generator (LRA's algorithm, same distribution of kept trees):
  * the root has depth 1; a node at depth < 10 is an operator with probability 0.25, else a
    digit 0-9; at depth 10 always a digit. An operator (``[MIN``, ``[MAX``, ``[MED``, ``[SM``)
    has ``randint(2, 10)`` arguments and is closed by ``]``.
  * length = digits + operators + closing brackets; a tree is kept iff
    ``min_len < length < max_len`` (LRA: 500 < length < 2000). Examples are unique as strings;
    train, validation and test are consecutive slices of one stream of unique examples, so no
    example is in two splits.
  * values: MIN, MAX; MED = ``int(np.median(args))`` (LRA's convention: the mean of the two
    middle values for an even count, truncated); SM = sum mod 10.

Decisions, where this differs from LRA's code:
  * Speed (the full 96k/2k/2k set: ~1 CPU minute to generate, ~8 s to parse into the cache once,
    then milliseconds to load, memory-mapped): the tree is
    generated as its token sequence with an explicit stack (no recursion, no tuple trees), a
    tree is abandoned as soon as it reaches ``max_len`` tokens (rejection of independent trees,
    so the kept trees have the same distribution), and each node uses one uniform draw:
    conditioned on the branch taken, the rescaled draw is again uniform, and its leading
    mixed-radix digits give the number of arguments and the operator. The labels are computed
    while the tree is built. Seeded with ``random.Random(generator_seed)``: deterministic.
  * Tokens: parentheses are dropped (they only mirror LRA's binary tuple nesting) and ``]`` is a
    token of its own, which makes the expression unambiguous. This matches LRA's current input
    pipeline, which keeps ``]`` (renamed ``X`` before its tokenizer, which drops
    non-alphanumeric tokens); only its pre-2021 pipeline tokenized the raw ``]`` away, so those
    models never saw where an operator's arguments end.
  * An example longer than ``config.data.max_len`` is an error, not silently truncated.
  * No CLS token is added: with ``config.model.pooling == "cls"`` the model prepends its own.

The parts, one module each: ``listops_format`` (tokens, vocabulary, file names), ``listops_gen``
(the generator), ``listops_store`` (generated sets on disk, checked), ``listops_reader`` (TSV to
token arrays). This module is the task loader over them; the names other code and tests import
from here are re-exported.
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
    """Whether the release's split files are all in ``folder``: False when none is.

    A partial release (some split files but not all) is an error, not "absent": falling back to
    a generated set would silently train on different data than the user put there.
    """
    missing = [folder / f for f in SPLIT_FILES.values() if not (folder / f).is_file()]
    if missing and len(missing) < len(SPLIT_FILES):
        raise DataError(
            f"partial ListOps release in {folder}: missing {', '.join(map(str, missing))}\n"
            f"  to fix: {fix}; or remove the folder's split files to use a generated set"
        )
    return not missing


# ---------------------------------------------------------------------------------------------
# Task loader


def release_dir(root: Path) -> Path:
    return root / RELEASE_SUBDIR


def _source(config: ml_collections.ConfigDict) -> tuple[str, Path]:
    """("release" | "generated", folder of the three split files) for ``config.data``.

    auto: the release files if present and ``max_len`` holds their trees (< 2000 tokens), else a
    generated set with the config's limits and counts (which the release ignores). A release
    folder with some split files but not all is an error under auto too, never a fallback.
    """
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
    """The cache folder of the token arrays: keyed by the split files' (path, size, mtime) and
    ``max_len``, so an edited, replaced or regenerated file, or another max_len, builds a new one."""
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
    """The cache builder: checks a generated set against ``counts`` (:func:`check_generated`), then
    tokenises the three files."""

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
    """ListOps as ``config.data`` describes: ``source`` auto | release | generated (see ``_source``).

    The TSVs are parsed once into a cache entry (``lra.data.cache``) that later loads memory-map:
    the paper-scale set reloads in about a second instead of re-parsing 630 MB of text.
    """
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
