"""Setting up a run before anything compiles: the checks that can fail on bad input, each seed's
workdir and lock, and each seed's resume decision (lra.training.resume) taken together.

lra.training.loop calls these in order (``prepare``, ``open_runs``, ``plan_seeds``) and trains the
seeds ``plan_seeds`` leaves; nothing here compiles or trains.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from lra.data import TaskData, load_task
from lra.errors import InputError
from lra.model import build_model
from lra.training import cpu_speed, resume
from lra.training.checkpoints import Checkpoints
from lra.training.memory_estimate import check_before_data, check_fits
from lra.training.run_errors import RunStateError, StorageError
from lra.training.run_files import MetricsLog, append_session, config_to_dict, remove_run, write_json_atomic
from lra.training.seeds import seed_command, seed_config
from lra.training.validation import validate_config
from lra.training.workdir_lock import WorkdirLock


@dataclasses.dataclass
class SeedRun:
    """One seed of the program: its own config, workdir, lock and files."""

    position: int  # place among the config's seeds (result order)
    config: ml_collections.ConfigDict  # seed=k, seeds=(): the single-seed run's config
    workdir: Path
    checkpoints: Checkpoints
    lock: WorkdirLock | None
    label: str  # "seed k: " in a bundle, "" alone
    index: int = -1  # place on the seed axis of the compiled step (finished seeds are not on it)
    plan: resume.ResumePlan = dataclasses.field(init=False)  # set by the program before anything reads it
    log: MetricsLog = dataclasses.field(init=False)  # opened before the seed trains
    stopped: str | None = None  # why the seed stopped early (a NaN); None while it trains

    @property
    def seed(self) -> int:
        return int(self.config.seed)


def check_workdir_path(workdir: Path) -> None:
    """A workdir that cannot be a directory fails here, before data loading."""
    for parent in (workdir, *workdir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise StorageError(workdir, NotADirectoryError(f"{parent} is a file, not a directory"))
            break


DEEP_MODEL_BLOCKS = 64  # deeper than any paper's encoder: its trace is long enough to say so (issue 52 O10)


def prepare(config: ml_collections.ConfigDict, workdirs: list[Path]) -> tuple[TaskData, Any, Any]:
    """Everything that can fail on bad input, before a workdir is touched or anything compiled:
    config, workdir paths, data, shapes and whether they fit the device."""
    validate_config(config, num_devices=jax.device_count())
    for workdir in workdirs:
        check_workdir_path(workdir)
    check_before_data(config, num_seeds=len(workdirs))  # a billion examples or positions: refused before generating
    data = load_task(config)
    if data.max_len > config.model.max_len:
        raise InputError(
            f"task {config.task} has sequences of length {data.max_len} > config.model.max_len="
            f"{config.model.max_len}: raise config.model.max_len"
        )
    model = build_model(config.model, data.vocab_size, data.num_classes, data.dual)
    sample = np.zeros((1,) + data.train.inputs.shape[1:], np.int32)
    if config.model.num_layers > DEEP_MODEL_BLOCKS:  # tracing is per block: 100,000 blocks took minutes, silently
        print(
            f"lra.train: tracing a model of {config.model.num_layers:,} blocks to check its size before "
            f"anything compiles (its time grows with the depth; Ctrl-C stops it)",
            file=sys.stderr,
            flush=True,
        )
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), sample)["params"])  # traces, no compile
    check_fits(shapes, config, data.max_len, data.dual, num_seeds=len(workdirs))
    return data, model, shapes


def open_workdir(workdir: Path, primary: bool) -> WorkdirLock | None:
    """Create ``workdir`` and take its lock (the primary process; the others write nothing)."""
    if not primary:
        return None
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(workdir, e) from None
    return WorkdirLock(workdir).acquire()


def remove_previous_runs(runs: list[SeedRun]) -> None:
    """--start_over: delete every seed's previous run. Called once every seed's lock is held, so a
    seed held by another process refuses the command before any seed's run is deleted (D1). A folder
    that is not this suite's run (``foreign_problem``) is refused before anything is deleted (U1)."""
    from lra.training.run_config import foreign_problem

    for run in runs:
        foreign = foreign_problem(run.workdir)
        if foreign:
            raise RunStateError(
                f"--start_over refused: {run.workdir} is not a run of this suite ({foreign}); nothing was "
                "deleted. Pass another --workdir"
            )
    for run in runs:
        removed = remove_run(run.workdir)
        if removed:
            print(f"--start_over: removed {', '.join(removed)} from {run.workdir}", file=sys.stderr, flush=True)


def inherit_bucket_order(run: SeedRun) -> None:
    """A seed of a length-bucketed bundle, resumed alone (``scripts/sweep.py --group-seeds off``, a
    rerun of one seed): its config.json records the bundle's shared bucket order
    (``data.bucket_order_seed``), which this command leaves at -1 (the run's own seed). Take the
    recorded one, saying so: the run is the same and resumes exactly (issue 26 U2)."""
    config = run.config
    if len(config.data.buckets) == 0 or config.data.bucket_order_seed >= 0:
        return
    try:
        recorded = json.loads((run.workdir / "config.json").read_text())["data"]["bucket_order_seed"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no config.json, or a damaged one: check_workdir reports it
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 0:
        with config.unlocked():
            config.data.bucket_order_seed = recorded
        print(
            f"{run.workdir}: data.bucket_order_seed={recorded} taken from its config.json (the bucket order of the "
            f"bundle it trained in); this run resumes with it",
            file=sys.stderr,
            flush=True,
        )


def open_runs(
    config: ml_collections.ConfigDict,
    seeds: Sequence[int],
    workdirs: list[Path],
    primary: bool,
    start_over: bool,
    runs: list[SeedRun],
) -> None:
    """Every seed's workdir and lock, appended to ``runs`` as each is taken (the caller's list, so
    its ``finally`` releases the locks taken before a refusal); then --start_over's deletion, and a
    single seed's recorded bucket order."""
    for index, (seed, path) in enumerate(zip(seeds, workdirs, strict=False)):  # every lock first: then change anything
        lock = open_workdir(path, primary)
        label = f"seed {seed}: " if len(seeds) > 1 else ""
        runs.append(SeedRun(index, seed_config(config, seed), path, Checkpoints(path), lock, label=label))
    if start_over and primary:
        remove_previous_runs(runs)
    for run in runs:
        if len(runs) == 1 and not start_over:
            inherit_bucket_order(run)
        run.checkpoints.config = config_to_dict(run.config)


def projection_warning(config: ml_collections.ConfigDict) -> str | None:
    """What the progress bar's one-time projection says about a paper-scale run on a CPU (days, where
    the ``cpu`` preset takes minutes); None elsewhere: the ETA is enough."""
    if config.preset != "paper" or jax.default_backend() != "cpu":
        return None
    return "on this CPU (paper scale: the :cpu preset trains in minutes; an accelerator: docs/gpu_runbook.md)"


def seed_fix(config: ml_collections.ConfigDict, run: SeedRun) -> str:
    """What a refusal of one seed of a bundle advises: that seed's own command with --start_over
    (issue 26 D2). --start_over on the bundle's command would delete every seed's run, the
    finished ones too."""
    return (
        f"start this seed over alone with `{seed_command(config, run.seed, run.workdir, start_over=True)}` "
        f"(the other seeds' runs are kept), then rerun the bundle's command; --start_over on the bundle's "
        f"command would delete every seed's run, finished ones included"
    )


def common_start(config: ml_collections.ConfigDict, runs: list[SeedRun]) -> int | None:
    """The step every training seed resumes from (None: all start fresh).

    Seeds saved together normally share their newest checkpoint; a kill between two seeds'
    saves leaves one a save ahead, and it steps back to the others' step (it keeps two, and
    replays the same batches). A kill between the seeds' first (step-0) saves leaves some seeds
    without a checkpoint: all start fresh (a step-0 checkpoint is the initial state, which a fresh
    start draws again, identically). Seeds with no common checkpoint cannot share one program."""
    steps = {run.plan.step for run in runs}
    if len(steps) == 1:
        return steps.pop()
    if steps == {None, 0}:  # killed between the seeds' step-0 saves: step 0 is the initial state, drawn again
        return None
    if None not in steps:
        lowest = min(step for step in steps if step is not None)  # (None is not among them)
        if all(lowest in run.checkpoints.steps("latest") for run in runs):
            for run in runs:
                run.checkpoints.verify("latest", lowest)
            return lowest
    where = ", ".join(f"{run.workdir} at step {run.plan.step or 0}" for run in runs)
    commands = "; ".join(f"`{seed_command(config, run.seed, run.workdir)}`" for run in runs)
    raise RunStateError(
        f"the seeds' workdirs are at different steps with no checkpoint in common ({where}), so they "
        f"cannot train in one program. Nothing was changed: run each seed alone with its own command "
        f"({commands}), then rerun this command (finished seeds are skipped); or use a new --workdir."
    )


def plan_seeds(
    config: ml_collections.ConfigDict, all_runs: list[SeedRun], primary: bool
) -> tuple[dict[int, dict[str, Any]], list[SeedRun], int | None]:
    """Each seed's resume decision (every refusal raised before anything is written): the finished
    seeds' results by position, the seeds that train (their workdirs readied: resume.apply,
    config.json, the session, the metrics log), and the step they resume from (None: fresh)."""
    bundle = len(all_runs) > 1
    for run in all_runs:
        fix = seed_fix(config, run) if bundle else None
        run.plan = resume.plan_resume(run.workdir, run.config, run.checkpoints, fix=fix)
    results: dict[int, dict[str, Any]] = {}
    runs = []
    for run in all_runs:
        if run.plan.result is not None:
            resume.report_damaged(run.plan, run.checkpoints, set_aside=False)
            print(f"{run.workdir} already holds a finished run; its result.json is unchanged.", flush=True)
            results[run.position] = run.plan.result
        else:
            runs.append(run)
    if not runs:
        return results, runs, None
    start = common_start(config, runs)
    for run in runs:
        if run.plan.step is not None and start is not None and run.plan.step != start:
            print(
                f"{run.workdir}: resuming from step {start} with the other seeds (its newer checkpoint "
                f"at step {run.plan.step} was a save ahead; the same steps are replayed)",
                file=sys.stderr,
                flush=True,
            )
    for i, run in enumerate(runs):
        run.index = i
        if primary:
            resume.apply(run.plan, run.workdir, run.checkpoints)
            write_json_atomic(run.workdir / "config.json", config_to_dict(run.config))
            append_session(run.workdir, start or 0, {"speed_settings": cpu_speed.settings()})
        run.log = MetricsLog(run.workdir / "metrics.jsonl")
    return results, runs, start
