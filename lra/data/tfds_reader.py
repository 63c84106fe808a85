"""Read a prepared tensorflow-datasets folder (TFRecord shards) without TensorFlow.

Layout: ``<tfds_dir>/<name>[/<config>]/<version>/<name>-<split>.tfrecord-<i>-of-<n>``. Shards in index order,
records in file order: TFDS's slicing order, so a split's last records are those LRA held out (``train[90%:]``)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from lra.data import tfrecord
from lra.data.types import DataError

_SHARD = re.compile(r"-(\d+)-of-(\d+)$")


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.name.split(".") if p.isdigit())


def find_version_dir(dataset_dir: Path, splits: Sequence[str], name: str) -> Path | None:
    """The newest ``<version>/`` folder under ``dataset_dir`` holding shards for every split."""
    if not dataset_dir.is_dir():
        return None
    versions = [p for p in dataset_dir.iterdir() if p.is_dir() and re.fullmatch(r"\d+(\.\d+)*", p.name)]
    for version in sorted(versions, key=_version_key, reverse=True):
        if all(any(version.glob(f"{name}-{split}.*")) for split in splits):
            return version
    return None


def shard_paths(version_dir: Path, name: str, split: str, fix: str) -> list[Path]:
    """The TFRecord shards of one split, in index order; a DataError if any is missing."""
    found = sorted(version_dir.glob(f"{name}-{split}.tfrecord*"))
    if not found:
        others = sorted(p.name for p in version_dir.glob(f"{name}-{split}.*"))
        detail = f" (found {', '.join(others[:3])}: only the tfrecord file format is supported)" if others else ""
        raise DataError(f"no TFRecord shards for split {split!r} in {version_dir}{detail}\n  to fix: {fix}")
    shards: dict[int, Path] = {}
    total = None
    for path in found:
        m = _SHARD.search(path.name)
        index, count = (int(m.group(1)), int(m.group(2))) if m else (0, 1)
        shards[index] = path
        total = count
    missing = sorted(set(range(total or 0)) - set(shards))
    if missing:
        raise DataError(
            f"split {split!r} in {version_dir} is incomplete: shards {missing[:5]} of "
            f"{total} are missing\n  to fix: {fix}"
        )
    return [shards[i] for i in sorted(shards)]


def read_examples(paths: Sequence[Path], keys: Sequence[str], fix: str) -> list[dict]:
    """Parse every Example of the shards (in order), keeping only ``keys``; errors name the file."""
    examples = []
    for path in paths:
        try:
            records = tfrecord.read_records(path)
        except (tfrecord.RecordError, OSError) as e:
            raise DataError(f"cannot read TFRecord file {path}: {e}\n  to fix: {fix}") from None
        for i, record in enumerate(records):
            try:
                features = tfrecord.parse_example(record)
            except tfrecord.RecordError as e:
                raise DataError(f"{path}: record {i} is not a tf.train.Example ({e})\n  to fix: {fix}") from None
            absent = [k for k in keys if not features.get(k)]
            if absent:
                raise DataError(
                    f"{path}: record {i} lacks feature(s) {absent} (has {sorted(features)})" f"\n  to fix: {fix}"
                )
            examples.append({k: features[k] for k in keys})
    return examples


def try_download(name: str, tfds_dir: Path) -> bool:
    """Let tensorflow-datasets download and prepare ``name`` when it is installed; False if not."""
    try:
        import tensorflow_datasets as tfds  # optional: only for downloading
    except ImportError:
        return False
    print(f"lra.data: downloading {name} with tensorflow-datasets into {tfds_dir} ...", file=sys.stderr, flush=True)
    try:
        tfds.builder(name, data_dir=str(tfds_dir)).download_and_prepare()
    except Exception as e:  # network, disk, tfds version: report and fall back to manual steps
        print(f"lra.data: tensorflow-datasets could not prepare {name}: {e}", file=sys.stderr, flush=True)
        return False
    return True
