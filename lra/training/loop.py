"""The training loop: train one seed or several in one program, evaluate, test, write the run files.

``train_and_evaluate`` installs the signal handlers, checks the ``--profile`` window, joins the hosts and calls
lra.training.runs.set_up_runs, which checks everything bad input can fail before anything is written
(lra.training.checks), locks each seed's workdir and decides its resume.
The ``Trainer``, built whole for the seeds that still train from one common step, loops: a vmapped train step per
batch; metrics fetched and checked every ``log_every`` steps (a seed turning NaN/Inf stops alone, its last good
checkpoint kept); validation every ``eval_every`` steps, keeping each seed's best checkpoint; ``latest`` checkpoints;
SIGTERM/SIGINT save and stop. Each seed's test accuracy is measured once, at its best-validation checkpoint, and
written to result.json (``seed_result``; lra.reports and lra_lab.reproduce read it). Batches and keys are pure
functions of (seed, step): a resumed run ends exactly as an uninterrupted one, and seed k of a bundle as the
single-seed run of seed k. Here too, what the loop calls each step: each split's evaluation (``evaluate_split``),
the display (``Progress``) and ``--profile=START:COUNT``'s trace (``ProfileWindow``; docs/design.md, A run).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra import cpu_speed
from lra.console import BarOrLines, clock, duration, terminal_bar_possible
from lra.data import TaskData
from lra.data.batching import TrainBatches, eval_batches, seed_batch
from lra.errors import InputError, Interrupted, NonFiniteLossError
from lra.memory_stats import log_memory_stats
from lra.training import hosts
from lra.training.hosts import StopSignals, agreed_stop
from lra.training.provenance import seal
from lra.training.run_files import config_to_dict, git_commit, read_sessions, write_json_atomic
from lra.training.runs import SeedRun, set_up_runs
from lra.training.step import make_init, make_optimizer, make_steps, stack, take

# -- the loop ------------------------------------------------------------------------------------------------
SAVE_THREADS = 8  # seeds' checkpoints saved side by side in one process (1: one after another)


def save_each(saves: list[Callable[[], None]]) -> None:
    """Each seed's checkpoint save, side by side in one process (a save mostly waits: 20 small saves took 2.9-4.3 s
    in a row, 1.3 s in 8 threads); all run to their end, then the first failure is raised. Several processes save
    one at a time: orbax's collective saves must meet in the same order on every host."""
    if len(saves) <= 1 or SAVE_THREADS <= 1 or jax.process_count() > 1:
        for save in saves:
            save()
        return
    with ThreadPoolExecutor(max_workers=min(len(saves), SAVE_THREADS), thread_name_prefix="lra-save") as pool:
        futures = [pool.submit(save) for save in saves]
    for future in futures:
        future.result()


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str | Path | None = None,
    start_over: bool = False,
    profile: str | None = None,
) -> dict[str, Any] | list[dict[str, Any]]:
    """Train (or resume) the config's seeds; result.json's contents (a list in ``config.seeds`` order for several).
    ``workdir``: one seed's run directory, or the parent of ``seed<k>/``; None: the default layout. ``start_over``
    deletes a previous run first. ``profile``: ``"START:COUNT"``, traced into ``<first workdir>/profile``."""
    stop = StopSignals().install()  # first: a signal during setup or compilation stops cleanly
    runs: list[SeedRun] = []
    try:
        pin_core = cpu_speed.requested_core()  # a bad LRA_PIN_CORE fails before anything is compiled
        window = ProfileWindow.parse(profile).check(config) if profile else None  # a bad one fails as early
        cpu_speed.unroll_threefry_on_cpu()  # bit-identical, faster dropout bits (lra.cpu_speed)
        hosts.initialize()
        if jax.process_count() > 1:
            stop.reclaim()  # from jax's preemption notifier: Trainer._agreed_stop passes the flag to every host
        hosts.check_same_config(
            {  # data_dir may differ (each host's own disk)
                "config": {k: v for k, v in config_to_dict(config).items() if k != "data_dir"},
                "workdir": None if workdir is None else str(Path(workdir).absolute()),
                "start_over": start_over,
                "profile": profile,
            }
        )
        primary = jax.process_index() == 0
        setup = set_up_runs(config, workdir, start_over, primary, runs)  # lra.training.runs
        results = setup.results
        if setup.training:
            if window is not None:
                window.folder = runs[0].workdir / "profile"  # the first seed's, finished or not
            trainer = Trainer(
                config, setup.training, setup.start, setup.data, setup.model, setup.param_shapes, stop, primary,
                window if primary else None, pin_core,  # process 0 traces
            )  # fmt: skip
            results.update(trainer.run())
        ordered = [results[run.position] for run in runs]
        return ordered[0] if len(ordered) == 1 else ordered
    finally:
        for run in runs:
            run.checkpoints.close()
            if run.lock is not None:
                run.lock.release()
        stop.restore()


ADVICE = "Lower --config.learning_rate or set --config.grad_clip_norm, then use a new workdir (or --start_over)"


class Trainer:
    """The loop of the seeds training in one program, built whole (state fresh or restored at ``start``)."""

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        runs: list[SeedRun],
        start: int | None,
        data: TaskData,
        model: Any,
        param_shapes: Any,
        stop: StopSignals,
        primary: bool,
        profile: ProfileWindow | None = None,
        pin_core: int | None = None,
    ):
        self.config, self.runs, self.data, self.model = config, runs, data, model
        self.stop, self.primary, self.profile, self.pin_core = stop, primary, profile, pin_core
        self.num_params = int(sum(np.prod(s.shape) for s in jax.tree.leaves(param_shapes)))
        self.pending: list[tuple[int, dict[str, jax.Array]]] = []
        if start == config.num_train_steps:
            print(f"{self._where()}: training is complete; writing result.json from the best checkpoint", flush=True)
        # the display first, so that the build below (the initial state compiles) shows under it; run() closes it
        self.progress = Progress(
            config.num_train_steps,
            start or 0,
            [run.workdir for run in runs],
            enabled=primary,
            projection_warning=projection_warning(config),
        )
        try:  # the compiled steps and every seed's state: fresh, or its ``latest`` checkpoint at ``start``
            seeds = [run.seed for run in runs]
            mesh = hosts.data_mesh()
            self.repl = hosts.replicated(mesh)
            self.eval_sharding = hosts.batch_sharded(mesh)
            tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
            self.train_step, self.eval_step = make_steps(model, tx, config, mesh, seeds)
            sample = jnp.zeros((1,) + data.train.inputs.shape[1:], jnp.int32)
            state = make_init(model, tx, seeds, sample, self.repl)()
            if start is None:  # a checkpoint before the first metric: a workdir with metrics always has one to resume
                for run in runs:
                    run.checkpoints.save_latest(0, take(state, run.index))
            else:
                one = take(state, 0)
                restored = [run.checkpoints.restore("latest", start, one) for run in runs]
                state = jax.device_put(stack(restored), self.repl)
            self.state = state
            self.start_step = int(state["step"][0])
            self.memory_probe = log_memory_stats(model, config, data.validation, self.eval_sharding)
            if primary:
                for run in runs:
                    run.log.truncate_after(self.start_step)
        except BaseException:
            self.progress.close()
            raise
        self.train_seconds = np.array(self.state["train_seconds"], np.float64)
        self.timed_steps = np.array(self.state["timed_steps"], np.int64)
        self.compile_seconds = 0.0
        self.window_start, self.window_steps = time.perf_counter(), 0  # the metrics window's clock and steps

    def run(self) -> dict[int, dict[str, Any]]:
        """Train to ``config.num_train_steps``, then test: each seed's result.json, by its position."""
        config, seeds, step = self.config, [run.seed for run in self.runs], self.start_step
        try:
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
        sharding = hosts.seed_batch_sharded(hosts.data_mesh())
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
                    device_batch = hosts.shard_batch(host_batch, sharding)
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
                # one step in flight: unbounded dispatch would let the ETA count steps not yet computed and a stop
                # wait for all of them; the next batch is still prepared while this one computes
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
        """A signal during a compilation also reaches a compiler child process (``ptxas`` on a GPU), failing the
        compile; the state is still the one before this step: save it and stop, as during a step."""
        assert self.stop.signum is not None
        self.progress.message("the compilation in progress was stopped by the same signal")
        if jax.process_count() > 1:  # the others may be compiling on: no collective save
            raise Interrupted(self.stop.signum, None, saved=False) from None
        self._save_latest(step)
        raise Interrupted(self.stop.signum, step) from None

    def _agreed_stop(self, step: int) -> int | None:
        """The signal every process stops on after ``step`` (None: go on; lra.training.hosts)."""
        return agreed_stop(self.stop.signum, step)

    def _flush_train_metrics(self) -> None:
        """Fetch pending step metrics, check each seed's, log their mean."""
        if not self.pending:
            return
        fetched = jax.device_get([m for _, m in self.pending])
        steps = [step for step, _ in self.pending]
        elapsed = time.perf_counter() - self.window_start
        self.pending.clear()
        diverged: list[tuple[SeedRun, str]] = []
        for run in self._active():
            i = run.index
            for step, m in zip(steps, fetched, strict=False):
                if not np.isfinite(m["loss"][i]):
                    diverged.append((run, f"training loss became {m['loss'][i]} at step {step}"))
                    break
                if m["state_finite"][i] != 1.0:
                    diverged.append(
                        (run, f"the weights or optimizer state became NaN/Inf in the update of step {step}")
                    )
                    break
        self._stop_seeds(diverged)
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
        self._stop_seeds([(run, why)])

    def _stop_seeds(self, diverged: list[tuple[SeedRun, str]]) -> None:
        """Stop the seeds whose loss or weights turned NaN/Inf; their checkpoints (each checked finite) stay, the
        other seeds go on, said once. The last seed stopping ends the run with one line naming every seed."""
        if not diverged:
            return
        for run, why in diverged:
            run.stopped = f"{run.label}{why} ({self._last_good(run)})"
        if not self._active():
            raise NonFiniteLossError(self._stopped_summary())
        going = ", ".join(str(r.seed) for r in self._active())
        for run, _ in diverged:
            print(f"error: {run.stopped}. {ADVICE}", file=sys.stderr, flush=True)
        print(f"the other seeds ({going}) go on", file=sys.stderr, flush=True)

    def _stopped_summary(self) -> str:
        """Every stopped seed in one line, the advice once."""
        stopped = [r.stopped for r in self.runs if r.stopped]
        head = "every seed stopped: " if len(stopped) == len(self.runs) and len(stopped) > 1 else ""
        return f"{head}{'; '.join(stopped)}. {ADVICE}"

    def _last_good(self, run: SeedRun) -> str:
        step = run.checkpoints.latest_step("latest")  # every saved state was checked finite
        if step is None:
            return "no checkpoint was saved"
        return f"the last good checkpoint, step {step}, is kept in {run.checkpoints.path('latest', step)}"

    def _validate(self, step: int) -> None:
        """Validation accuracy of every seed; a seed's best checkpoint kept."""
        self._flush_train_metrics()
        val = evaluate_split(
            self.eval_step, self.state["params"], self.data.validation, self.config, self.eval_sharding
        )
        best_val = np.array(self.state["best_val_accuracy"], np.float32)  # a writable copy
        best_step = np.array(self.state["best_step"], np.int32)
        saves: list[Callable[[], None]] = []
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
                best = {"params": take(self.state["params"], run.index), "step": self.state["step"][run.index]}
                saves.append(
                    partial(run.checkpoints.save_best, step, best, metrics={"accuracy": float(metrics["accuracy"])})
                )
        save_each(saves)
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
        save_each([partial(run.checkpoints.save_latest, step, take(self.state, run.index)) for run in self._active()])

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
            result = seed_result(
                config,
                run,
                test[i],
                best_val=float(best_val[i]),
                best_step=int(best_step[i]),
                train_seconds=self.train_seconds[i],
                timed_steps=self.timed_steps[i],
                compile_seconds=self.compile_seconds,
                num_params=self.num_params,
                commit=commit,
                seeds_in_program=len(self.runs),
            )
            if self.primary:
                write_json_atomic(run.workdir / "result.json", result)
                seal(run.workdir / "result.json")  # an edit after this is found by the audit
            self.progress.message(
                f"{run.label}test accuracy {test[i]['accuracy']:.4f} at the best validation step "
                f"{result['best_step']} (validation {result['best_val_accuracy']:.4f}); {run.workdir}/result.json"
            )
            results[run.position] = result
        stopped = [run.stopped for run in self.runs if run.stopped]
        if stopped:
            raise NonFiniteLossError(
                self._stopped_summary()
                + f" The other seeds finished: {', '.join(str(run.workdir) for run in self._active())}"
            )
        return results


# -- result.json's contents for one finished seed ------------------------------------------------------------
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
        # the whole program's steps (all seeds at once) without compilation, summed over a resumed run's processes
        "steps_per_second": float(timed_steps / max(train_seconds, 1e-9)),
        "compile_seconds": compile_seconds,
        "num_params": num_params,
        "config_preset": config.preset,
        "device_kind": jax.devices()[0].device_kind,
        "num_devices": jax.device_count(),
        "jax_version": jax.__version__,
        "git_commit": commit,
        # the start's provenance (sessions.jsonl's first line): its commit, and its code trees when recorded
        "git_commit_start": first_session["git_commit"],
        **({"code_start": first_session["code_start"]} if "code_start" in first_session else {}),
        "speed_settings": cpu_speed.settings(),
    }
    if seeds_in_program > 1:
        result["seeds_in_program"] = seeds_in_program
    return result


# -- a split's accuracy and loss, every seed at once -------------------------------------------------------
def evaluate_split(
    eval_step: Callable,
    params_S: Any,
    split: Any,
    config: ml_collections.ConfigDict,
    sharding: Any,
    examples: bool = False,
) -> list[dict[str, float]]:
    """Each seed's accuracy and loss over a split (``max_eval_batches``); ``examples``: also the count scored."""
    pending = [
        eval_step(params_S, hosts.shard_batch(batch, sharding))
        for batch in eval_batches(
            split, config.eval_batch_size, config.data.buckets, config.data.max_len, config.max_eval_batches
        )
    ]
    return summed_metrics(jax.device_get(pending), examples)


def summed_metrics(per_batch: Iterable[dict[str, np.ndarray]], examples: bool = False) -> list[dict[str, float]]:
    """Per-seed accuracy and loss from the per-batch sums (each of shape (S,)), with ``examples`` if asked."""
    totals: dict[str, np.ndarray] = {}
    for m in per_batch:
        for k in ("loss_sum", "correct", "count"):
            totals[k] = totals.get(k, 0.0) + np.asarray(m[k], np.float64)
    if not totals:
        return []
    count = np.maximum(totals["count"], 1.0)
    return [
        {"accuracy": float(c / n), "loss": float(s / n), **({"examples": int(t)} if examples else {})}
        for c, s, n, t in zip(totals["correct"], totals["loss_sum"], count, totals["count"], strict=False)
    ]


# -- progress: the bar or plain lines, rate and ETA, TensorBoard ---------------------------------------------
# Not clu's metric writers: clu 0.0.12 imports TensorFlow with them; TensorBoard goes through tensorboardX. One rate:
# steps per second of wall time without compilation (evaluations and checkpoints included, so the ETA is what the
# clock will show). A step is ticked once finished, not when dispatched: counting dispatched steps made a 214 h run's
# ETA swing from 1 h to 25 h (docs/running.md, Progress).
def _fmt(metrics: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def _discard(writer: Any) -> None:
    """Close a failed tensorboardX writer for good: left as it is, its atexit hook and event thread retry the
    write at exit and print tracebacks after the run's error line. Pending events are dropped (metrics.jsonl has
    them). Every event file is first marked closed, in one pass that cannot block or fail, so the atexit hook,
    ``add_event`` and ``flush`` do nothing even if the main thread exits while the worker is still stopping."""
    file_writers = list((getattr(writer, "all_writers", None) or {}).values())
    opened = []
    for file_writer in file_writers:
        events = getattr(file_writer, "event_writer", None)
        if events is not None and not getattr(events, "_closed", True):
            events._closed = True
            opened.append(events)
    for events in opened:
        worker = getattr(events, "_worker", None)
        if worker is not None and worker.is_alive() and worker is not threading.current_thread():
            try:
                events._event_queue.put(worker._shutdown_signal, timeout=1)
            except Exception:  # noqa: BLE001 -- a full queue of a dead thread: nothing to stop
                pass
            worker.join(timeout=5)
        try:
            events._ev_writer.close()  # the file is closed even when its last flush fails
        except Exception:  # noqa: BLE001 -- a writer already being discarded after a failure: its error was reported
            pass
    # not writer.close(): a late add_scalar would then open a fresh file writer on the disk that failed


class Progress:
    """Shows training progress; ``enabled=False`` on non-primary hosts."""

    def __init__(
        self,
        total: int,
        start: int,
        workdirs: Path | Sequence[Path],
        enabled: bool = True,
        tensorboard: bool = True,
        refresh_seconds: float = 1.0,
        plain_seconds: float = 30.0,
        projection_warning: str | None = None,
        projection_after: int = 3,
    ):
        """``workdirs``: one per seed, each with its own ``tensorboard/``. ``projection_warning``: once
        ``projection_after`` timed steps give the rate, one line saying how long the rest of the run needs."""
        self.enabled = enabled
        self.out: BarOrLines | None = None
        self.bar: Any = None
        self._tb_dirs = [
            Path(w) / "tensorboard" for w in ([workdirs] if isinstance(workdirs, (str, Path)) else workdirs)
        ]
        self.writers: list[Any] = [None] * len(self._tb_dirs)
        self._old_hook = None
        self.total, self.step = total, start
        self.refresh_seconds, self.plain_seconds = refresh_seconds, plain_seconds
        self._measured_seconds, self._measured_steps = 0.0, 0
        self._last_tick: float | None = None
        self._projection, self._projection_after = projection_warning, projection_after
        self._last_shown = self._last_plain = time.monotonic()
        if not enabled:
            return
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter

                self._old_hook = threading.excepthook
                threading.excepthook = self._thread_failed
                self.writers = [SummaryWriter(str(d)) for d in self._tb_dirs]
            except ImportError:  # optional: metrics.jsonl holds everything anyway
                pass
            except Exception as e:  # optional TensorBoard: any failure is one warning, then off
                self._tensorboard_failed(e)
        self.out = BarOrLines(  # last: a TensorBoard warning comes before the bar
            total,
            start,
            line=partial(print, flush=True),
            use_bar=terminal_bar_possible(),  # looked up here: tests replace it in this module
            unit="step",
            mininterval=0,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}",
        )
        self.bar = self.out.bar
        if self.bar is not None:
            self.bar.set_postfix_str("compiling")

    @property
    def writer(self) -> Any:
        """The first seed's TensorBoard writer (None when TensorBoard is off)."""
        return self.writers[0] if self.writers else None

    @property
    def rate(self) -> float | None:
        """Steps per second since this process started training, compilation excluded."""
        if self._measured_steps == 0 or self._measured_seconds <= 0:
            return None
        return self._measured_steps / self._measured_seconds

    def eta_seconds(self) -> float | None:
        rate = self.rate
        return None if rate is None else max(self.total - self.step, 0) / rate

    def status(self) -> str:
        """``"8.2 step/s, ETA 0:37"`` (or what is known so far)."""
        rate, eta = self.rate, self.eta_seconds()
        if rate is None or eta is None:  # no rate yet (then no ETA either)
            return "measuring the rate"
        return f"{rate:.3g} step/s, ETA {clock(eta)}"

    def tick(self, step: int, compile_seconds: float = 0.0, now: float | None = None) -> None:
        """The loop finished ``step``; ``compile_seconds`` since the last tick are left out of the rate."""
        now = time.monotonic() if now is None else now
        if self._last_tick is not None and compile_seconds == 0.0:
            self._measured_seconds += now - self._last_tick
            self._measured_steps += step - self.step
        self._last_tick, self.step = now, step
        if not self.enabled:
            return
        if self._projection is not None and self._measured_steps >= self._projection_after and self.rate:
            remaining = max(self.total - step, 0)
            self.message(
                f"warning: at {self.rate:.2g} steps/s this run needs {duration(remaining / self.rate)} "
                f"more for its {remaining:,} remaining steps {self._projection}"
            )
            self._projection = None
        if self.bar is not None:
            if now - self._last_shown >= self.refresh_seconds or step == self.total:
                self.bar.n = step
                self.bar.set_postfix_str(self._postfix(), refresh=True)
                self._last_shown = now
        elif now - self._last_plain >= self.plain_seconds:
            self._plain_line()
            self._last_plain = now

    def _plain_line(self) -> None:
        self.message(f"step {self.step}/{self.total} ({100 * self.step / max(self.total, 1):.0f}%): {self.status()}")

    def _postfix(self) -> str:
        extra = getattr(self, "_train_postfix", "")
        return ", ".join(filter(None, [self.status(), extra]))

    def compiling(self, what: str) -> float:
        """Announce a compilation; returns its start time for :meth:`compiled`."""
        self.message(f"compiling {what} ...")
        return time.monotonic()

    def compiled(self, what: str, started: float) -> float:
        seconds = time.monotonic() - started
        self.message(f"compiled {what} in {seconds:.1f} s")
        return seconds

    def _tensorboard_failed(self, error: BaseException) -> None:
        """TensorBoard is a convenience (metrics.jsonl holds everything): one warning, then off."""
        if getattr(self, "_tb_warned", False):
            return
        self._tb_warned = True
        for writer in self.writers:  # all before the list is cleared: whoever sees None may exit at once
            if writer is not None:
                _discard(writer)
        cause = error.strerror if isinstance(error, OSError) and error.strerror else error
        where = self._tb_dirs[0] if len(self._tb_dirs) == 1 else "the seeds' tensorboard/ folders"
        print(
            f"warning: TensorBoard logging to {where} stopped ({cause}); metrics.jsonl " f"keeps every metric",
            file=sys.stderr,
            flush=True,
        )
        self.writers = [None] * len(self._tb_dirs)

    def _thread_failed(self, args: Any) -> None:
        """tensorboardX writes from a thread: a full disk there must not print a traceback."""
        if args.thread is not None and "EventLogger" in type(args.thread).__name__:
            self._tensorboard_failed(args.exc_value)
        elif self._old_hook is not None:
            self._old_hook(args)

    def scalars(self, index: int, step: int, split: str, metrics: dict[str, Any]) -> None:
        """Write ``metrics`` to seed ``index``'s TensorBoard log."""
        writer = self.writers[index] if self.enabled else None
        if writer is None:
            return
        try:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    writer.add_scalar(f"{split}/{k}", v, step)
        except Exception as e:  # optional TensorBoard: any failure is one warning, then off
            self._tensorboard_failed(e)

    def update(self, step: int, split: str, metrics: dict[str, Any], index: int | None = 0, label: str = "") -> None:
        """Show ``metrics`` (and log them to seed ``index``'s TensorBoard; None: not logged)."""
        if not self.enabled:
            return
        if index is not None:
            self.scalars(index, step, split, metrics)
        where = f" [{label}]" if label else ""
        if self.bar is not None:
            if split == "train":
                self._train_postfix = " ".join(f"{k}={metrics[k]:.4g}" for k in ("loss", "accuracy") if k in metrics)
                self.bar.n = step
                self.bar.set_postfix_str(self._postfix(), refresh=True)
            else:
                self.bar.write(f"step {step} {split}{where}: {_fmt(metrics)}")
        else:
            shown = {k: v for k, v in metrics.items() if k != "steps_per_second"}  # one rate: ours
            rate = f" [{self.status()}]" if split == "train" else ""
            self.message(f"step {step} {split}{where}: {_fmt(shown)}{rate}")
            self._last_plain = time.monotonic()

    def message(self, text: str) -> None:
        if self.out is not None:
            self.out.write(text)

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
        for writer in self.writers:
            if writer is not None:
                try:
                    writer.close()
                except Exception as e:  # optional TensorBoard: any failure is one warning, then off
                    self._tensorboard_failed(e)
        if self._old_hook is not None:
            threading.excepthook, self._old_hook = self._old_hook, None


def projection_warning(config: ml_collections.ConfigDict) -> str | None:
    """The progress bar's one-time warning for a paper-scale run on a CPU (days); None elsewhere."""
    if config.preset != "paper" or jax.default_backend() != "cpu":
        return None
    return "on this CPU (paper scale: the :cpu preset trains in minutes; an accelerator: docs/gpu_runbook.md)"


# -- --profile: a jax.profiler trace of a window of steps ----------------------------------------------------
@dataclasses.dataclass
class ProfileWindow:
    start: int  # steps already done when the trace starts
    count: int  # steps traced
    folder: Path | None = None  # the first seed's ``profile/``, known once the runs are set up
    active: bool = False

    @classmethod
    def parse(cls, spec: str, folder: Path | None = None) -> ProfileWindow:
        start, sep, count = spec.partition(":")
        try:
            window = cls(int(start), int(count), folder)
        except ValueError:
            window = None
        if window is None or not sep or window.start < 1 or window.count < 1:
            raise InputError(
                f"--profile={spec!r}: expected START:COUNT with START >= 1 (the first step "
                f"compiles) and COUNT >= 1, e.g. --profile=20:10"
            )
        return window

    def check(self, config: ml_collections.ConfigDict) -> ProfileWindow:
        """Refuse a window that would time validation, checkpoints or steps past the end (else: this window)."""
        last = self.start + self.count
        if last > config.num_train_steps:
            raise InputError(
                f"--profile={self.start}:{self.count} ends at step {last}, after "
                f"num_train_steps={config.num_train_steps}: choose an earlier window"
            )
        for every, name in ((config.eval_every, "eval_every"), (config.checkpoint_every, "checkpoint_every")):
            hit = next((s for s in range(self.start + 1, last) if s % every == 0), None)
            if hit is not None:
                raise InputError(
                    f"--profile={self.start}:{self.count} covers step {hit}, a multiple of "
                    f"{name}={every}, whose extra work would be timed as training: choose a "
                    f"window between two multiples of {name} (the last traced step may be one)"
                )
        return self

    def before_step(self, done: int) -> None:
        if done == self.start and not self.active:
            assert self.folder is not None, "the window's folder is set once the runs are"
            self.folder.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.folder), create_perfetto_trace=True)
            self.active = True

    def after_step(self, done: int, state: object) -> str | None:
        """After the window's last step, wait for the device (its kernels traced) and stop; the line to show."""
        if self.active and done == self.start + self.count:
            jax.block_until_ready(state)
            self.stop()
            return (
                f"profile of steps {self.start + 1}-{done} written to {self.folder}; summary: "
                f"python -m lra_lab.bench.profile_summary {self.folder}"
            )
        return None

    def stop(self) -> None:
        if self.active:
            self.active = False
            jax.profiler.stop_trace()
