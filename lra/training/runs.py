"""Each seed's run, built in one place before anything compiles: the seeds and their workdirs, the checks,
locks and resume decisions.

``set_up_runs`` (the loop's one call) finds the seeds and their workdirs, runs lra.training.checks.prepare (all that
can fail on bad input: config fields and names, data, shapes, memory), then ``open_runs`` (workdirs, locks) and
``plan_seeds`` (resume decisions, lra.training.checkpoints); nothing here compiles. With ``--config.seeds=0,1,2``
each seed is a run of its own, with exactly its single-seed command's config, workdir and files (docs/design.md,
Seeds).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from lra import cpu_speed
from lra.data import TaskData
from lra.errors import RunStateError, StorageError
from lra.training import checkpoints
from lra.training.checkpoints import Checkpoints, ResumePlan
from lra.training.checks import prepare
from lra.training.provenance import append_session
from lra.training.run_files import (
    MetricsLog,
    WorkdirLock,
    config_to_dict,
    remove_run,
    slug,
    write_json_atomic,
)


# -- each seed's run: workdir, lock and resume decision, before anything compiles ----------------------------
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
    plan: ResumePlan = dataclasses.field(init=False)  # set by the program before anything reads it
    log: MetricsLog = dataclasses.field(init=False)  # opened before the seed trains
    stopped: str | None = None  # why the seed stopped early (a NaN); None while it trains

    @property
    def seed(self) -> int:
        return int(self.config.seed)


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
    """--start_over, once every lock is held: delete every seed's run, or refuse a foreign folder deleting nothing."""
    from lra.training.run_files import foreign_problem

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
    """A length-bucketed bundle's seed resumed alone, with ``data.bucket_order_seed`` left at -1, takes the
    bundle's order recorded in its config.json, saying so: the same run, resumed exactly."""
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
    """Every seed's workdir and lock, appended to ``runs`` (the caller's list, whose ``finally`` releases them)
    before anything changes; then --start_over's deletion and a single seed's recorded bucket order."""
    for index, (seed, path) in enumerate(zip(seeds, workdirs, strict=False)):
        own = seed_config(config, seed)
        lock = open_workdir(path, primary)
        label = f"seed {seed}: " if len(seeds) > 1 else ""
        runs.append(SeedRun(index, own, path, Checkpoints(path), lock, label=label))
    if start_over and primary:
        remove_previous_runs(runs)
    for run in runs:
        if len(runs) == 1 and not start_over:
            inherit_bucket_order(run)
        run.checkpoints.config = config_to_dict(run.config)


def seed_fix(config: ml_collections.ConfigDict, run: SeedRun) -> str:
    """A bundle's seed refused: its own command with --start_over (on the bundle it deletes every seed's run)."""
    return (
        f"start this seed over alone with `{seed_command(config, run.seed, run.workdir, start_over=True)}` "
        f"(the other seeds' runs are kept), then rerun the bundle's command; --start_over on the bundle's "
        f"command would delete every seed's run, finished ones included"
    )


def common_start(config: ml_collections.ConfigDict, runs: list[SeedRun]) -> int | None:
    """The step every training seed resumes from (None: fresh; docs/design.md, Seeds). A seed a save ahead steps
    back (it keeps two); after a kill between the step-0 saves all start fresh (step 0 is the initial state, drawn
    again identically); seeds with no common checkpoint are refused."""
    steps = {run.plan.step for run in runs}
    if len(steps) == 1:
        return steps.pop()
    if steps == {None, 0}:  # killed between the seeds' step-0 saves
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
    """Each seed's resume decision, every refusal before anything is written: the finished seeds' results by
    position, the seeds that train (workdirs readied), and the step they resume from (None: fresh)."""
    bundle = len(all_runs) > 1
    for run in all_runs:
        fix = seed_fix(config, run) if bundle else None
        run.plan = checkpoints.plan_resume(run.workdir, run.config, run.checkpoints, fix=fix)
    results: dict[int, dict[str, Any]] = {}
    runs = []
    for run in all_runs:
        if run.plan.result is not None:
            checkpoints.report_damaged(run.plan, run.checkpoints, set_aside=False)
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
            checkpoints.apply(run.plan, run.workdir, run.checkpoints)
            write_json_atomic(run.workdir / "config.json", config_to_dict(run.config))
            append_session(run.workdir, start or 0, {"speed_settings": cpu_speed.settings()})
        run.log = MetricsLog(run.workdir / "metrics.jsonl")
    return results, runs, start


@dataclasses.dataclass
class RunSetup:
    """What :func:`set_up_runs` hands the loop."""

    data: TaskData
    model: Any
    param_shapes: Any
    results: dict[int, dict[str, Any]]
    training: list[SeedRun]
    start: int | None


def set_up_runs(
    config: ml_collections.ConfigDict,
    workdir: str | Path | None,
    start_over: bool,
    primary: bool,
    runs: list[SeedRun],
) -> RunSetup:
    """Every seed's run (module docstring); locks go into ``runs``, which the caller's ``finally`` releases."""
    seeds = run_seeds(config)
    workdirs = seed_workdirs(config, workdir)
    data, model, param_shapes = prepare(config, workdirs)
    open_runs(config, seeds, workdirs, primary, start_over, runs)
    results, training, start = plan_seeds(config, runs, primary)
    return RunSetup(data, model, param_shapes, results, training, start)


# -- each seed's config, workdir and own command -------------------------------------------------------------
# this lra.train process's arguments (lra.train's main), for seed_command; None when called from Python
_command_line: list[str] | None = None

# Flags a seed's own command replaces (the bundle's seeds, where it writes, what it deletes).
_REPLACED = (
    "--config.seeds",
    "--config.seed",
    "--config.data.bucket_order_seed",
    "--workdir",
    "--start_over",
    "--nostart_over",
    "--profile",
)


def set_command_line(argv: list[str] | None) -> None:
    """Record this process's ``python -m lra.train`` arguments (``argv[1:]``) for :func:`seed_command`."""
    global _command_line
    _command_line = None if argv is None else list(argv[1:])


def seed_command(config: ml_collections.ConfigDict, seed: int, workdir: Path, start_over: bool = False) -> str:
    """The exact command that runs seed ``seed`` alone in ``workdir``: the bundle's command with
    ``--config.seed``, ``--workdir`` and the shared ``data.bucket_order_seed`` where it applies (the same run,
    still resumable with the bundle). Called from Python, the config file is a placeholder."""
    args: list[str] = []
    if _command_line is None:
        args = ["--config=<this config file>"]
    else:
        skip = False
        for arg in _command_line:
            if skip:
                skip = False
                continue
            name = arg.split("=", 1)[0]
            if name in _REPLACED:
                skip = "=" not in arg and name not in ("--start_over", "--nostart_over")
                continue
            args.append(arg)
    args += [f"--config.seed={int(seed)}"]
    own = seed_config(config, seed)
    if own.data.bucket_order_seed >= 0:
        args += [f"--config.data.bucket_order_seed={int(own.data.bucket_order_seed)}"]
    args += [f"--workdir={workdir}"]
    if start_over:
        args += ["--start_over"]
    return shlex.join(["python", "-m", "lra.train", *args])


def run_seeds(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The seeds a config trains: ``config.seeds`` if given, else ``(config.seed,)``."""
    seeds = tuple(config.get("seeds", ()) or ())
    return seeds if seeds else (int(config.seed),)


def seed_config(config: ml_collections.ConfigDict, seed: int) -> ml_collections.ConfigDict:
    """What ``--config.seed=<seed>`` gives, except that with length buckets the seeds of one program share the
    first seed's ``data.bucket_order_seed`` so their batches stack without padding (docs/design.md, Seeds)."""
    seeds = run_seeds(config)
    c = config.copy_and_resolve_references()
    with c.unlocked():
        c.seed = int(seed)
        c.seeds = ()
        if len(seeds) > 1 and len(c.data.buckets) > 0 and c.data.bucket_order_seed < 0 and seed != seeds[0]:
            c.data.bucket_order_seed = int(seeds[0])
    return c


def default_workdir(config: ml_collections.ConfigDict) -> Path:
    """``runs/<task>_<variant>[_<preset>]/seed<k>``: distinct variants never share a workdir."""
    preset = "" if config.preset == "paper" else f"_{slug(str(config.preset))}"
    # every part is a slug: no name a config holds (a preset "/../../x") leads outside runs/
    return Path("runs") / f"{slug(str(config.task))}_{slug(config.variant)}{preset}" / f"seed{int(config.seed)}"


def seed_workdirs(config: ml_collections.ConfigDict, workdir: str | Path | None) -> list[Path]:
    """The default layout; or, with ``--workdir W``, W for one seed and ``W/seed<k>`` for several."""
    seeds = run_seeds(config)
    if workdir is None:
        return [default_workdir(seed_config(config, s)) for s in seeds]
    if len(seeds) == 1:
        return [Path(workdir)]
    return [Path(workdir) / f"seed{s}" for s in seeds]
