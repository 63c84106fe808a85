"""Task registry: name -> loader ``load(config) -> TaskData`` (docs/design.md, Data; docs/data.md).

Loaders are imported lazily, so a task's heavy dependencies are needed only when it runs. Reading order:
- ``types``: the contract (``Split``, ``TaskData``, ``PAD_ID``, ``DataError``); ``paths``: the data dir.
- ``batching``: batches as pure functions of (seed, step), bucketed by length.
- ``cache``: tokenised splits on disk, memory-mapped by every later load.
- One loader per task: ``listops``, ``text``, ``matching``, ``image``, ``pathfinder`` (and Path-X), with
  ``bytes_tokenizer``, ``tfds_reader`` and ``tfrecord`` (tensorflow-datasets folders without TensorFlow).
  ListOps' parts: ``listops_format``, ``listops_gen``, ``listops_store``, ``listops_reader``; Pathfinder's:
  ``pathfinder_gen`` (the generator), ``pathfinder_write`` (the release layout).
- ``download``: an official archive fetched (pooch, resumed), verified and extracted; its steps: ``archives``,
  ``http_fetch``, ``byte_progress``, ``archive_verify``, ``tar_extract``, ``stale_extractions``.
- ``prepare``: the command line ``python -m lra.data prepare|download`` (``__main__``).

Loaders and download import nothing of lra outside this package but ``lra.errors`` and ``lra.console``;
``prepare`` also reads ``lra.defaults`` (tests/test_layering.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import ml_collections

from lra.data.types import DataError, Split, TaskData
from lra.errors import InputError

# name -> "module:function"
_LOADERS: dict[str, str] = {
    "listops": "lra.data.listops:load",
    "text": "lra.data.text:load",
    "matching": "lra.data.matching:load",
    "image": "lra.data.image:load",
    "pathfinder": "lra.data.pathfinder:load",
    "pathx": "lra.data.pathfinder:load",
}
TASKS = tuple(_LOADERS)


def get_loader(task: str) -> Callable[[ml_collections.ConfigDict], TaskData]:
    """The loader of ``task``; a ValueError listing the valid tasks for an unknown name."""
    if task not in _LOADERS:
        raise InputError(f"unknown task {task!r}; valid tasks: {', '.join(sorted(_LOADERS))}")
    module, func = _LOADERS[task].split(":")
    return getattr(importlib.import_module(module), func)


def task_shapes(task: str) -> tuple[int, int, bool]:
    """(vocab size, classes, dual) from the loaders' constants, reading no data (preflight, step benchmark)."""
    from lra.data import bytes_tokenizer, image, listops, matching, pathfinder, text

    table = {
        "listops": (len(listops.VOCAB), listops.NUM_CLASSES, False),
        "text": (bytes_tokenizer.VOCAB_SIZE, text.NUM_CLASSES, False),
        "matching": (bytes_tokenizer.VOCAB_SIZE, matching.NUM_CLASSES, True),
        "image": (image.VOCAB_SIZE, image.NUM_CLASSES, False),
        "pathfinder": (pathfinder.VOCAB_SIZE, pathfinder.NUM_CLASSES, False),
        "pathx": (pathfinder.VOCAB_SIZE, pathfinder.NUM_CLASSES, False),
    }
    if task not in table:
        raise InputError(f"config.task={task!r}: no shapes known; known: {', '.join(table)}")
    return table[task]


def load_task(config: ml_collections.ConfigDict) -> TaskData:
    """Load ``config.task``; every split must be non-empty (an empty validation split selects on nothing)."""
    data = get_loader(config.task)(config)
    for name, split in data.splits().items():
        if len(split) == 0:
            raise DataError(
                f"task {config.task}: the {name} split under the data dir {config.data_dir or '(default)'} "
                f"has no examples; check or re-prepare its files (python -m lra.data prepare {config.task})"
            )
    return data


def missing_data(config: ml_collections.ConfigDict) -> str | None:
    """The loader's error saying why the data cannot be read, or None (cheap: ``locate`` stats paths)."""
    if config.task not in _LOADERS:
        raise InputError(f"unknown task {config.task!r}; valid tasks: {', '.join(sorted(_LOADERS))}")
    locate = getattr(importlib.import_module(_LOADERS[config.task].split(":")[0]), "locate", None)
    if locate is None:
        return None
    try:
        locate(config)
    except DataError as e:
        return str(e)
    return None


__all__ = ["DataError", "Split", "TaskData", "TASKS", "get_loader", "load_task", "missing_data"]
