"""IMDB sentiment classification at byte level (LRA "Text").

Tokens: byte + 1, truncated to ``max_len`` (4000 in the convluna paper's Table 2; LRA's runs used 1000); neg 0,
pos 1. A review is its file's bytes stripped, as tfds' ``imdb_reviews`` stores it, so both sources (``format``:
``original`` ``aclImdb/``, ``tfds`` ``tensorflow_datasets/imdb_reviews/plain_text/<version>/``) agree.
Validation: a stratified ``val_fraction`` of train held out with ``val_seed``, never test (``lra_val_is_test=True``:
LRA's convention); it depends on the source's order, so aclImdb and TFDS give different, equally valid, splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from lra.data import bytes_tokenizer, cache, tfds_reader
from lra.data.paths import data_dir
from lra.data.types import DataError, Split, TaskData
from lra.errors import InputError

NUM_CLASSES = 2
LABELS = ("neg", "pos")
SPLITS = ("train", "test")
EXPECTED_SIZES = {"train": 25_000, "test": 25_000}
URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
TFDS_NAME, TFDS_CONFIG = "imdb_reviews", "plain_text"


def fix_message(root: Path) -> str:
    return (
        f"run `python -m lra.data download text --data_dir {root}` (downloads, verifies, extracts and "
        f"prepares it), or by hand: download the IMDB reviews ({URL}) and extract them into {root} "
        f"(mkdir -p {root} && tar xzf aclImdb_v1.tar.gz -C {root}, giving {root}/aclImdb/train/pos/*.txt), then run "
        f"`python -m lra.data prepare text --data_dir {root}` (with tensorflow-datasets installed, "
        f"that command downloads it itself)"
    )


def tfds_dir(config: ml_collections.ConfigDict) -> Path:
    custom = config.data.get("tfds_dir", "")
    return Path(custom).expanduser() if custom else data_dir(config.get("data_dir")) / "tensorflow_datasets"


def locate(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Find the source files (cheap: stats only); a DataError naming the paths if there are none."""
    root = data_dir(config.get("data_dir"))
    fmt = config.data.get("format", "auto")
    if fmt not in ("auto", "original", "tfds"):
        raise InputError(f"config.data.format={fmt!r}: valid values are auto, original, tfds")
    acl = root / "aclImdb"
    if fmt in ("auto", "original") and acl.is_dir():
        folders = {s: {label: acl / s / label for label in LABELS} for s in SPLITS}
        for per_label in folders.values():
            for folder in per_label.values():
                if not folder.is_dir():
                    raise DataError(f"IMDB folder incomplete: {folder} is missing\n  to fix: {fix_message(root)}")
        fingerprint = [cache.folder_fingerprint(f, ".txt") for s in SPLITS for f in folders[s].values()]
        return {"kind": "aclImdb", "folders": folders, "fingerprint": fingerprint}
    dataset_dir = tfds_dir(config) / TFDS_NAME / TFDS_CONFIG
    if fmt in ("auto", "tfds"):
        version = tfds_reader.find_version_dir(dataset_dir, SPLITS, TFDS_NAME)
        if version is not None:
            shards = {s: tfds_reader.shard_paths(version, TFDS_NAME, s, fix_message(root)) for s in SPLITS}
            files = cache.file_fingerprint(p for s in SPLITS for p in shards[s])
            return {"kind": "tfds", "shards": shards, "fingerprint": files}
    looked = {
        "auto": [acl / "train" / "pos", dataset_dir / "<version>"],
        "original": [acl / "train" / "pos"],
        "tfds": [dataset_dir / "<version>"],
    }[fmt]
    raise DataError(
        "IMDB not found; looked for " + " and ".join(str(p) for p in looked) + f"\n  to fix: {fix_message(root)}"
    )


def _read_split(source: dict[str, Any], split: str, fix: str) -> tuple[list[bytes], list[int]]:
    if source["kind"] == "aclImdb":
        docs, labels = [], []
        for label, name in enumerate(LABELS):
            folder = source["folders"][split][name]
            for path in sorted(folder.glob("*.txt")):
                docs.append(path.read_bytes().strip())
                labels.append(label)
        return docs, labels
    examples = tfds_reader.read_examples(source["shards"][split], ("text", "label"), fix)
    return [e["text"][0] for e in examples], [int(e["label"][0]) for e in examples]


def cache_entry(config: ml_collections.ConfigDict, source: dict[str, Any] | None = None) -> Path:
    source = source or locate(config)
    key = {"source": source["kind"], "fingerprint": source["fingerprint"], "max_len": int(config.data.max_len)}
    return cache.entry_path(config, "text", key)


def _build(source: dict[str, Any], max_len: int, fix: str):
    def build(writer: cache.Writer) -> dict[str, Any]:
        sizes = {}
        for split in SPLITS:
            docs, labels = _read_split(source, split, fix)
            if not docs:
                raise DataError(f"IMDB {split} split is empty ({source['kind']} source)\n  to fix: {fix}")
            bad = sorted(set(labels) - set(range(NUM_CLASSES)))
            if bad:
                raise DataError(f"IMDB {split} split has labels {bad}; expected 0 (neg) and 1 (pos)\n  to fix: {fix}")
            inputs = writer.array(f"{split}.inputs", (len(docs), max_len), bytes_tokenizer.TOKEN_DTYPE)
            lengths = writer.array(f"{split}.lengths", (len(docs),), np.int32)
            writer.array(f"{split}.labels", (len(docs),), np.int32)[:] = labels
            for i, doc in enumerate(docs):
                lengths[i] = bytes_tokenizer.encode_into(doc, inputs[i])
            sizes[split] = len(docs)
        return {"splits": list(SPLITS), "sizes": sizes, "source": source["kind"], "max_len": max_len}

    return build


def holdout(labels: np.ndarray, fraction: float, seed: int, stratify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (train, validation) index arrays; per class when ``stratify``."""
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(labels == c) for c in np.unique(labels)] if stratify else [np.arange(len(labels))]
    val = np.concatenate([rng.permutation(g)[: int(round(fraction * len(g)))] for g in groups])
    val = np.sort(val)
    return np.setdiff1d(np.arange(len(labels)), val), val


def _take(split: Split, name: str, idx: np.ndarray) -> Split:
    return Split(name=name, inputs=split.inputs[idx], labels=split.labels[idx], lengths=split.lengths[idx])


def load(config: ml_collections.ConfigDict) -> TaskData:
    max_len = int(config.data.max_len)
    if max_len < 1:
        raise InputError(f"config.data.max_len={max_len} must be positive")
    source = locate(config)
    fix = fix_message(data_dir(config.get("data_dir")))
    splits = cache.build_or_load(
        cache_entry(config, source),
        _build(source, max_len, fix),
        f"IMDB ({source['kind']}, max_len {max_len})",
        bytes_tokenizer.VOCAB_SIZE,
        NUM_CLASSES,
    )
    train, test = splits["train"], splits["test"]
    if config.data.get("lra_val_is_test", False):
        validation = Split(name="validation", inputs=test.inputs, labels=test.labels, lengths=test.lengths)
    else:
        fraction = float(config.data.get("val_fraction", 0.1))
        if not 0.0 < fraction < 1.0:
            raise InputError(f"config.data.val_fraction={fraction} must be in (0, 1)")
        train_idx, val_idx = holdout(
            np.asarray(train.labels),
            fraction,
            int(config.data.get("val_seed", 0)),
            bool(config.data.get("val_stratify", True)),
        )
        train, validation = _take(train, "train", train_idx), _take(train, "validation", val_idx)
    return TaskData(
        train=train,
        validation=validation,
        test=test,
        vocab_size=bytes_tokenizer.VOCAB_SIZE,
        num_classes=NUM_CLASSES,
        max_len=max_len,
        dual=False,
    )
