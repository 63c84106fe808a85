"""Pathfinder (LRA "Pathfinder", 32 x 32 = 1,024 pixels) and Path-X (128 x 128 = 16,384 pixels).

Task, settings, layout and tokens (pixel + 1: black pixels are not masked as by LRA's ``inputs > 0``): docs/data.md.
Read from the release's ``lra_release/pathfinder<side>/<setting>/`` or from images generated in its layout
(:mod:`lra.data.pathfinder_gen`, the only 16 x 16 source) under ``pathfinder_generated/<generator key>/``.
Metadata, as LRA's ``lra_benchmarks/data/pathfinder.py`` reads it: despite ``.npy``, text, one image a line,
space-separated: folder (``imgs/<batch>``), file name, index, label, generator parameters (only fields 1, 2, 4
used); a real numpy array (the public generator's ``save_metadata``) is read too. Files in numeric batch order.

Split: LRA's ``[:80%]``, ``[80%:90%]``, ``[90%:]`` of one setting, as contiguous rows (bounds rounded); LRA's TFDS
orders by a key hash, so this is its rule in distribution (batches are independent draws), not its images. Empty
image files (the release has ``pathfinder32/curv_baseline/imgs/0/sample_172.png``) are left out after splitting,
as in LRA. Cached memory-mapped (Path-X's training tokens: 5.2 GB on disk, not in memory)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

import ml_collections
import numpy as np

from lra.data import cache, pathfinder_gen, pathfinder_write
from lra.data.bytes_tokenizer import TOKEN_DTYPE, VOCAB_SIZE
from lra.data.paths import data_dir
from lra.data.types import DataError, TaskData
from lra.errors import InputError

NUM_CLASSES = 2
TASK_RESOLUTION = {"pathfinder": 32, "pathx": 128}
SETTINGS = tuple(pathfinder_gen.SETTINGS)
DEFAULT_SETTING = "curv_contour_length_14"
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)  # train / validation / test of one setting (LRA)
EXPECTED_SIZES = {"train": 160_000, "validation": 20_000, "test": 20_000}  # of a 200k release setting
RELEASE_SUBDIR = Path("lra_release")
GENERATED_SUBDIR = "pathfinder_generated"
READER_VERSION = 1  # part of the cache key: bump when the tokens change
SOURCES = ("auto", "release", "generated")
_NPY_MAGIC = b"\x93NUMPY"


def options(config: ml_collections.ConfigDict) -> tuple[int, str, int]:
    """(side, setting, images to generate) from ``config.data``, checked."""
    side = int(config.data.get("pathfinder_resolution", TASK_RESOLUTION.get(config.task, 32)))
    setting = config.data.get("pathfinder_setting", DEFAULT_SETTING)
    images = int(config.data.get("pathfinder_images", 200_000))
    if setting not in SETTINGS:
        raise InputError(f"config.data.pathfinder_setting={setting!r}: valid settings are {', '.join(SETTINGS)}")
    if side <= 0:
        raise InputError(f"config.data.pathfinder_resolution={side} must be positive")
    if images < 10:
        raise InputError(f"config.data.pathfinder_images={images}: need at least 10 images for a 80/10/10 split")
    return side, setting, images


def release_dir(root: Path, side: int, setting: str) -> Path:
    return root / RELEASE_SUBDIR / f"pathfinder{side}" / setting


def generated_dir(root: Path, side: int, setting: str, seed: int, images: int) -> Path:
    return (
        root
        / GENERATED_SUBDIR
        / f"v{pathfinder_gen.GENERATOR_VERSION}-seed{seed}-n{images}"
        / f"pathfinder{side}"
        / setting
    )


def fix_message(root: Path, side: int, setting: str) -> str:
    return (
        f"download the LRA release (python -m lra.data download pathfinder --data_dir {root}), which "
        f"extracts {release_dir(root, side, setting)}; or set --config.data.source=generated to "
        f"generate the images locally"
    )


def locate(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Which folder the images come from (cheap: no reading, no generating)."""
    root = data_dir(config.get("data_dir"))
    side, setting, images = options(config)
    source = config.data.get("source", "auto")
    if source not in SOURCES:
        raise InputError(f"config.data.source={source!r}: valid values are {', '.join(SOURCES)}")
    release = release_dir(root, side, setting)
    if source in ("auto", "release") and release.exists():
        if not (release / "metadata").is_dir():
            raise DataError(
                f"Pathfinder release folder incomplete: {release / 'metadata'} is missing\n"
                f"  to fix: {fix_message(root, side, setting)}"
            )
        return {"kind": "release", "folder": release, "side": side, "setting": setting}
    if source == "release":
        raise DataError(f"Pathfinder release not found: {release}\n  to fix: {fix_message(root, side, setting)}")
    if side not in pathfinder_gen.GEOMETRIES:
        raise DataError(
            f"no release folder {release}, and the generator has no {side} x {side} geometry "
            f"(it draws {', '.join(map(str, pathfinder_gen.GEOMETRIES))})\n"
            f"  to fix: {fix_message(root, side, setting)}"
        )
    seed = int(config.data.get("generator_seed", 0))
    return {
        "kind": "generated",
        "folder": generated_dir(root, side, setting, seed, images),
        "side": side,
        "setting": setting,
        "seed": seed,
        "images": images,
    }


def _fingerprint(source: dict[str, Any]) -> Any:
    """Release: metadata and image folders (size, mtime); generated: the generator's key (outlives PNGs)."""
    if source["kind"] == "generated":
        return [pathfinder_gen.GENERATOR_VERSION, source["seed"], source["images"], source["side"], source["setting"]]
    folder = source["folder"]
    imgs = folder / "imgs"
    batches = sorted((e.name, e.stat().st_mtime_ns) for e in os.scandir(imgs) if e.is_dir()) if imgs.is_dir() else []
    return [cache.folder_fingerprint(folder / "metadata", ".npy"), batches]


def cache_entry(config: ml_collections.ConfigDict, source: dict[str, Any] | None = None) -> Path:
    source = source or locate(config)
    key = {
        "source": source["kind"],
        "fingerprint": _fingerprint(source),
        "max_len": int(config.data.max_len),
        "split": SPLIT_FRACTIONS,
        "reader": READER_VERSION,
    }
    return cache.entry_path(config, config.task, key)


def _batch_order(path: Path) -> tuple[int, int | str]:
    return (0, int(path.stem)) if path.stem.isdigit() else (1, path.stem)


def _metadata_lines(path: Path) -> list[list[str]]:
    """Rows of one metadata file as lists of fields (text, or a numpy array of strings)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read Pathfinder metadata {path} ({e.strerror})") from None
    if raw.startswith(_NPY_MAGIC):
        try:
            with open(path, "rb") as f:
                array = np.load(f, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise DataError(f"malformed Pathfinder metadata {path}: not a readable numpy array ({e})") from None
        return [[str(v) for v in np.atleast_1d(row)] for row in np.atleast_2d(array)]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"malformed Pathfinder metadata {path}: not UTF-8 text ({e})") from None
    return [line.split() for line in text.splitlines()]


def read_metadata(folder: Path, fix: str) -> list[tuple[Path, int]]:
    """(image path, label) of every row of ``folder/metadata/*.npy``, in batch order."""
    meta = folder / "metadata"
    files = sorted(meta.glob("*.npy"), key=_batch_order) if meta.is_dir() else []
    if not files:
        raise DataError(f"no Pathfinder metadata files (*.npy) in {meta}\n  to fix: {fix}")
    rows = []
    for path in files:
        for number, fields in enumerate(_metadata_lines(path), 1):
            if not fields:
                continue  # blank line
            where = f"{path}, line {number}"
            if len(fields) < 4:
                raise DataError(
                    f"malformed Pathfinder metadata at {where}: {len(fields)} field(s), expected "
                    f"at least 4 (folder, file name, index, label)\n  to fix: {fix}"
                )
            if fields[3] not in ("0", "1"):
                raise DataError(
                    f"malformed Pathfinder metadata at {where}: label {fields[3]!r}, expected 0 or 1"
                    f"\n  to fix: {fix}"
                )
            rel = PurePosixPath(fields[0]) / fields[1]
            if rel.is_absolute() or ".." in rel.parts:
                raise DataError(
                    f"malformed Pathfinder metadata at {where}: image path {rel} leaves the "
                    f"setting's folder\n  to fix: {fix}"
                )
            rows.append((folder.joinpath(*rel.parts), int(fields[3])))
    return rows


def read_png(path: Path, side: int, fix: str) -> np.ndarray:
    from PIL import Image  # Pillow: a core dependency, imported where images are read

    try:
        with Image.open(path) as im:
            # the release's PNGs are 8-bit grayscale; convert anything else
            gray = im if im.mode == "L" else im.convert("L")
            pixels = np.asarray(gray, np.uint8)
    except FileNotFoundError:
        raise DataError(f"Pathfinder image not found: {path}\n  to fix: {fix}") from None
    except Exception as e:  # PIL raises several types for corrupt data
        raise DataError(f"cannot decode the Pathfinder image {path} ({e})\n  to fix: {fix}") from None
    if pixels.shape != (side, side):
        raise DataError(
            f"Pathfinder image {path} is {pixels.shape[1]} x {pixels.shape[0]}, expected "
            f"{side} x {side}\n  to fix: {fix} (or set config.data.pathfinder_resolution)"
        )
    return pixels


def split_bounds(n: int) -> tuple[int, int]:
    """Row indices where validation and test start (80/10/10, rounded to the nearest row)."""
    return int(round(SPLIT_FRACTIONS[0] * n)), int(round((SPLIT_FRACTIONS[0] + SPLIT_FRACTIONS[1]) * n))


def _sizes(rows: list[tuple[Path, int]], fix: str) -> np.ndarray:
    sizes = np.zeros(len(rows), np.int64)
    for i, (path, _) in enumerate(rows):
        try:
            sizes[i] = path.stat().st_size
        except FileNotFoundError:
            raise DataError(f"Pathfinder image not found: {path} (listed in the metadata)\n  to fix: {fix}") from None
    return sizes


def _build(source: dict[str, Any], max_len: int, fix: str):
    side, folder = source["side"], source["folder"]

    def build(writer: cache.Writer) -> dict[str, Any]:
        if source["kind"] == "generated" and not (folder / "metadata").is_dir():
            cache.log(
                f"generating {source['images']:,} Pathfinder images ({side} x {side}, {source['setting']}, "
                f"seed {source['seed']}) into {folder} ..."
            )
            folder.parent.mkdir(parents=True, exist_ok=True)
            pathfinder_write.write_setting(
                folder, side, source["setting"], source["images"], source["seed"], log=cache.log
            )
        rows = read_metadata(folder, fix)
        sizes = _sizes(rows, fix)
        a, b = split_bounds(len(rows))
        empty = np.nonzero(sizes == 0)[0]
        if len(empty):
            cache.log(f"left out {len(empty)} empty image file(s) as LRA does, e.g. {rows[empty[0]][0]}")
        counts, meta_sizes = {}, {}
        for name, lo, hi in (("train", 0, a), ("validation", a, b), ("test", b, len(rows))):
            keep = [i for i in range(lo, hi) if sizes[i] > 0]
            inputs = writer.array(f"{name}.inputs", (len(keep), max_len), TOKEN_DTYPE)
            labels = writer.array(f"{name}.labels", (len(keep),), np.int32)
            writer.array(f"{name}.lengths", (len(keep),), np.int32)[:] = side * side
            for j, i in enumerate(keep):
                path, label = rows[i]
                inputs[j, : side * side] = read_png(path, side, fix).reshape(-1)
                inputs[j, : side * side] += 1
                labels[j] = label
            counts[name] = np.bincount(np.asarray(labels, np.int64), minlength=NUM_CLASSES).tolist()
            meta_sizes[name] = len(keep)
        return {
            "splits": ["train", "validation", "test"],
            "sizes": meta_sizes,
            "label_counts": counts,
            "source": source["kind"],
            "folder": str(folder),
            "empty_images_left_out": len(empty),
            "inputs": "uint16 tokens: pixel value + 1, padded with 0 to max_len",
        }

    return build


def load(config: ml_collections.ConfigDict) -> TaskData:
    side, setting, _ = options(config)
    max_len = int(config.data.max_len)
    if max_len < side * side:
        raise InputError(
            f"config.data.max_len={max_len} is shorter than the {side * side} pixels of a "
            f"{side} x {side} image: set config.data.max_len={side * side} (and config.model.max_len)"
        )
    source = locate(config)
    root = data_dir(config.get("data_dir"))
    splits = cache.build_or_load(
        cache_entry(config, source),
        _build(source, max_len, fix_message(root, side, setting)),
        f"Pathfinder {side} x {side} {setting} ({source['kind']}: {source['folder']})",
        VOCAB_SIZE,
        NUM_CLASSES,
    )
    return TaskData(
        train=splits["train"],
        validation=splits["validation"],
        test=splits["test"],
        vocab_size=VOCAB_SIZE,
        num_classes=NUM_CLASSES,
        max_len=max_len,
        dual=False,
    )
