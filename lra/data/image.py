"""CIFAR-10 as a sequence of 1024 grayscale pixels (LRA "Image"); conventions: docs/data.md.

Grayscale ``lra`` (default), LRA's ``tf.image.rgb_to_grayscale`` on uint8, in float32 summed in channel order:
``L = trunc(255.5 * (0.2989 R' + 0.5870 G' + 0.1140 B'))``, ``X' = X * (1/255)`` (TensorFlow's kernel may differ
by one level within float32 rounding of an integer); ``pil``: ``L = (19595 R + 38470 G + 7471 B + 32768) >> 16``.
Tokens: pixel + 1. Validation: the last ``val_fraction`` of train in source order (LRA's ``train[90%:]``): LRA's own
images from TFDS, the second half of data_batch_5 from the original files (TFDS shuffles). ``image_downsample`` d
averages d x d blocks (rounded half up). Sources (``format``; ``auto`` in order): ``original``,
``cifar-10-batches-{py,bin}/`` (pickles unpickled accepting numpy arrays only); ``tfds``,
``tensorflow_datasets/cifar10/<version>/`` (PNGs in TFRecord shards, decoded with Pillow)."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from lra.data import cache, tfds_reader
from lra.data.bytes_tokenizer import TOKEN_DTYPE, VOCAB_SIZE
from lra.data.paths import data_dir
from lra.data.types import DataError, Split, TaskData
from lra.errors import InputError

NUM_CLASSES = 10
SIDE = 32
PIXELS = SIDE * SIDE
EXPECTED_SIZES = {"train": 50_000, "test": 10_000}
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]
GRAYSCALE = ("lra", "pil")


def fix_message(root: Path) -> str:
    return (
        f"run `python -m lra.data download image --data_dir {root}` (downloads, verifies, extracts and "
        f"prepares it), or by hand: download CIFAR-10, python version ({URL}), and extract it into {root} "
        f"(mkdir -p {root} && tar xzf cifar-10-python.tar.gz -C {root}, giving "
        f"{root}/cifar-10-batches-py/data_batch_1), "
        f"then run `python -m lra.data prepare image --data_dir {root}` (with tensorflow-datasets "
        f"installed, that command downloads it itself)"
    )


def grayscale(r: np.ndarray, g: np.ndarray, b: np.ndarray, method: str = "lra") -> np.ndarray:
    """8-bit luma of uint8 channel arrays (any equal shapes); see the module docstring."""
    if method == "lra":
        scale = np.float32(1.0 / 255.0)
        y = (r.astype(np.float32) * scale) * np.float32(0.2989)
        y += (g.astype(np.float32) * scale) * np.float32(0.5870)
        y += (b.astype(np.float32) * scale) * np.float32(0.1140)
        return (y * np.float32(255.5)).astype(np.uint8)
    if method == "pil":
        fixed = r.astype(np.uint32) * 19595 + g.astype(np.uint32) * 38470 + b.astype(np.uint32) * 7471 + 32768
        return (fixed >> 16).astype(np.uint8)
    raise InputError(f"config.data.grayscale={method!r}: valid values are {', '.join(GRAYSCALE)}")


def downsample(pixels_NxP: np.ndarray, factor: int) -> np.ndarray:
    """Average ``factor`` x ``factor`` blocks of 32x32 images (round half up); N x (32/f)^2 uint8."""
    if factor == 1:
        return pixels_NxP
    if factor < 1 or SIDE % factor:
        raise InputError(f"config.data.image_downsample={factor} must divide {SIDE}")
    s = SIDE // factor
    blocks = pixels_NxP.reshape(-1, s, factor, s, factor).astype(np.uint32).sum(axis=(2, 4))
    return ((blocks + factor * factor // 2) // (factor * factor)).astype(np.uint8).reshape(-1, s * s)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """CIFAR pickles hold numpy arrays and lists; refuse any other global (no code execution)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        ("builtins", "bytearray"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR pickle")
        return super().find_class(module, name)


def _read_pickle(path: Path, fix: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            batch = _NumpyOnlyUnpickler(f, encoding="bytes").load()
        data = np.asarray(batch[b"data"], np.uint8)
        labels = np.asarray(batch[b"labels"], np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as e:
        raise DataError(f"malformed CIFAR-10 batch {path}: {type(e).__name__}: {e}\n  to fix: {fix}") from None
    if data.ndim != 2 or data.shape[1] != 3 * PIXELS or len(labels) != len(data):
        raise DataError(
            f"malformed CIFAR-10 batch {path}: data {data.shape}, {len(labels)} labels; expected "
            f"N x {3 * PIXELS} and N labels\n  to fix: {fix}"
        )
    return data, labels


def _read_bin(path: Path, fix: str) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, np.uint8)
    if len(raw) % (1 + 3 * PIXELS):
        raise DataError(
            f"malformed CIFAR-10 binary batch {path}: {len(raw)} bytes is not a multiple of "
            f"{1 + 3 * PIXELS}\n  to fix: {fix}"
        )
    rows = raw.reshape(-1, 1 + 3 * PIXELS)
    return rows[:, 1:], rows[:, 0].astype(np.int64)


def _decode_png(png: bytes, where: str, fix: str) -> np.ndarray:
    from PIL import Image  # Pillow: only needed for the TFDS source

    try:
        with Image.open(io.BytesIO(png)) as im:
            rgb = np.asarray(im.convert("RGB"))
    except Exception as e:  # PIL raises several types for corrupt data
        raise DataError(f"{where}: cannot decode the image ({e})\n  to fix: {fix}") from None
    if rgb.shape != (SIDE, SIDE, 3):
        raise DataError(f"{where}: image is {rgb.shape}, expected ({SIDE}, {SIDE}, 3)\n  to fix: {fix}")
    return rgb.transpose(2, 0, 1).reshape(3 * PIXELS)  # channel-major, like the original files


def tfds_dir(config: ml_collections.ConfigDict) -> Path:
    custom = config.data.get("tfds_dir", "")
    return Path(custom).expanduser() if custom else data_dir(config.get("data_dir")) / "tensorflow_datasets"


def locate(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Find the source files (cheap: stats only); a DataError naming the paths if there are none."""
    root = data_dir(config.get("data_dir"))
    fix = fix_message(root)
    fmt = config.data.get("format", "auto")
    if fmt not in ("auto", "original", "tfds"):
        raise InputError(f"config.data.format={fmt!r}: valid values are auto, original, tfds")
    if fmt in ("auto", "original"):
        for kind, folder, names in (
            ("pickle", root / "cifar-10-batches-py", (TRAIN_FILES, TEST_FILES)),
            (
                "bin",
                root / "cifar-10-batches-bin",
                ([f + ".bin" for f in TRAIN_FILES], [f + ".bin" for f in TEST_FILES]),
            ),
        ):
            if folder.is_dir():
                files = {s: [folder / n for n in ns] for s, ns in zip(("train", "test"), names, strict=False)}
                for path in files["train"] + files["test"]:
                    if not path.is_file():
                        raise DataError(f"CIFAR-10 folder incomplete: {path} is missing\n  to fix: {fix}")
                return {
                    "kind": kind,
                    "files": files,
                    "fingerprint": cache.file_fingerprint(files["train"] + files["test"]),
                }
    dataset_dir = tfds_dir(config) / "cifar10"
    if fmt in ("auto", "tfds"):
        version = tfds_reader.find_version_dir(dataset_dir, ("train", "test"), "cifar10")
        if version is not None:
            files = {s: tfds_reader.shard_paths(version, "cifar10", s, fix) for s in ("train", "test")}
            return {
                "kind": "tfds",
                "files": files,
                "fingerprint": cache.file_fingerprint(files["train"] + files["test"]),
            }
    looked = {
        "auto": [root / "cifar-10-batches-py", root / "cifar-10-batches-bin", dataset_dir / "<version>"],
        "original": [root / "cifar-10-batches-py", root / "cifar-10-batches-bin"],
        "tfds": [dataset_dir / "<version>"],
    }[fmt]
    raise DataError("CIFAR-10 not found; looked for " + ", ".join(str(p) for p in looked) + f"\n  to fix: {fix}")


def _read_split(source: dict[str, Any], split: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """RGB rows (N x 3072, channel-major) and labels of one split, in source order."""
    if source["kind"] in ("pickle", "bin"):
        reader = _read_pickle if source["kind"] == "pickle" else _read_bin
        parts = [reader(p, fix) for p in source["files"][split]]
        return np.concatenate([d for d, _ in parts]), np.concatenate([lab for _, lab in parts])
    examples = tfds_reader.read_examples(source["files"][split], ("image", "label"), fix)
    rgb = np.stack([_decode_png(e["image"][0], f"cifar10 {split} example {i}", fix) for i, e in enumerate(examples)])
    return rgb, np.array([e["label"][0] for e in examples], np.int64)


def cache_entry(config: ml_collections.ConfigDict, source: dict[str, Any] | None = None) -> Path:
    source = source or locate(config)
    key = {
        "source": source["kind"],
        "fingerprint": source["fingerprint"],
        "grayscale": config.data.get("grayscale", "lra"),
    }
    return cache.entry_path(config, "image", key)


def _build(source: dict[str, Any], method: str, fix: str):
    def build(writer: cache.Writer) -> dict[str, Any]:
        sizes = {}
        for split in ("train", "test"):
            rgb, labels = _read_split(source, split, fix)
            if not len(rgb):
                raise DataError(f"CIFAR-10 {split} split is empty\n  to fix: {fix}")
            bad = sorted(set(np.unique(labels).tolist()) - set(range(NUM_CLASSES)))
            if bad:
                raise DataError(f"CIFAR-10 {split} split has labels {bad}; expected 0..9\n  to fix: {fix}")
            r, g, b = rgb.reshape(len(rgb), 3, PIXELS).transpose(1, 0, 2)
            # cached as uint8 pixel values; tokens (+1), downsampling and padding happen at load
            writer.array(f"{split}.inputs", (len(rgb), PIXELS), np.uint8)[:] = grayscale(r, g, b, method)
            writer.array(f"{split}.labels", (len(rgb),), np.int32)[:] = labels
            writer.array(f"{split}.lengths", (len(rgb),), np.int32)[:] = PIXELS
            sizes[split] = len(rgb)
        return {
            "splits": ["train", "test"],
            "sizes": sizes,
            "source": source["kind"],
            "grayscale": method,
            "inputs": "uint8 grayscale pixel values (tokens are value + 1)",
        }

    return build


def _tokens(split: Split, name: str, rows: slice, factor: int, max_len: int) -> Split:
    pixels = downsample(np.asarray(split.inputs[rows]), factor)
    tokens = np.zeros((len(pixels), max_len), TOKEN_DTYPE)
    tokens[:, : pixels.shape[1]] = pixels
    tokens[:, : pixels.shape[1]] += 1
    lengths = np.full(len(pixels), pixels.shape[1], np.int32)
    return Split(name=name, inputs=tokens, labels=np.asarray(split.labels[rows]), lengths=lengths)


def load(config: ml_collections.ConfigDict) -> TaskData:
    max_len = int(config.data.max_len)
    factor = int(config.data.get("image_downsample", 1))
    method = config.data.get("grayscale", "lra")
    if method not in GRAYSCALE:
        raise InputError(f"config.data.grayscale={method!r}: valid values are {', '.join(GRAYSCALE)}")
    if factor < 1 or SIDE % factor:
        raise InputError(f"config.data.image_downsample={factor} must divide {SIDE} (1, 2, 4, 8, 16, 32)")
    seq_len = (SIDE // factor) ** 2
    if max_len < seq_len:
        raise InputError(
            f"config.data.max_len={max_len} is shorter than the {seq_len} pixels of a "
            f"{SIDE // factor}x{SIDE // factor} image: set config.data.max_len={seq_len} or raise "
            f"config.data.image_downsample (4 gives 64 tokens, 2 gives 256)"
        )
    fraction = float(config.data.get("val_fraction", 0.1))
    if not 0.0 < fraction < 1.0:
        raise InputError(f"config.data.val_fraction={fraction} must be in (0, 1)")
    source = locate(config)
    fix = fix_message(data_dir(config.get("data_dir")))
    splits = cache.build_or_load(
        cache_entry(config, source),
        _build(source, method, fix),
        f"CIFAR-10 ({source['kind']}, grayscale {method})",
        VOCAB_SIZE - 1,
        NUM_CLASSES,
    )  # cached: pixels 0..255 (tokens: pixel + 1)
    train, test = splits["train"], splits["test"]
    n_train = len(train) - int(round(fraction * len(train)))
    return TaskData(
        train=_tokens(train, "train", slice(0, n_train), factor, max_len),
        validation=_tokens(train, "validation", slice(n_train, len(train)), factor, max_len),
        test=_tokens(test, "test", slice(0, len(test)), factor, max_len),
        vocab_size=VOCAB_SIZE,
        num_classes=NUM_CLASSES,
        max_len=max_len,
        dual=False,
    )
