"""AAN citation matching at byte level (LRA "Retrieval", the papers' "Matching"): label 1 when one cites the other.

The release's ``lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv`` (an extra ``lra_release/`` level is
accepted), read as LRA does (``make_csv_dataset(header=False, field_delim='\\t', use_quote_delim=False)``): no
header, lines ``label \\t id1 \\t id2 \\t text1 \\t text2``, quotes ordinary, label ``0``/``1``/``0.0``/``1.0``.
Texts are bytes literals (``b'...'``) that LRA byte-encoded as they stand, and so do we unless ``aan_unescape``.
Tokens: byte + 1, ``max_len`` per document (4000 in Table 2): inputs N x 2 x max_len, lengths N x 2."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from lra.data import bytes_tokenizer, cache
from lra.data.paths import data_dir
from lra.data.types import DataError, TaskData
from lra.errors import InputError

NUM_CLASSES = 2
FILES = {"train": "new_aan_pairs.train.tsv", "validation": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}
EXPECTED_SIZES = {"train": 147_086, "validation": 18_090, "test": 17_437}
URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
FIELDS = 5


def fix_message(root: Path) -> str:
    return (
        f"run `python -m lra.data download matching --data_dir {root}` (downloads, verifies, extracts and "
        f"prepares it), or by hand: download the LRA release ({URL}, about 7 GB) and extract it into {root} "
        f"(mkdir -p {root} && tar xzf lra_release.gz -C {root}, giving {root}/lra_release/tsv_data/{FILES['train']}), "
        f"then run `python -m lra.data prepare matching --data_dir {root}`"
    )


def locate(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Find the three TSV files (cheap: stats only); a DataError naming the missing path."""
    root = data_dir(config.get("data_dir"))
    candidates = [root / "lra_release" / "tsv_data", root / "lra_release" / "lra_release" / "tsv_data"]
    folder = next((c for c in candidates if all((c / f).is_file() for f in FILES.values())), None)
    if folder is None:
        partial = next((c for c in candidates if c.is_dir()), candidates[0])
        missing = next(partial / f for f in FILES.values() if not (partial / f).is_file())
        raise DataError(f"AAN matching data not found: {missing} is missing\n  to fix: {fix_message(root)}")
    files = {s: folder / f for s, f in FILES.items()}
    return {"kind": "lra_release", "files": files, "fingerprint": cache.file_fingerprint(files.values())}


def count_lines(path: Path) -> int:
    """Lines in a file (a last line without a newline counts), reading 16 MB blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _label(field: bytes, where: str, fix: str) -> int:
    try:
        value = float(field)
    except ValueError:
        value = -1.0
    if value not in (0.0, 1.0):
        raise DataError(f"{where}: label {field[:20]!r} is not 0 or 1\n  to fix: {fix}")
    return int(value)


def _unescape(field: bytes, where: str, fix: str) -> bytes:
    try:
        value = ast.literal_eval(field.decode("ascii"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError):
        value = None
    if not isinstance(value, bytes):
        raise DataError(
            f"{where}: aan_unescape is set but the text {field[:30]!r}... is not a bytes literal" f"\n  to fix: {fix}"
        )
    return value


def _fill(
    path: Path, n: int, inputs: np.ndarray, lengths: np.ndarray, labels: np.ndarray, unescape: bool, fix: str
) -> None:
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            where = f"{path}:{i + 1}"
            if i >= n:
                raise DataError(f"{where}: the file grew while it was read\n  to fix: rerun the command")
            fields = line.rstrip(b"\n").rstrip(b"\r").split(b"\t")
            if len(fields) != FIELDS:
                raise DataError(
                    f"{where}: expected {FIELDS} tab-separated fields (label, id1, id2, text1, "
                    f"text2), found {len(fields)}\n  to fix: the file is damaged or not an AAN "
                    f"pairs file; {fix}"
                )
            labels[i] = _label(fields[0], where, fix)
            for j, text in enumerate(fields[3:]):
                lengths[i, j] = bytes_tokenizer.encode_into(
                    _unescape(text, where, fix) if unescape else text, inputs[i, j]
                )
            if (i + 1) % 50_000 == 0:
                cache.log(f"  {path.name}: {i + 1}/{n} lines")


def cache_entry(config: ml_collections.ConfigDict, source: dict[str, Any] | None = None) -> Path:
    source = source or locate(config)
    key = {
        "source": source["kind"],
        "fingerprint": source["fingerprint"],
        "max_len": int(config.data.max_len),
        "unescape": bool(config.data.get("aan_unescape", False)),
    }
    return cache.entry_path(config, "matching", key)


def _build(source: dict[str, Any], max_len: int, unescape: bool, fix: str):
    def build(writer: cache.Writer) -> dict[str, Any]:
        sizes = {}
        for split, path in source["files"].items():
            n = count_lines(path)
            if n == 0:
                raise DataError(f"{path} is empty\n  to fix: {fix}")
            inputs = writer.array(f"{split}.inputs", (n, 2, max_len), bytes_tokenizer.TOKEN_DTYPE)
            lengths = writer.array(f"{split}.lengths", (n, 2), np.int32)
            labels = writer.array(f"{split}.labels", (n,), np.int32)
            _fill(path, n, inputs, lengths, labels, unescape, fix)
            sizes[split] = n
        return {
            "splits": list(FILES),
            "sizes": sizes,
            "source": source["kind"],
            "max_len": max_len,
            "unescape": unescape,
        }

    return build


def load(config: ml_collections.ConfigDict) -> TaskData:
    max_len = int(config.data.max_len)
    if max_len < 1:
        raise InputError(f"config.data.max_len={max_len} must be positive")
    unescape = bool(config.data.get("aan_unescape", False))
    source = locate(config)
    fix = fix_message(data_dir(config.get("data_dir")))
    splits = cache.build_or_load(
        cache_entry(config, source),
        _build(source, max_len, unescape, fix),
        f"AAN pairs (max_len {max_len} per document)",
        bytes_tokenizer.VOCAB_SIZE,
        NUM_CLASSES,
    )
    return TaskData(
        train=splits["train"],
        validation=splits["validation"],
        test=splits["test"],
        vocab_size=bytes_tokenizer.VOCAB_SIZE,
        num_classes=NUM_CLASSES,
        max_len=max_len,
        dual=True,
    )
