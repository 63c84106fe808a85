"""``python -m lra.data prepare TASK``: fetch (where possible), tokenise, cache, check, summarise (docs/data.md).

Sizes unlike the published ones warn (subsets are fine); broken invariants exit 1; a missing or malformed file exits
2 with a DataError naming the path and the fix."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

import ml_collections
import numpy as np

from lra.config_args import Override, split_config_args
from lra.data import cache, tfds_reader
from lra.data.types import PAD_ID, DataError, TaskData
from lra.defaults import apply_override, task_config
from lra.errors import InputError

# tasks whose missing data tensorflow-datasets can download: task -> tfds builder name
_TFDS = {"text": "imdb_reviews/plain_text", "image": "cifar10"}


# The config fields that decide the data prepare builds: the rest (model, training) are lra.train's.
PREPARE_FIELDS = ("data", "data_dir", "task", "seed")


def make_config(
    task: str,
    data_dir: str | None = None,
    max_len: int | None = None,
    overrides: Sequence[str] = (),
    fields: Sequence[Override] = (),
) -> ml_collections.ConfigDict:
    """The paper-scale config of ``task`` with the command line's data settings: ``fields`` from
    ``--config.FIELD=VALUE``, ``overrides`` the old spelling ``--set KEY=VALUE`` of ``data.KEY``."""
    config = task_config(task)
    if data_dir:
        config.data_dir = data_dir
    if max_len:
        config.data.max_len = max_len
        config.model.max_len = max_len
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--set expects KEY=VALUE (a config.data field; or --config.data.KEY=VALUE), got {item!r}")
        apply_override(config, f"data.{key.strip()}", value.strip())  # a misspelt field fails, naming it
    for dotted, text in fields:
        if dotted.split(".")[0] not in PREPARE_FIELDS:  # a model field changes nothing here
            raise InputError(
                f"--config.{dotted}={text}: prepare builds data only; it reads config.data.* and "
                f"{', '.join(f for f in PREPARE_FIELDS if f != 'data')} (give model and training fields to lra.train)"
            )
        try:
            apply_override(config, dotted, text)
        except InputError as e:
            raise InputError(f"--config.{dotted}={text}: {e}") from None
    return config


def _module(task: str):
    from lra.data import get_loader

    loader = get_loader(task)
    return importlib.import_module(loader.__module__)


def expected_sizes(task: str, config: ml_collections.ConfigDict) -> dict[str, int]:
    """Published split sizes, as keys of the loaded TaskData ("a+b" sums splits)."""
    module = _module(task)
    sizes = getattr(module, "EXPECTED_SIZES", None)
    if not sizes:
        return {}
    if task == "text" and config.data.get("lra_val_is_test", False):
        return dict(sizes)
    if "validation" not in sizes:  # validation is carved from train
        return {"train+validation": sizes["train"], "test": sizes["test"]}
    return dict(sizes)


def _row_ok(inputs: np.ndarray, length: np.ndarray, data: TaskData) -> bool:
    """Real tokens in 1..vocab_size-1 up to each document's length, padding after it."""
    for row, n in zip(inputs.reshape(-1, data.max_len), np.atleast_1d(length), strict=False):
        real, pad = row[:n], row[n:]
        if (real == PAD_ID).any() or (real >= data.vocab_size).any() or (pad != PAD_ID).any():
            return False
    return True


def check(data: TaskData, expected: dict[str, int], sample: int = 256) -> tuple[list[str], list[str]]:
    """(errors, warnings) about a loaded task; rows are spot-checked on an even sample."""
    errors, warnings = [], []
    splits = data.splits()
    for name, split in splits.items():
        n = len(split)
        if n == 0:
            errors.append(f"{name}: no examples")
            continue
        want = (n, 2, data.max_len) if data.dual else (n, data.max_len)
        if tuple(split.inputs.shape) != want:
            errors.append(f"{name}: inputs have shape {tuple(split.inputs.shape)}, expected {want}")
            continue
        labels, lengths = np.asarray(split.labels), np.asarray(split.lengths)
        if labels.min() < 0 or labels.max() >= data.num_classes:
            errors.append(f"{name}: labels span {labels.min()}..{labels.max()}, expected 0..{data.num_classes - 1}")
        if lengths.min() < 0 or lengths.max() > data.max_len:
            errors.append(f"{name}: lengths span {lengths.min()}..{lengths.max()}, expected 0..{data.max_len}")
        empty = int((lengths == 0).sum())
        if empty:
            warnings.append(f"{name}: {empty} empty document(s) (all padding)")
        bad = [
            i
            for i in np.unique(np.linspace(0, n - 1, min(n, sample)).astype(int))
            if not _row_ok(np.asarray(split.inputs[i]), lengths[i], data)
        ]
        if bad:
            errors.append(
                f"{name}: example {bad[0]} ({len(bad)} of {min(n, sample)} checked) has padding inside "
                f"its length, tokens after it, or ids >= vocab_size {data.vocab_size}"
            )
    for key, size in expected.items():
        got = sum(len(splits[s]) for s in key.split("+"))
        if got != size:
            warnings.append(f"{key}: {got} examples, the published dataset has {size}")
    return errors, warnings


def summary(data: TaskData, task: str, entry: Path | None) -> str:
    lines = [
        f"task {task}: vocab {data.vocab_size}, {data.num_classes} classes, max_len {data.max_len}, "
        f"{'two inputs' if data.dual else 'one input'}"
    ]
    if entry is not None:
        lines.append(f"cache: {entry}")
    lines.append(f"{'split':<11}{'examples':>9}  {'length p5/p50/p95/max':>24}  {'at max_len':>10}  labels (share %)")
    for name, split in data.splits().items():
        lengths = np.asarray(split.lengths).reshape(-1)
        labels = np.asarray(split.labels)
        counts = np.bincount(labels, minlength=data.num_classes) if len(labels) else np.zeros(data.num_classes)
        shares = " ".join(f"{c}:{100 * k / max(len(labels), 1):.1f}" for c, k in enumerate(counts))
        if len(lengths):
            p5, p50, p95 = np.percentile(lengths, [5, 50, 95]).astype(int)
            pct = f"{p5}/{p50}/{p95}/{lengths.max()}"
            at_max = f"{100 * np.mean(lengths >= data.max_len):.1f}%"
        else:
            pct, at_max = "-", "-"
        lines.append(f"{name:<11}{len(split):>9,}  {pct:>24}  {at_max:>10}  {shares}")
    return "\n".join(lines)


def prepare(
    config: ml_collections.ConfigDict, force: bool = False, download: bool = True
) -> tuple[TaskData, Path | None]:
    """Make sure the task's files exist (via tensorflow-datasets where it can), then load it (``force``: rebuild)."""
    task = config.task
    module = _module(task)
    locate = getattr(module, "locate", None)
    if locate is not None:
        try:
            locate(config)
        except DataError:
            if not (download and task in _TFDS and tfds_reader.try_download(_TFDS[task], module.tfds_dir(config))):
                raise
    entry = module.cache_entry(config) if hasattr(module, "cache_entry") else None
    if force and entry is not None:
        cache.remove_entry(entry)
    from lra.data import load_task

    return load_task(config), entry


def run(
    task: str,
    data_dir: str | None = None,
    max_len: int | None = None,
    overrides: Sequence[str] = (),
    force: bool = False,
    download: bool = True,
    fields: Sequence[Override] = (),
) -> int:
    """The ``prepare`` command for one task: 0 ok, 1 broken invariants, 2 missing or malformed data."""
    try:
        config = make_config(task, data_dir, max_len, overrides, fields)
        data, entry = prepare(config, force=force, download=download)
    except (InputError, TypeError) as e:  # DataError included; TypeError: ml_collections refusing a --set value's type
        print(f"error: {e}", file=sys.stderr)
        return 2
    errors, warnings = check(data, expected_sizes(task, config))
    print(summary(data, task, entry))
    for w in warnings:
        print(f"warning: {w}")
    for problem in errors:
        print(f"ERROR: {problem}")
    return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    from lra.data import TASKS, download

    parser = argparse.ArgumentParser(
        prog="python -m lra.data", description="Download and prepare the data of an LRA task."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="download (where possible), tokenise, cache and check one task")
    p.add_argument("task", choices=TASKS)
    p.add_argument("--data_dir", default=None, help="data folder (default: $LRA_DATA_DIR, else ~/.cache/lra)")
    p.add_argument("--max_len", type=int, default=None, help="tokens per document (default: the task's Table 2 value)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="old spelling of --config.data.KEY=VALUE, e.g. --set val_fraction=0.2",
    )
    p.add_argument("--force", action="store_true", help="rebuild the cache entry")
    p.add_argument("--no_download", action="store_true", help="never call tensorflow-datasets")
    download.add_parser(sub, TASKS)
    parser.epilog = p.epilog = (
        "Any config field: --config.FIELD=VALUE (repeatable), e.g. --config.data.val_fraction=0.2 "
        "(fields: lra/defaults.py)"
    )
    try:
        spec, fields, rest = split_config_args(sys.argv[1:] if argv is None else argv)
        if spec is not None:
            raise InputError("--config: prepare starts from the task's defaults; set fields with --config.FIELD=VALUE")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(rest)
    if args.command == "download":
        status = download.run(args)
        if status or args.no_prepare:
            return status
        for task in list(download.TASK_ARCHIVE) if args.task == "all" else [args.task]:
            status = max(status, run(task, args.data_dir, args.max_len, force=args.force, download=False))
        return status
    return run(
        args.task, args.data_dir, args.max_len, args.set, args.force, download=not args.no_download, fields=fields
    )
