"""Training: the loop and everything a run needs, in eight modules. Read in this order:

- ``loop``: ``train_and_evaluate`` and the ``Trainer`` (one seed or many, one code path): its progress display,
  each split's evaluation, the ``--profile`` window; result.json's contents.
- ``step``: the compiled, vmapped train/eval steps and their state; AdamW and Table 2's schedule; microbatches.
- ``runs``: each seed's run set up before anything compiles: seeds, workdirs, locks, resume.
- ``checks``: everything bad input can fail, before a workdir is touched: config fields, names, data, memory.
- ``checkpoints``: sealed ``latest``/``best`` checkpoints, and what a rerun may do with a workdir.
- ``run_files``: config.json, the lock, metrics.jsonl, result.json, sessions, export; the one atomic writer (no jax).
- ``hosts``: multi-host joining and the data mesh; SIGTERM/SIGINT and the stop all hosts agree on; child signals.
- ``provenance``: sealed JSON, record seals and corrections, the start commit and code trees.

Beside it: ``lra.errors`` (error classes, exit codes), ``lra.cpu_speed`` (bit-identical CPU speed settings),
``lra.memory_stats`` (the memory families' statistics, logged with ``config.log_memory_stats``), ``lra.train``
(the command line; turns on JAX's persistent compilation cache).
"""

from typing import Any

from lra.errors import Interrupted, NonFiniteLossError

__all__ = ["Interrupted", "NonFiniteLossError", "train_and_evaluate"]


def __getattr__(name: str) -> Any:
    """Lazy, so importing a light submodule (run_files, for the tables) imports no jax, flax or models."""
    if name == "train_and_evaluate":
        from lra.training.loop import train_and_evaluate

        return train_and_evaluate
    raise AttributeError(f"module 'lra.training' has no attribute {name!r}")
