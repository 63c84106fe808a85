"""What a rerun in an existing workdir may do: start, resume, report, regenerate, or refuse.

``plan_resume`` reads the workdir and raises before anything is written, so a refused command
changes nothing; ``apply`` then makes the few changes a plan needs, each one announced.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import ml_collections

from lra.training.checkpoints import Checkpoints, CorruptCheckpointError
from lra.training.run_errors import RunStateError
from lra.training.run_files import (
    WorkdirMismatchError,
    check_workdir,
    config_differences,
    config_digest,
    describe_differences,
    result_problem,
    run_traces,
)

START_OVER = (
    "use a new --workdir, or pass --start_over to delete this run's config, metrics, "
    "checkpoints and result and train from step 0"
)


@dataclasses.dataclass
class ResumePlan:
    step: int | None  # the newest intact latest checkpoint; None: a fresh run
    damaged: list[CorruptCheckpointError]  # newer latest checkpoints that failed their check
    result: dict[str, Any] | None  # result.json of this config's finished run
    result_problem: str | None  # why result.json (if there) is not that


def plan_resume(
    workdir: Path, config: ml_collections.ConfigDict, checkpoints: Checkpoints, fix: str | None = None
) -> ResumePlan:
    """Every reason to refuse ``workdir`` for ``config``, checked before anything is written.

    ``fix``: what a refusal advises instead of START_OVER (a seed of a bundle gets its own
    command: --start_over on the bundle would delete its other seeds' runs too)."""
    fix = fix or START_OVER
    check_workdir(workdir, config, fix=fix if fix is not START_OVER else None)
    step, damaged = checkpoints.newest_intact("latest")
    if step is None:
        traces = run_traces(workdir)
        if damaged:
            raise damaged[0].__class__(
                damaged[0].path,
                f"{damaged[0].reason}; no intact checkpoint in "
                f"{checkpoints.root / 'latest'} to fall back to. Nothing was changed: {fix}",
            )
        if traces:
            missing = (
                "checkpoints/ is missing" if not checkpoints.root.exists() else "checkpoints/latest holds no checkpoint"
            )
            raise RunStateError(
                f"workdir {workdir} holds a run ({', '.join(traces)}) but {missing}, so it cannot be "
                f"resumed, and training from step 0 would overwrite it. Nothing was changed: {fix}."
            )
    elif step > config.num_train_steps:
        raise RunStateError(
            f"config.num_train_steps={config.num_train_steps} is below the {step} steps this workdir "
            f"({workdir}) already trained: pass --config.num_train_steps={step} or more, or use a new "
            f"--workdir. Nothing was changed."
        )
    best = checkpoints.latest_step("best")
    if best is not None:
        try:
            checkpoints.verify("best", best)  # the test accuracy is measured on it: no fallback
        except CorruptCheckpointError as e:
            raise CorruptCheckpointError(
                e.path,
                f"{e.reason}; the test accuracy is measured on the best "
                f"checkpoint, so there is nothing to fall back to. Nothing was "
                f"changed: {fix}",
            ) from None
    for kind, at in (("latest", step), ("best", best)):
        if at is not None:
            check_saved_config(workdir, config, checkpoints, kind, at, fix)
    problem = result_problem(workdir / "result.json", config)
    result = None
    if problem is None and step == config.num_train_steps:
        result = json.loads((workdir / "result.json").read_text())
    return ResumePlan(step, damaged, result, problem)


def check_saved_config(
    workdir: Path, config: ml_collections.ConfigDict, checkpoints: Checkpoints, kind: str, step: int, fix: str
) -> None:
    """Refuse a checkpoint sealed by another config, or one whose config is unknown (saved before
    configs were sealed, and config.json is gone): resuming it would report its run under this
    config (issue 26 D3, a kill during --start_over)."""
    path = checkpoints.path(kind, step)
    saved = checkpoints.saved_config(kind, step)
    if saved is None:
        if not (workdir / "config.json").exists():
            raise RunStateError(
                f"checkpoint {path} records no config (it was saved by an older version) and {workdir}/config.json "
                f"is missing, so which config trained it is unknown. Nothing was changed: {fix}."
            )
        return  # config.json, checked above, stands for it
    if saved["config_digest"] == config_digest(config):
        return
    diffs = config_differences(saved["config"], config) or [
        ("config digest", saved["config_digest"], config_digest(config))
    ]
    raise WorkdirMismatchError(
        f"checkpoint {path} was saved by a run of a different config "
        f"({describe_differences(diffs, 'the checkpoint')}), so it cannot be resumed by this one. Nothing "
        f"was changed: rerun with the checkpoint's config to resume it; or {fix}."
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def report_damaged(plan: ResumePlan, checkpoints: Checkpoints, set_aside: bool) -> None:
    """Warn about each damaged latest checkpoint (and move it out of the way if ``set_aside``)."""
    for error in plan.damaged:
        assert plan.step is not None  # plan_resume refuses damaged checkpoints with no intact one to fall back to
        step = int(error.path.name)
        moved = f"; moved to {checkpoints.set_aside('latest', step)}" if set_aside else ""
        then = (
            f"resuming from the previous intact checkpoint {checkpoints.path('latest', plan.step)}"
            if step > plan.step
            else "a newer intact checkpoint is used"
        )
        _say(f"warning: {error}{moved}. {then[0].upper() + then[1:]}")


def apply(plan: ResumePlan, workdir: Path, checkpoints: Checkpoints) -> None:
    """Set damaged checkpoints and a stale or damaged result.json aside, saying so."""
    report_damaged(plan, checkpoints, set_aside=True)
    path = workdir / "result.json"
    # None: result.json is this config's valid result but the final checkpoint fell back (damaged): kept as it is
    if plan.result is None and plan.result_problem is not None and plan.result_problem != "missing":
        try:
            steps = json.loads(path.read_text())["num_train_steps"]
            aside = (
                path.with_name(f"result_{int(steps)}steps.json")
                if plan.result_problem.startswith("num_train_steps")
                else None
            )
        except (ValueError, KeyError, TypeError):
            aside = None
        if aside is None:
            aside = path.with_name("result.json.corrupt")
            _say(
                f"warning: {path} is not a valid result ({plan.result_problem}); moved to {aside}, "
                f"a new one is written from the best checkpoint when the run ends"
            )
        else:
            _say(
                f"{path} is the result of a {steps}-step run; it is kept as {aside} while this run "
                f"trains to its new num_train_steps"
            )
        os.replace(path, aside)
