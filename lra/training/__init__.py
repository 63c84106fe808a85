"""Training: the loop and everything a run needs, in eight modules. Read in this order:

- ``loop``: ``train_and_evaluate`` and the ``Trainer`` loop (one seed or many, one code path);
  result.json's contents.
- ``step``: the compiled, vmapped train/eval steps and the state they carry; the seed axis; AdamW
  and Table 2's schedule; microbatches.
- ``runs``: each seed's run built in one place before anything compiles (``set_up_runs``, the loop's
  one call): config checks, the memory check, data and model shapes, workdirs and locks, each seed's
  config, command and resume decision, the ``--profile`` window.
- ``checkpoints``: sealed ``latest``/``best`` checkpoints, and what a rerun may do with a workdir.
- ``run_files``: config.json, the workdir lock, metrics.jsonl, result.json, sessions and the record
  export; the suite's one atomic writer. Imports no jax (the tables and the audit read runs with it).
- ``metrics``: the bar, plain lines and TensorBoard; the memory families' degradation statistics,
  logged at each evaluation (``config.log_memory_stats``) and measured again by ``lra_lab.diagnose memory``.
- ``hosts``: multi-host initialisation and the data mesh; SIGTERM/SIGINT and the stop every host
  agrees on; commands that run commands pass signals on.
- ``provenance``: sealed JSON (checkpoints' and records' seals), corrections, the command and commit
  at a process's start, code trees.

Beside it: ``lra.errors`` (the error classes and their exit codes), ``lra.cpu_speed`` (the
bit-identical CPU speed settings, opted into by the loop and the runners), ``lra.train`` (the
command line, which also turns JAX's persistent compilation cache on).
"""

from typing import Any

from lra.errors import Interrupted, NonFiniteLossError

__all__ = ["Interrupted", "NonFiniteLossError", "train_and_evaluate"]


def __getattr__(name: str) -> Any:
    """``train_and_evaluate`` on first use: importing a light submodule (run_files, for the
    tables) must not import jax, flax and the models."""
    if name == "train_and_evaluate":
        from lra.training.loop import train_and_evaluate

        return train_and_evaluate
    raise AttributeError(f"module 'lra.training' has no attribute {name!r}")
