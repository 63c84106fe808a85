"""Sweeps: named grids of task x attention variant x seed, expanded into runs and executed.

A grid expands into :class:`Run` objects (config file, option string, seed, workdir). A sweep
runs them one after another on this machine (:func:`run_sweep`), or writes a SLURM job-array
script whose task ``i`` runs run ``i`` (:func:`slurm_script`); ``scripts/sweep.py`` is the CLI.
The runs themselves (``Run``, ``expand``, ``status``) are ``sweep_runs``, the grids ``sweep_grids``,
the command line (parser, ``--config.FIELD=VALUE``) ``sweep_cli``; this module re-exports the runs' and grids' names.

Each run is a separate ``python -m lra.train`` process, not an in-process call of
``train_and_evaluate``: a crash, an out-of-memory kill or a leaked device buffer of one run then
cannot take the sweep down, every run starts from a clean JAX state, and the command a sweep
runs is exactly the one a user can copy to rerun a single run by hand. Locally the sweep is the
child's parent (:func:`subprocess_runner`); a SLURM array task execs into it (:func:`exec_run`).

Skipping and resuming come from the workdirs: a run whose ``result.json`` is a finished run's
(lra.train's own check, ``run_files.result_problem``) with the expected number of steps is
finished and skipped; any other run is started with the same command in the same workdir, which
resumes it from its latest checkpoint (lra.train's contract). A run whose workdir another process
holds (lra.train's exit 3, e.g. a second sweep on the same grid) is reported "in use, skipped":
the holder is training it, so it is neither a failure nor retried.

Every run's workdir also gets ``sweep_run.json`` (grid, preset, options, overrides), so the
results tables can state the overrides (e.g. a reduced ``num_train_steps``) their numbers used.

With ``group_seeds`` (``scripts/sweep.py --group-seeds on``; the default on GPU/TPU and in SLURM
scripts) the seeds of one setup are one run: one ``lra.train --config.seeds=0,1,2,3,4`` process
training them in one vmapped program, each seed in its usual ``seed<k>/`` workdir.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lra.console import clock
from lra.cpu_speed import PIN_VARIABLE, child_environment
from lra.papers.convluna import (
    CONVLUNA_REFERENCE_REVERTS,  # noqa: F401  (re-exported: lra_lab.reproduce.convluna reads it)
)
from lra.training.hosts import ChildSignals
from lra.training.run_files import slug, write_json_atomic  # noqa: F401  (slug: also lra_lab.reproduce's run folders)
from lra_lab.experiments.sweep_grids import (  # the grids; re-exported: lra_lab.reproduce reads GRIDS here
    GRIDS,  # noqa: F401
    Grid,  # noqa: F401
    Variant,  # noqa: F401
)
from lra_lab.experiments.sweep_runs import (  # a grid's runs; re-exported: callers read them here
    CONFIGS,  # noqa: F401
    PRESETS,  # noqa: F401
    REPO,
    Run,
    check_overrides,  # noqa: F401
    default_root,  # noqa: F401
    expand,  # noqa: F401
    expected_steps,  # noqa: F401
    run_config,  # noqa: F401
    run_fields,  # noqa: F401
    status,
)

INTERRUPTED = (130, 143)  # lra.train's exit codes after SIGINT / SIGTERM (checkpoint saved)
IN_USE = 3  # lra.train's exit code when another process holds the workdir (lra.errors.EXIT_LOCKED)


Runner = Callable[..., int]  # runner(run, log) -> exit code; with --jobs N also core=K


LANES = ChildSignals(
    "passing it to {count} running run(s) ({labels}) and waiting for them to save; " "nothing new starts"
)
_PRINT = threading.Lock()


# Set when the sweep itself got SIGINT/SIGTERM/SIGHUP (the one-after-another path); run_sweep clears it.
SIGNALLED = threading.Event()


def subprocess_runner(run: Run, log: Path, core: int | None = None) -> int:
    """Run ``run.command()`` in a child process; its output goes to our stdout and to ``log``.

    The child runs in its own session, so a Ctrl-C (SIGINT to the terminal's process group) or a
    SIGTERM reaches it exactly once: through this process, which passes it on. lra.train then
    saves a checkpoint and exits (130/143), and the sweep stops; a second signal stops it at once.
    ``core``: pinned there after its first compile (``--jobs``: LRA_PIN_CORE, bit-identical); a lane
    of ``--jobs`` (not the main thread) prefixes its lines with the run's name and leaves the signals
    to :data:`LANES`, which ``run_sweep`` installs.
    """
    env = dict(child_environment(), PYTHONUNBUFFERED="1")  # the faster allocator (lra.cpu_speed)
    if core is not None:
        env[PIN_VARIABLE] = str(core)
    if threading.current_thread() is not threading.main_thread():
        return _lane_runner(run, log, env)
    with log.open("a") as sink:
        sink.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')} {shlex.join(run.command())}\n")
        sink.flush()
        child = subprocess.Popen(
            run.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            bufsize=1,
            start_new_session=True,
        )

        def forward(signum: int, frame: object) -> None:
            SIGNALLED.set()  # whatever the child's exit (a second signal kills it: -15), start nothing new
            if child.poll() is None:
                child.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            assert child.stdout is not None  # stdout=PIPE
            for line in child.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                sink.write(line)
            return child.wait()
        finally:
            if child.poll() is None:  # we are leaving on an exception: never orphan a training process
                child.terminate()
                child.wait()
            for s, handler in previous.items():
                signal.signal(s, handler)


def _lane_runner(run: Run, log: Path, env: dict[str, str]) -> int:
    """One run of ``--jobs`` in a worker thread: started through :data:`LANES` (signals passed on)."""
    with log.open("a") as sink:
        sink.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')} {shlex.join(run.command())}\n")
        sink.flush()
        child = LANES.start(
            run.command(), run.name, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1
        )
        try:
            assert child.stdout is not None  # stdout=PIPE
            for line in child.stdout:
                with _PRINT:
                    sys.stdout.write(f"[{run.name}] {line}")
                    sys.stdout.flush()
                sink.write(line)
            return child.wait()
        finally:
            LANES.done(child)


def exec_run(run: Run, total: int, out: Callable[[str], None] = print) -> int:
    """Become run ``run``'s ``lra.train`` process (``os.execv``), unless it is finished.

    Used by ``--index`` (SLURM array tasks): with no parent process left in between, SIGTERM
    from SLURM (time limit, ``--signal``, scancel) reaches lra.train exactly once.
    """
    head = f"[{run.index + 1}/{total}] {run.name}"
    if status(run, expected_steps(run)) == "finished":
        out(f"{head}: finished, skipped ({run.workdir})")
        return 0
    out(f"{head}: {'resuming' if status(run) == 'started' else 'starting'} in {run.workdir}")
    _write_run_record(run)
    sys.stdout.flush()
    sys.stderr.flush()
    command = run.command()
    os.execv(command[0], command)
    return 0  # not reached, except with a stand-in execv (tests)


def _write_run_record(run: Run) -> None:
    """Each seed's ``sweep_run.json``, replaced atomically (a private temporary name: two sweeps on
    one grid may write it at once), so the tables never read a torn one."""
    for seed, workdir in zip(run.seeds or (run.seed,), run.seed_workdirs, strict=False):
        workdir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(workdir / "sweep_run.json", run.record(seed))


@dataclasses.dataclass
class SweepReport:
    ran: list[Run] = dataclasses.field(default_factory=list)
    skipped: list[Run] = dataclasses.field(default_factory=list)
    failed: list[tuple[Run, int]] = dataclasses.field(default_factory=list)
    in_use: list[Run] = dataclasses.field(default_factory=list)  # held by another process (exit 3)
    interrupted: Run | None = None
    interrupted_code: int = 130  # the interrupted run's own exit: 130 SIGINT, 143 SIGTERM

    @property
    def exit_code(self) -> int:
        """128 + the signal that stopped it (a SIGTERM exits 143, not 130: issue 52 SW1), 1 if a run failed."""
        if self.interrupted is not None:
            return self.interrupted_code
        return 1 if self.failed else 0


def run_sweep(
    runs: Sequence[Run],
    runner: Runner = subprocess_runner,
    *,
    total: int | None = None,
    out: Callable[[str], None] = print,
    jobs: int = 1,
) -> SweepReport:
    """Run ``runs``: skip finished ones, (re)start the others in their workdir; one after another, or
    ``jobs`` at once, each pinned to a core of its own after its first compile when there are enough
    (``runner(run, log, core=N)``; bit-identical, lra.cpu_speed).

    A failing run is reported and the sweep goes on; an interrupted one (exit 130/143: Ctrl-C or
    SIGTERM, checkpoint saved) stops the sweep (with ``jobs``, nothing new starts and the running
    ones save). ``runner(run, log_path)`` returns the exit code; tests inject a fake one.
    """
    report = SweepReport()
    SIGNALLED.clear()
    total = total if total is not None else len(runs)
    start = time.perf_counter()

    codes: dict[str, int] = {}

    def one(run: Run, core: int | None = None) -> None:
        head = f"[{run.index + 1}/{total}] {run.name}"
        steps = expected_steps(run)
        if status(run, steps) == "finished":
            out(f"{head}: finished, skipped ({run.workdir})")
            report.skipped.append(run)
            return
        state = "resuming" if status(run) == "started" else "starting"
        pinned = f", pinned to core {core} after its first compile" if core is not None else ""
        out(f"{head}: {state} in {run.workdir} (sweep elapsed {clock(time.perf_counter() - start)}{pinned})")
        _write_run_record(run)
        t0 = time.perf_counter()
        code = (
            runner(run, run.workdir / "sweep.log") if jobs == 1 else runner(run, run.workdir / "sweep.log", core=core)
        )
        took = clock(time.perf_counter() - t0)
        codes[run.name] = code
        if code in INTERRUPTED:
            out(f"{head}: interrupted after {took}; rerun the same sweep command to resume it")
            if report.interrupted is None:
                report.interrupted, report.interrupted_code = run, code
            return
        if code == IN_USE:
            out(
                f"{head}: in use by another process, skipped (its holder is training it; see "
                f"{run.workdir / 'sweep.log'})"
            )
            report.in_use.append(run)
            return
        if code != 0 or status(run, steps) != "finished":
            out(f"{head}: FAILED (exit code {code}) after {took}; log: {run.workdir / 'sweep.log'}")
            report.failed.append((run, code))
            return
        accuracies = [100 * json.loads((w / "result.json").read_text())["test_accuracy"] for w in run.seed_workdirs]
        shown = (
            f"{accuracies[0]:.2f}%"
            if len(accuracies) == 1
            else f"{', '.join(f'{a:.2f}' for a in accuracies)}% (mean {sum(accuracies) / len(accuracies):.2f}%)"
        )
        out(f"{head}: done in {took}, test accuracy {shown}")
        report.ran.append(run)

    if jobs == 1:
        for run in runs:
            one(run)
            if report.interrupted is not None or SIGNALLED.is_set():
                if report.interrupted is None:  # the child died of the signal (e.g. a second one)
                    report.interrupted = run
                    if codes.get(run.name, 0) < 0:  # killed by signal N: the sweep exits 128 + N
                        report.interrupted_code = 128 - codes[run.name]
                break
    else:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        free: queue.Queue[int | None] = queue.Queue()
        for i in range(jobs):
            free.put(cores[i] if len(cores) >= jobs else None)
        if len(cores) < jobs:
            out(f"sweep: {jobs} runs at once on {len(cores)} core(s): not pinned")

        def lane(run: Run) -> None:
            if report.interrupted is not None or LANES.signum is not None:
                return  # a run was interrupted: start nothing new
            core = free.get()
            try:
                one(run, core)
            finally:
                free.put(core)

        LANES.reset()
        with LANES.forwarding(), ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(lane, runs))
    out(
        f"sweep: {len(report.ran)} ran, {len(report.skipped)} skipped (finished), "
        + (f"{len(report.in_use)} in use (skipped), " if report.in_use else "")
        + f"{len(report.failed)} failed"
        + (f", interrupted at {report.interrupted.name}" if report.interrupted else "")
        + f"; elapsed {clock(time.perf_counter() - start)}"
    )
    for run, code in report.failed:
        out(f"  failed: {run.name} (exit {code}): {run.workdir / 'sweep.log'}")
    return report


def write_manifest(runs: Sequence[Run], root: Path, argv: Sequence[str]) -> Path:
    """``<root>/sweep.json``: the command that made the sweep and every run of it."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "sweep.json"
    write_json_atomic(path, {"command": shlex.join(argv), "runs": [r.record() for r in runs]})
    return path


def slurm_script(
    runs: Sequence[Run],
    sweep_argv: Sequence[str],
    root: Path,
    *,
    time_limit: str = "24:00:00",
    cpus: int = 8,
    max_parallel: int | None = None,
    sbatch: Sequence[str] = (),
    setup: Sequence[str] = (),
) -> str:
    """A job-array script: array task ``i`` runs ``scripts/sweep.py <same selection> --index i``.

    The batch shell execs sweep.py, which execs lra.train (:func:`exec_run`): one process, which
    gets SLURM's SIGTERM 2 minutes before the time limit (``--signal=B:TERM@120``), saves a
    checkpoint and exits; resubmitting the script (or ``--requeue``) resumes the unfinished runs.

    ``sweep_argv`` is the selection (grid, preset, filters, --root, --config.FIELD / --set, --group-seeds) that
    reproduces ``runs``, so the indices of the script and of ``--list`` agree. One GPU and one
    task per array task: each run is a single-host job (lra.train calls no jax.distributed then);
    with grouped seeds an array task is one setup x all its seeds.
    """
    if not runs:
        raise ValueError("no runs selected: nothing to write")
    logs = root.resolve() / "slurm"
    array = f"0-{len(runs) - 1}" + (f"%{max_parallel}" if max_parallel else "")
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=lra-{runs[0].grid}-{runs[0].preset}",
        f"#SBATCH --array={array}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --gres=gpu:1",
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --time={time_limit}",
        f"#SBATCH --output={logs}/%A_%a.out",
        "#SBATCH --signal=B:TERM@120",
        *(f"#SBATCH {s}" for s in sbatch),
        "",
        f"# {len(runs)} runs; run i is line i of: python scripts/sweep.py {shlex.join(sweep_argv)} --list",
        "set -euo pipefail",
        *setup,
        f"cd {shlex.quote(str(REPO))}",
        f'exec python scripts/sweep.py {shlex.join(sweep_argv)} --index "$SLURM_ARRAY_TASK_ID"',
        "",
    ]
    return "\n".join(lines)
