"""The training loop: train one seed or several in one program, evaluate, test, write the run files.

Read it top to bottom:

1. ``train_and_evaluate`` checks everything that can fail on bad input (config, workdirs, data,
   memory) before anything is written, then takes each seed's workdir lock.
2. ``Trainer.run`` asks lra.training.resume what each seed's workdir allows (fresh, resume,
   finished, or a refusal), and resumes every seed that still trains from one common step.
3. The loop: a vmapped train step over the seed axis per batch; metrics fetched every
   ``log_every`` steps and checked (a seed whose loss or weights turn NaN/Inf stops, its last good
   checkpoint kept; the other seeds go on); validation every ``eval_every`` steps, with each seed's
   best checkpoint kept; ``latest`` checkpoints for resuming; SIGTERM/SIGINT save and stop.
4. Test accuracy of each seed, measured once, at its best-validation checkpoint; result.json.

Batches and keys are pure functions of (seed, step), so a resumed run ends exactly as an
uninterrupted one, and seed k of a bundle ends as the single-seed run of seed k does.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra.data import TaskData, load_task
from lra.data.batching import TrainBatches, seed_batch
from lra.errors import InputError
from lra.model import build_model
from lra.training import cpu_speed, distributed, resume
from lra.training.checkpoints import Checkpoints
from lra.training.memory_estimate import check_before_data, check_fits
from lra.training.memory_stats import log_memory_stats
from lra.training.profiling import ProfileWindow
from lra.training.progress import Progress
from lra.training.run_errors import Interrupted, NonFiniteLossError, RunStateError, StorageError
from lra.training.run_files import (
    MetricsLog,
    append_session,
    config_to_dict,
    git_commit,
    read_sessions,
    remove_run,
    write_json_atomic,
)
from lra.training.schedules import make_optimizer
from lra.training.seeds import run_seeds, seed_command, seed_config, seed_workdirs, stack, take
from lra.training.steps import evaluate_split, make_init, make_steps
from lra.training.stop_signals import StopSignals
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
    seed held by another process refuses the command before any seed's run is deleted (D1)."""
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


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str | Path | None = None,
    start_over: bool = False,
    profile: str | None = None,
) -> dict[str, Any] | list[dict[str, Any]]:
    """Train (or resume) the config's seeds and return result.json's contents: one dict for one
    seed, a list (in ``config.seeds`` order) for several.

    ``workdir``: the run directory of a single seed, the parent of ``seed<k>/`` folders for several;
    None: ``runs/<task>_<variant>[_<preset>]/seed<k>``. ``start_over`` deletes a previous run's
    files first (the only way to reuse a workdir whose run cannot be resumed). ``profile``:
    ``"START:COUNT"``, a jax.profiler trace of those steps in ``<first workdir>/profile``
    (lra.training.profiling; process 0 only)."""
    stop = StopSignals().install()  # first: a signal during setup or compilation stops cleanly
    runs: list[SeedRun] = []
    try:
        pin_core = cpu_speed.requested_core()  # a bad LRA_PIN_CORE fails before anything is compiled
        cpu_speed.unroll_threefry_on_cpu()  # bit-identical, faster dropout bits (lra.training.cpu_speed)
        distributed.initialize()
        if jax.process_count() > 1:
            stop.reclaim()  # from jax's preemption notifier: Trainer._agreed_stop passes the flag to every host
        distributed.check_same_config(
            {  # data_dir may differ (each host's own disk)
                "config": {k: v for k, v in config_to_dict(config).items() if k != "data_dir"},
                "workdir": None if workdir is None else str(Path(workdir).absolute()),
                "start_over": start_over,
                "profile": profile,
            }
        )
        primary = jax.process_index() == 0
        seeds = run_seeds(config)
        workdirs = seed_workdirs(config, workdir)
        window = None
        if profile:
            window = ProfileWindow.parse(profile, workdirs[0] / "profile")
            window.check(config)
        data, model, param_shapes = prepare(config, workdirs)
        for index, (seed, path) in enumerate(
            zip(seeds, workdirs, strict=False)
        ):  # every lock first: then change anything
            lock = open_workdir(path, primary)
            runs.append(
                SeedRun(
                    index,
                    seed_config(config, seed),
                    path,
                    Checkpoints(path),
                    lock,
                    label=f"seed {seed}: " if len(seeds) > 1 else "",
                )
            )
        if start_over and primary:
            remove_previous_runs(runs)
        for run in runs:
            if len(runs) == 1 and not start_over:
                inherit_bucket_order(run)
            run.checkpoints.config = config_to_dict(run.config)
        results = Trainer(
            config, runs, data, model, param_shapes, stop, primary, window if primary else None, pin_core
        ).run()
        return results[0] if len(results) == 1 else results
    finally:
        for run in runs:
            run.checkpoints.close()
            if run.lock is not None:
                run.lock.release()
        stop.restore()


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


class Trainer:
    """The loop over steps for the seeds of one program (see the module docstring)."""

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        runs: list[SeedRun],
        data: TaskData,
        model: Any,
        param_shapes: Any,
        stop: StopSignals,
        primary: bool,
        profile: ProfileWindow | None = None,
        pin_core: int | None = None,
    ):
        self.config, self.all_runs, self.data, self.model = config, runs, data, model
        self.stop, self.primary, self.profile, self.pin_core = stop, primary, profile, pin_core
        self.num_params = int(sum(np.prod(s.shape) for s in jax.tree.leaves(param_shapes)))
        self.pending: list[tuple[int, dict[str, jax.Array]]] = []

    # -- the run -----------------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        bundle = len(self.all_runs) > 1
        for run in self.all_runs:  # every refusal is raised before anything is written
            fix = seed_fix(self.config, run) if bundle else None
            run.plan = resume.plan_resume(run.workdir, run.config, run.checkpoints, fix=fix)
        results: dict[int, dict[str, Any]] = {}
        self.runs = []
        for run in self.all_runs:
            if run.plan.result is not None:
                resume.report_damaged(run.plan, run.checkpoints, set_aside=False)
                print(f"{run.workdir} already holds a finished run; its result.json is unchanged.", flush=True)
                results[run.position] = run.plan.result
            else:
                self.runs.append(run)
        if self.runs:
            start = common_start(self.config, self.runs)
            for run in self.runs:
                if run.plan.step is not None and start is not None and run.plan.step != start:
                    print(
                        f"{run.workdir}: resuming from step {start} with the other seeds (its newer checkpoint "
                        f"at step {run.plan.step} was a save ahead; the same steps are replayed)",
                        file=sys.stderr,
                        flush=True,
                    )
            for i, run in enumerate(self.runs):
                run.index = i
                if self.primary:
                    resume.apply(run.plan, run.workdir, run.checkpoints)
                    write_json_atomic(run.workdir / "config.json", config_to_dict(run.config))
                    append_session(run.workdir, start or 0, {"speed_settings": cpu_speed.settings()})
                run.log = MetricsLog(run.workdir / "metrics.jsonl")
            trained = self._train(start)
            results.update(trained)
        return [results[run.position] for run in self.all_runs]

    def _train(self, start: int | None) -> dict[int, dict[str, Any]]:
        config, data, model = self.config, self.data, self.model
        seeds = [run.seed for run in self.runs]
        mesh = distributed.data_mesh()
        self.repl = distributed.replicated(mesh)
        self.eval_sharding = distributed.batch_sharded(mesh)
        tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
        self.train_step, self.eval_step = make_steps(model, tx, config, mesh, seeds)
        self.memory_probe = log_memory_stats(model, config, data.validation, self.eval_sharding)

        sample = jnp.zeros((1,) + data.train.inputs.shape[1:], jnp.int32)
        state = make_init(model, tx, seeds, sample, self.repl)()
        if start is not None:
            one = take(state, 0)
            state = jax.device_put(
                stack([run.checkpoints.restore("latest", start, one) for run in self.runs]), self.repl
            )
        else:  # a checkpoint before the first metric: a workdir with metrics always has one to resume
            for run in self.runs:
                run.checkpoints.save_latest(0, take(state, run.index))
        self.state = state
        step = int(state["step"][0])
        if step == config.num_train_steps:
            print(f"{self._where()}: training is complete; writing result.json from the best checkpoint", flush=True)
        if self.primary:
            for run in self.runs:
                run.log.truncate_after(step)
        self.train_seconds = np.array(state["train_seconds"], np.float64)
        self.timed_steps = np.array(state["timed_steps"], np.int64)
        self.compile_seconds = 0.0
        try:
            self.progress = Progress(
                config.num_train_steps,
                step,
                [run.workdir for run in self.runs],
                enabled=self.primary,
                projection_warning=projection_warning(config),
            )
            self.progress.message(
                f"{config.variant} on {config.task} ({config.preset}): {self.num_params:,} parameters, "
                + (f"{len(seeds)} seeds ({', '.join(map(str, seeds))}) in one program, " if len(seeds) > 1 else "")
                + f"{jax.device_count()} x {jax.devices()[0].device_kind}, "
                + (f"resuming at step {step}" if step else "starting")
                + f"; workdir {self._where()}"
            )
            self._loop(step)
            return self._test()
        finally:
            if self.profile is not None:
                self.profile.stop()
            self.progress.close()

    def _where(self) -> str:
        dirs = [run.workdir for run in self.runs]
        return str(dirs[0]) if len(dirs) == 1 else f"{dirs[0].parent}/{{{','.join(d.name for d in dirs)}}}"

    def _active(self) -> list[SeedRun]:
        return [run for run in self.runs if run.stopped is None]

    def _put(self, values: np.ndarray, dtype: Any) -> jax.Array:
        """Host values placed like the rest of the state (else the step would recompile)."""
        return jax.device_put(np.asarray(values, dtype), self.repl)

    # -- the loop ----------------------------------------------------------------------------------

    def _loop(self, step: int) -> None:
        config = self.config
        batches = [
            TrainBatches(
                self.data.train,
                config.batch_size,
                run.seed,
                config.data.buckets,
                config.data.max_len,
                run.config.data.bucket_order_seed,
            )
            for run in self.runs
        ]
        sharding = distributed.seed_batch_sharded(distributed.data_mesh())
        compiled_shapes: set[tuple[int, ...]] = set()
        self.window_start, self.window_steps = time.perf_counter(), 0
        self.stop.training = True
        if self.profile is not None and step > self.profile.start:
            self.progress.message(
                f"--profile={self.profile.start}:{self.profile.count}: this run resumes at step "
                f"{step}, after the window's start; nothing is traced (use a later window)"
            )
        while step < config.num_train_steps:
            if self.profile is not None:
                self.profile.before_step(step)
            t0 = time.perf_counter()
            with jax.profiler.StepTraceAnnotation("train", step_num=step + 1):
                with jax.profiler.TraceAnnotation("host_batch"):
                    host_batch = seed_batch(batches, step)
                    device_batch = distributed.shard_batch(host_batch, sharding)
                shape = host_batch["inputs"].shape
                new_shape = shape not in compiled_shapes
                if new_shape:  # the first step of each batch shape compiles: say so, and time it apart
                    what = f"the training step for batch shape {tuple(shape)}"
                    compiling = self.progress.compiling(what)
                try:
                    self.state, metrics = self.train_step(self.state, device_batch)
                except jax.errors.JaxRuntimeError:
                    if not (new_shape and self.stop.signum is not None):
                        raise
                    self._stopped_while_compiling(step)
            step += 1
            self.pending.append((step, metrics))
            if not new_shape and len(self.pending) >= 2:
                # jax dispatches asynchronously: unbounded, the host would queue up to log_every steps ahead,
                # so the bar's ETA would count steps not yet computed and a stop request would wait for
                # all of them. Waiting for the previous step keeps one step in flight (the next batch is
                # still prepared while this one computes): a stop is honoured within about one step.
                jax.block_until_ready(self.pending[-2][1])
            if new_shape:
                jax.block_until_ready(metrics)
                compiled_shapes.add(shape)
                self.compile_seconds += time.perf_counter() - t0
                self.progress.compiled(what, compiling)
                if self.pin_core is not None and len(compiled_shapes) == 1:  # XLA's threads exist now
                    cpu_speed.pin_process_to_core(self.pin_core)
                    self.progress.message(f"pinned to core {self.pin_core} ({cpu_speed.PIN_VARIABLE})")
                self.window_start = time.perf_counter()
            else:
                self.window_steps += 1
            last = step == config.num_train_steps
            if last:
                jax.block_until_ready(metrics)
            # finished steps only: after a compile or at the end, this one; else the one before (in flight)
            self.progress.tick(
                step if new_shape or last else step - 1,
                compile_seconds=(time.perf_counter() - t0) if new_shape else 0.0,
            )
            if step % config.log_every == 0 or step == config.num_train_steps:
                self._flush_train_metrics()
            if not new_shape:
                self.train_seconds += time.perf_counter() - t0
                self.timed_steps += 1
            if self.profile is not None and (line := self.profile.after_step(step, self.state)):
                self.progress.message(line)

            if step % config.eval_every == 0 or step == config.num_train_steps:
                self._validate(step)
                self._save_latest(step)
                self.window_start = time.perf_counter()
            elif step % config.checkpoint_every == 0:
                self._save_latest(step)
                self.window_start = time.perf_counter()
            signum = self._agreed_stop(step)
            if signum is not None:
                self._save_latest(step)
                raise Interrupted(signum, step)
        self.stop.training = False  # a signal during the test evaluation stops at once: nothing to save

    def _stopped_while_compiling(self, step: int) -> None:
        """A stop signal during a compilation reaches XLA's compiler too where it is a child process
        (``ptxas`` on a GPU, in the signalled process group), which fails the compile. The state is
        still the one before this step: save it, as a signal during a step does, and stop."""
        assert self.stop.signum is not None
        self.progress.message("the compilation in progress was stopped by the same signal")
        if jax.process_count() > 1:  # the others may be compiling on: no collective save
            raise Interrupted(self.stop.signum, None, saved=False) from None
        self._save_latest(step)
        raise Interrupted(self.stop.signum, step) from None

    def _agreed_stop(self, step: int) -> int | None:
        """The signal this run stops on after ``step`` (None: go on). One process: its own, no
        collective. Several: every process's flag is gathered at every step, so a SIGTERM that
        reaches only some hosts stops all of them after the same step, where each takes its part in
        the collective save; alone, the signalled host would leave the others waiting in the next
        collective for ever (issue 38). The largest signal number wins (SIGTERM over SIGINT)."""
        own = self.stop.signum
        if jax.process_count() == 1:
            return own
        from jax.experimental import multihost_utils

        flags = np.asarray(multihost_utils.process_allgather(np.int32(own or 0)))
        signum = int(flags.max())
        if signum and not own:
            senders = ", ".join(str(i) for i in np.flatnonzero(flags))
            print(
                f"process {jax.process_index()}: process {senders} got {signal.Signals(signum).name}: all stop "
                f"after step {step} and save a checkpoint",
                file=sys.stderr,
                flush=True,
            )
        return signum or None

    def _flush_train_metrics(self) -> None:
        """Fetch pending step metrics, check each seed's, log their mean."""
        if not self.pending:
            return
        fetched = jax.device_get([m for _, m in self.pending])
        steps = [step for step, _ in self.pending]
        elapsed = time.perf_counter() - self.window_start
        self.pending.clear()
        for run in self._active():
            i = run.index
            for step, m in zip(steps, fetched, strict=False):
                if not np.isfinite(m["loss"][i]):
                    self._stop_seed(run, f"training loss became {m['loss'][i]} at step {step}")
                    break
                if m["state_finite"][i] != 1.0:
                    self._stop_seed(run, f"the weights or optimizer state became NaN/Inf in the update of step {step}")
                    break
        records = {}
        for run in self._active():
            record: dict[str, Any] = {
                k: float(np.mean([m[k][run.index] for m in fetched])) for k in fetched[0] if k != "state_finite"
            }
            record.update(step=steps[-1], split="train")
            if self.window_steps:
                record["steps_per_second"] = self.window_steps / max(elapsed, 1e-9)
            records[run.index] = record
            if self.primary:
                run.log.write([record])
            self.progress.scalars(run.index, steps[-1], "train", record)
        if records:
            shown = {k: float(np.mean([r[k] for r in records.values()])) for k in ("loss", "accuracy")}
            self.progress.update(steps[-1], "train", shown, index=None)
        self.window_start, self.window_steps = time.perf_counter(), 0

    def _stop_seed(self, run: SeedRun, why: str) -> None:
        """Stop one seed whose loss or weights turned NaN/Inf: its checkpoints stay as they were
        (each was checked finite); the other seeds go on. The last seed stopping ends the run."""
        run.stopped = f"{run.label}{why}; {self._last_good(run)}"
        if not self._active():
            raise NonFiniteLossError("\n".join(r.stopped for r in self.runs if r.stopped))
        print(f"error: {run.stopped} The other seeds go on.", file=sys.stderr, flush=True)

    def _last_good(self, run: SeedRun) -> str:
        step = run.checkpoints.latest_step("latest")  # every saved state was checked finite
        kept = (
            "no checkpoint was saved"
            if step is None
            else f"the last good checkpoint, step {step}, is kept in {run.checkpoints.path('latest', step)}"
        )
        return (
            f"{kept}. Lower --config.learning_rate or set --config.grad_clip_norm, then use a new workdir "
            f"(or --start_over)."
        )

    def _validate(self, step: int) -> None:
        """Validation accuracy of every seed; a seed's best checkpoint kept."""
        self._flush_train_metrics()
        val = evaluate_split(
            self.eval_step, self.state["params"], self.data.validation, self.config, self.eval_sharding
        )
        best_val = np.array(self.state["best_val_accuracy"], np.float32)  # a writable copy
        best_step = np.array(self.state["best_step"], np.int32)
        for run in self._active():
            metrics = val[run.index]
            if not all(np.isfinite(v) for v in metrics.values()):  # never select on a NaN
                self._stop_seed(run, f"validation loss became {metrics['loss']} at step {step}")
                continue
            records = [{"step": step, "split": "validation", **metrics}]
            if self.memory_probe is not None:
                records.append(
                    {"step": step, "split": "memory", **self.memory_probe(take(self.state["params"], run.index))}
                )
            if self.primary:
                run.log.write(records)
            self.progress.update(step, "validation", metrics, index=run.index, label=run.label.rstrip(": "))
            if metrics["accuracy"] > float(best_val[run.index]):
                best_val[run.index], best_step[run.index] = metrics["accuracy"], step
                run.checkpoints.save_best(
                    step,
                    {"params": take(self.state["params"], run.index), "step": self.state["step"][run.index]},
                    metrics={"accuracy": float(metrics["accuracy"])},
                )
        self.state["best_val_accuracy"] = self._put(best_val, np.float32)
        self.state["best_step"] = self._put(best_step, np.int32)

    def _save_latest(self, step: int) -> None:
        """Each training seed's ``latest`` checkpoint (never one whose loss was not checked)."""
        self._flush_train_metrics()
        seconds, steps = self.train_seconds, self.timed_steps
        if jax.process_count() > 1:  # each host timed itself: store process 0's clock everywhere
            from jax.experimental import multihost_utils

            seconds, steps = multihost_utils.broadcast_one_to_all((np.float32(seconds), np.int32(steps)))
        self.state["train_seconds"] = self._put(seconds, np.float32)
        self.state["timed_steps"] = self._put(steps, np.int32)
        for run in self._active():
            run.checkpoints.save_latest(step, take(self.state, run.index))

    # -- the end -----------------------------------------------------------------------------------

    def _test(self) -> dict[int, dict[str, Any]]:
        """Each seed's test accuracy at its best-validation checkpoint, and its result.json."""
        state, config = self.state, self.config
        best_step = np.asarray(state["best_step"])
        best_val = np.asarray(state["best_val_accuracy"])
        params = []
        for run in self.runs:
            current = {"params": take(state["params"], run.index), "step": state["step"][run.index]}
            if run.stopped is None:
                current = run.checkpoints.restore("best", int(best_step[run.index]), current)
            params.append(current["params"])  # a stopped seed's slot is computed and ignored
        test = evaluate_split(
            self.eval_step, jax.device_put(stack(params), self.repl), self.data.test, config, self.eval_sharding
        )
        commit = git_commit()
        results = {}
        for run in self._active():
            i = run.index
            if self.primary:
                run.log.write([{"step": int(best_step[i]), "split": "test", **test[i]}])
            self.progress.update(int(best_step[i]), "test", test[i], index=i, label=run.label.rstrip(": "))
            result = {
                "task": config.task,
                "attention": config.model.attention,
                "variant": config.variant,
                "seed": run.seed,
                "best_val_accuracy": float(best_val[i]),
                "best_step": int(best_step[i]),
                "test_accuracy": test[i]["accuracy"],
                "test_loss": test[i]["loss"],
                "num_train_steps": config.num_train_steps,
                "train_seconds": float(self.train_seconds[i]),
                # Steps of the whole program timed without compilation (all seeds at once); a
                # resumed run counts the steps of each process.
                "steps_per_second": float(self.timed_steps[i] / max(self.train_seconds[i], 1e-9)),
                "compile_seconds": self.compile_seconds,
                "num_params": self.num_params,
                "config_preset": config.preset,
                "device_kind": jax.devices()[0].device_kind,
                "num_devices": jax.device_count(),
                "jax_version": jax.__version__,
                "git_commit": commit,
                # Provenance of the start: the commit of the process that began the run (sessions.jsonl)
                "git_commit_start": (read_sessions(run.workdir) or [{"git_commit": commit}])[0]["git_commit"],
                "speed_settings": cpu_speed.settings(),
            }
            if len(self.runs) > 1:
                result["seeds_in_program"] = len(self.runs)
            if self.primary:
                write_json_atomic(run.workdir / "result.json", result)
            self.progress.message(
                f"{run.label}test accuracy {test[i]['accuracy']:.4f} at the best validation step "
                f"{result['best_step']} (validation {result['best_val_accuracy']:.4f}); {run.workdir}/result.json"
            )
            results[run.position] = result
        stopped = [run.stopped for run in self.runs if run.stopped]
        if stopped:
            raise NonFiniteLossError(
                "\n".join(stopped)
                + f"\nThe other seeds finished: {', '.join(str(run.workdir) for run in self._active())}"
            )
        return results
