"""Training: the loop and everything a run needs. Read in this order:

- ``loop``: ``train_and_evaluate`` and the ``Trainer`` loop (one seed or many, one code path).
- ``run_setup``: before anything compiles: bad input refused, workdirs and locks, each seed's resume
  decision; ``run_result``: result.json's contents.
- ``steps``: the compiled, vmapped train/eval steps and the state they carry.
- ``seeds``: which seeds a config trains, their configs and workdirs, the seed axis.
- ``schedules``: AdamW and Table 2's learning-rate schedule.
- ``checkpoints`` (+ ``integrity``): checksummed ``latest``/``best`` checkpoints.
- ``resume``: what a rerun may do with an existing workdir; ``workdir_lock``: one process per workdir.
- ``run_files``: config.json, metrics.jsonl, result.json and the run records; a finished run's config.
- ``progress``: the bar, plain log lines and TensorBoard; ``profiling``: ``--profile``'s trace window.
- ``memory_stats``: the memory families' degradation statistics, logged at each evaluation
  (``config.log_memory_stats``) and measured again by ``lra.diagnose memory``.
- ``distributed``: multi-host initialisation and the data-parallel mesh.
- ``validation``: config checks before anything runs; ``memory_estimate``: refuse what cannot fit.
- ``stop_signals``, ``run_errors``: SIGTERM/SIGINT, and one exit code per kind of failure.
"""

from typing import Any

from lra.training.run_errors import Interrupted, NonFiniteLossError

__all__ = ["Interrupted", "NonFiniteLossError", "train_and_evaluate"]


def __getattr__(name: str) -> Any:
    """``train_and_evaluate`` on first use: importing a light submodule (run_files, for the
    tables) must not import jax, flax and the models."""
    if name == "train_and_evaluate":
        from lra.training.loop import train_and_evaluate

        return train_and_evaluate
    raise AttributeError(f"module 'lra.training' has no attribute {name!r}")
