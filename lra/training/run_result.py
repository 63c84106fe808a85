"""result.json: what one seed's finished run records (its test accuracy at the best-validation step,
its timing and provenance); lra.training.loop writes it, lra.reports and lra.reproduce read it."""

from __future__ import annotations

from typing import Any

import jax
import ml_collections

from lra.training import cpu_speed
from lra.training.run_files import read_sessions
from lra.training.run_setup import SeedRun


def seed_result(
    config: ml_collections.ConfigDict,
    run: SeedRun,
    test: dict[str, float],
    *,
    best_val: float,
    best_step: int,
    train_seconds: float,
    timed_steps: float,
    compile_seconds: float,
    num_params: int,
    commit: str,
    seeds_in_program: int,
) -> dict[str, Any]:
    """result.json's contents for ``run`` (``seeds_in_program`` > 1: recorded, the seeds trained together)."""
    first_session = (read_sessions(run.workdir) or [{"git_commit": commit}])[0]
    result = {
        "task": config.task,
        "attention": config.model.attention,
        "variant": config.variant,
        "seed": run.seed,
        "best_val_accuracy": best_val,
        "best_step": best_step,
        "test_accuracy": test["accuracy"],
        "test_loss": test["loss"],
        "num_train_steps": config.num_train_steps,
        "train_seconds": float(train_seconds),
        # Steps of the whole program timed without compilation (all seeds at once); a
        # resumed run counts the steps of each process.
        "steps_per_second": float(timed_steps / max(train_seconds, 1e-9)),
        "compile_seconds": compile_seconds,
        "num_params": num_params,
        "config_preset": config.preset,
        "device_kind": jax.devices()[0].device_kind,
        "num_devices": jax.device_count(),
        "jax_version": jax.__version__,
        "git_commit": commit,
        # Provenance of the start: the commit of the process that began the run (sessions.jsonl) and
        # the tree ids of the code it had on disk (absent from runs begun before they were recorded)
        "git_commit_start": first_session["git_commit"],
        **({"code_start": first_session["code_start"]} if "code_start" in first_session else {}),
        "speed_settings": cpu_speed.settings(),
    }
    if seeds_in_program > 1:
        result["seeds_in_program"] = seeds_in_program
    return result
