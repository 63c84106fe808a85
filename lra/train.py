"""Train, evaluate and log one run: ``python -m lra.train --config configs/X.py[:OPTIONS]``.

``train_and_evaluate(config, workdir)`` is the library entry point; the absl main is thin.

- jit-compiled train/eval steps, data parallel over every device (a 1-D mesh; batch sharded
  with NamedSharding, parameters replicated); multi-host via jax.distributed.initialize().
- AdamW + Table 2's schedule; validation every ``eval_every`` steps; the best-validation
  checkpoint kept; test accuracy measured once, at that checkpoint (never selected on test).
- Rerunning the same command resumes from the latest checkpoint. Batches and dropout keys are
  pure functions of (seed, step), so a resumed run ends exactly as an uninterrupted one.
- SIGTERM/SIGINT save a checkpoint and exit; a non-finite loss or weight stops the run and keeps
  the last good checkpoint (no state with a NaN is ever saved).
- One process per workdir (lra.workdir_lock); what a rerun may do with an existing workdir is
  decided, before anything is written, by lra.resume; checkpoints are checksummed
  (lra.checkpoints, lra.integrity). Exit codes: lra.run_errors.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from lra import distributed, resume
from lra.checkpoints import Checkpoints
from lra.data import TaskData, load_task
from lra.data.batching import TrainBatches, eval_batches
from lra.memory_estimate import check_fits
from lra.memory_stats import log_memory_stats
from lra.model import build_model
from lra.progress import Progress
from lra.run_errors import EXIT_INVALID, Interrupted, NonFiniteLossError, StorageError, describe, exit_code
from lra.run_files import MetricsLog, config_to_dict, git_commit, remove_run, write_json_atomic
from lra.schedules import lra_schedule, make_optimizer
from lra.stop_signals import StopSignals
from lra.validation import validate_config
from lra.workdir_lock import WorkdirLock

__all__ = ["Interrupted", "NonFiniteLossError", "train_and_evaluate", "make_steps", "evaluate_split"]


def default_workdir(config: ml_collections.ConfigDict) -> Path:
    """``runs/<task>_<variant>[_<preset>]/seed<k>``: distinct variants never share a workdir."""
    slug = re.sub(r"[^a-z0-9]+", "-", config.variant.lower()).strip("-")
    preset = "" if config.preset == "paper" else f"_{config.preset}"
    return Path("runs") / f"{config.task}_{slug}{preset}" / f"seed{config.seed}"


def _state_like(params: Any, tx: optax.GradientTransformation) -> dict[str, Any]:
    return {
        "params": params,
        "opt_state": tx.init(params),
        "step": jnp.zeros((), jnp.int32),
        "best_val_accuracy": jnp.asarray(-1.0, jnp.float32),
        "best_step": jnp.zeros((), jnp.int32),
        "train_seconds": jnp.zeros((), jnp.float32),  # step time without compilation, all sessions
        "timed_steps": jnp.zeros((), jnp.int32),
    }


def _weighted_metrics(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> dict[str, jax.Array]:
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss_sum": jnp.sum(losses * weights), "correct": jnp.sum(correct * weights), "count": jnp.sum(weights)}


def make_steps(model: Any, tx: optax.GradientTransformation, config: ml_collections.ConfigDict, mesh: Any):
    """The jit-compiled train and eval steps for ``model`` on ``mesh``."""
    repl, sharded = distributed.replicated(mesh), distributed.batch_sharded(mesh)
    base_key = jax.random.key(config.seed)
    schedule = lra_schedule(config.learning_rate, config.warmup_steps)

    def train_step(state: dict[str, Any], batch: dict[str, jax.Array]) -> tuple[dict[str, Any], dict[str, jax.Array]]:
        step_key = jax.random.fold_in(base_key, state["step"])
        dropout_key, attention_key = jax.random.split(step_key)

        def loss_fn(params: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
            logits = model.apply({"params": params}, batch["inputs"], deterministic=False,
                                 rngs={"dropout": dropout_key, "attention": attention_key})
            m = _weighted_metrics(logits, batch["labels"], batch["weights"])
            return m["loss_sum"] / jnp.maximum(m["count"], 1.0), m

        (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new_state = dict(state, params=optax.apply_updates(state["params"], updates),
                         opt_state=opt_state, step=state["step"] + 1)
        metrics = {"loss": loss, "accuracy": m["correct"] / jnp.maximum(m["count"], 1.0),
                   "learning_rate": schedule(state["step"]),
                   # the loss is of the weights before the update: check the weights after it too
                   "state_finite": _all_finite((new_state["params"], new_state["opt_state"]))}
        return new_state, metrics

    def eval_step(params: Any, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
        logits = model.apply({"params": params}, batch["inputs"], deterministic=True,
                             rngs={"attention": base_key})
        return _weighted_metrics(logits, batch["labels"], batch["weights"])

    train = jax.jit(train_step, in_shardings=(repl, sharded), out_shardings=(repl, repl), donate_argnums=0)
    evaluate = jax.jit(eval_step, in_shardings=(repl, sharded), out_shardings=repl)
    return train, evaluate


def _all_finite(tree: Any) -> jax.Array:
    """1.0 if every floating-point value in ``tree`` is finite, else 0.0 (on device, fused)."""
    checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(checks)).astype(jnp.float32) if checks else jnp.ones((), jnp.float32)


def evaluate_split(eval_step: Any, params: Any, split: Any, config: ml_collections.ConfigDict, sharding: Any) -> dict[str, float]:
    """Accuracy and loss over a whole split (or its first ``max_eval_batches`` batches)."""
    totals = {"loss_sum": 0.0, "correct": 0.0, "count": 0.0}
    pending = []
    for batch in eval_batches(split, config.eval_batch_size, config.data.buckets, config.data.max_len,
                              config.max_eval_batches):
        pending.append(eval_step(params, distributed.shard_batch(batch, sharding)))
    for m in jax.device_get(pending):
        for k in totals:
            totals[k] += float(m[k])
    count = max(totals["count"], 1.0)
    return {"accuracy": totals["correct"] / count, "loss": totals["loss_sum"] / count}


def check_workdir_path(workdir: Path) -> None:
    """A workdir that cannot be a directory fails here, before data loading."""
    for parent in (workdir, *workdir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise StorageError(workdir, NotADirectoryError(f"{parent} is a file, not a directory"))
            break


def prepare(config: ml_collections.ConfigDict, workdir: Path) -> tuple[TaskData, Any, Any]:
    """Everything that can fail on bad input, before the workdir is touched or anything compiled:
    config, workdir path, data, shapes and whether they fit the device."""
    validate_config(config, num_devices=jax.device_count())
    check_workdir_path(workdir)
    data = load_task(config)
    if data.max_len > config.model.max_len:
        raise ValueError(f"task {config.task} has sequences of length {data.max_len} > config.model.max_len="
                         f"{config.model.max_len}: raise config.model.max_len")
    model = build_model(config.model, data.vocab_size, data.num_classes, data.dual)
    sample = np.zeros((1,) + data.train.inputs.shape[1:], np.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), sample)["params"])  # traces, no compile
    check_fits(shapes, config, data.max_len, data.dual)
    return data, model, shapes


def open_workdir(workdir: Path, primary: bool, start_over: bool) -> WorkdirLock | None:
    """Create ``workdir`` and take its lock (the primary process), then, if asked, empty it."""
    if not primary:
        return None
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(workdir, e) from None
    lock = WorkdirLock(workdir).acquire()
    if start_over:
        removed = remove_run(workdir)
        if removed:
            print(f"--start_over: removed {', '.join(removed)} from {workdir}", file=sys.stderr, flush=True)
    return lock


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path, start_over: bool = False) -> dict[str, Any]:
    """Train (or resume) a run in ``workdir`` and return its result.json contents.

    ``start_over`` deletes a previous run's files first (the only way to reuse a workdir whose
    run cannot be resumed)."""
    stop = StopSignals().install()  # first: a signal during setup or compilation stops cleanly
    lock = None
    try:
        distributed.initialize()
        workdir = Path(workdir)
        primary = jax.process_index() == 0
        data, model, param_shapes = prepare(config, workdir)
        lock = open_workdir(workdir, primary, start_over)
        checkpoints = Checkpoints(workdir)
        try:
            return _train(config, workdir, primary, data, model, param_shapes, stop, checkpoints)
        finally:
            checkpoints.close()
    finally:
        stop.restore()
        if lock is not None:
            lock.release()


def _train(config: ml_collections.ConfigDict, workdir: Path, primary: bool, data: TaskData, model: Any,
           param_shapes: Any, stop: StopSignals, checkpoints: Checkpoints) -> dict[str, Any]:
    """Resume or start the run the workdir allows (lra.resume), train, test the best checkpoint."""
    plan = resume.plan_resume(workdir, config, checkpoints)  # raises before anything is written
    if plan.result is not None:
        resume.report_damaged(plan, checkpoints, set_aside=False)
        print(f"{workdir} already holds a finished run; its result.json is unchanged.", flush=True)
        return plan.result
    if primary:
        resume.apply(plan, workdir, checkpoints)
        write_json_atomic(workdir / "config.json", config_to_dict(config))

    mesh = distributed.data_mesh()
    repl, sharded = distributed.replicated(mesh), distributed.batch_sharded(mesh)
    tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
    train_step, eval_step = make_steps(model, tx, config, mesh)
    memory_probe = log_memory_stats(model, config, data.validation, sharded)

    init_key = jax.random.fold_in(jax.random.key(config.seed), 1_000_003)
    sample = jnp.zeros((1,) + data.train.inputs.shape[1:], jnp.int32)
    init = jax.jit(lambda: _state_like(model.init(init_key, sample)["params"], tx), out_shardings=repl)
    state = init()
    if plan.step is not None:
        state = jax.device_put(checkpoints.restore("latest", plan.step, state), repl)
    else:  # a checkpoint before the first metric: a workdir with metrics always has one to resume
        checkpoints.save_latest(0, state)
    start = int(state["step"])
    if start == config.num_train_steps:
        print(f"{workdir}: training is complete; writing result.json from the best checkpoint", flush=True)
    metrics_log = MetricsLog(workdir / "metrics.jsonl")
    if primary:
        metrics_log.truncate_after(start)
    num_params = int(sum(np.prod(s.shape) for s in jax.tree.leaves(param_shapes)))

    batches = TrainBatches(data.train, config.batch_size, config.seed, config.data.buckets, config.data.max_len)
    progress = Progress(config.num_train_steps, start, workdir, enabled=primary)
    progress.message(
        f"{config.variant} on {config.task} ({config.preset}): {num_params:,} parameters, "
        f"{jax.device_count()} x {jax.devices()[0].device_kind}, "
        + (f"resuming at step {start}" if start else "starting") + f"; workdir {workdir}"
    )

    def put(value: float, dtype: Any) -> jax.Array:
        """A host scalar placed like the rest of the state (else the step would recompile)."""
        return jax.device_put(np.asarray(value, dtype), repl)

    pending: list[tuple[int, dict[str, jax.Array]]] = []
    train_seconds, timed_steps = float(state["train_seconds"]), int(state["timed_steps"])
    compile_seconds, compiled_shapes = 0.0, set()
    window_start, window_steps = time.perf_counter(), 0

    def flush_train_metrics() -> None:
        """Fetch pending step metrics, check them, log their mean."""
        nonlocal window_start, window_steps
        if not pending:
            return
        fetched = jax.device_get([m for _, m in pending])
        for (step, _), m in zip(pending, fetched):
            if not np.isfinite(m["loss"]):
                raise NonFiniteLossError(f"training loss became {m['loss']} at step {step}; {last_good()}")
            if m.pop("state_finite") != 1.0:
                raise NonFiniteLossError(f"the weights or optimizer state became NaN/Inf in the update of "
                                         f"step {step}; {last_good()}")
        elapsed = time.perf_counter() - window_start
        record = {k: float(np.mean([m[k] for m in fetched])) for k in fetched[0]}
        record.update(step=pending[-1][0], split="train")
        if window_steps:
            record["steps_per_second"] = window_steps / max(elapsed, 1e-9)
        pending.clear()
        if primary:
            metrics_log.write([record])
        progress.update(record["step"], "train", {k: v for k, v in record.items() if k not in ("step", "split")})
        window_start, window_steps = time.perf_counter(), 0

    def last_good() -> str:
        step = checkpoints.latest_step("latest")  # every saved state was checked finite
        kept = ("no checkpoint was saved" if step is None else
                f"the last good checkpoint, step {step}, is kept in {checkpoints.path('latest', step)}")
        return (f"{kept}. Lower --config.learning_rate or set --config.grad_clip_norm, then use a new workdir "
                f"(or --start_over).")

    def save_latest(step: int) -> None:
        flush_train_metrics()  # never checkpoint a state whose loss was not checked
        state["train_seconds"] = put(train_seconds, np.float32)
        state["timed_steps"] = put(timed_steps, np.int32)
        checkpoints.save_latest(step, state)

    try:
        stop.training = True
        step = start
        while step < config.num_train_steps:
            t0 = time.perf_counter()
            host_batch = batches.batch(step)
            shape = host_batch["inputs"].shape
            new_shape = shape not in compiled_shapes
            if new_shape:  # the first step of each batch shape compiles: say so, and time it apart
                what = f"the training step for batch shape {tuple(shape)}"
                compiling = progress.compiling(what)
            state, metrics = train_step(state, distributed.shard_batch(host_batch, sharded))
            step += 1
            pending.append((step, metrics))
            if new_shape:
                jax.block_until_ready(metrics)
                compiled_shapes.add(shape)
                compile_seconds += time.perf_counter() - t0
                progress.compiled(what, compiling)
                window_start = time.perf_counter()
            else:
                window_steps += 1
            progress.tick(step, compile_seconds=(time.perf_counter() - t0) if new_shape else 0.0)
            if step % config.log_every == 0 or step == config.num_train_steps:
                flush_train_metrics()
            if not new_shape:
                train_seconds += time.perf_counter() - t0
                timed_steps += 1

            if step % config.eval_every == 0 or step == config.num_train_steps:
                flush_train_metrics()
                val = evaluate_split(eval_step, state["params"], data.validation, config, sharded)
                if not all(np.isfinite(v) for v in val.values()):  # never select on a NaN
                    raise NonFiniteLossError(f"validation loss became {val['loss']} at step {step}; {last_good()}")
                records = [{"step": step, "split": "validation", **val}]
                if memory_probe is not None:
                    records.append({"step": step, "split": "memory", **memory_probe(state["params"])})
                if primary:
                    metrics_log.write(records)
                progress.update(step, "validation", val)
                if val["accuracy"] > float(state["best_val_accuracy"]):
                    state["best_val_accuracy"] = put(val["accuracy"], np.float32)
                    state["best_step"] = put(step, np.int32)
                    checkpoints.save_best(step, {"params": state["params"], "step": state["step"]})
                save_latest(step)
                window_start = time.perf_counter()
            elif step % config.checkpoint_every == 0:
                save_latest(step)
                window_start = time.perf_counter()
            if stop.signum is not None:
                save_latest(step)
                raise Interrupted(stop.signum, step)

        stop.training = False  # a signal during the test evaluation stops at once: nothing to save
        best = checkpoints.restore("best", int(state["best_step"]), {"params": state["params"], "step": state["step"]})
        test = evaluate_split(eval_step, best["params"], data.test, config, sharded)
        if primary:
            metrics_log.write([{"step": int(state["best_step"]), "split": "test", **test}])
        progress.update(int(state["best_step"]), "test", test)
        result = {
            "task": config.task,
            "attention": config.model.attention,
            "variant": config.variant,
            "seed": config.seed,
            "best_val_accuracy": float(state["best_val_accuracy"]),
            "best_step": int(state["best_step"]),
            "test_accuracy": test["accuracy"],
            "test_loss": test["loss"],
            "num_train_steps": config.num_train_steps,
            "train_seconds": train_seconds,
            # Steps timed without compilation; a resumed run counts the steps of each process.
            "steps_per_second": timed_steps / max(train_seconds, 1e-9),
            "compile_seconds": compile_seconds,
            "num_params": num_params,
            "config_preset": config.preset,
            "device_kind": jax.devices()[0].device_kind,
            "num_devices": jax.device_count(),
            "jax_version": jax.__version__,
            "git_commit": git_commit(),
        }
        if primary:
            write_json_atomic(workdir / "result.json", result)
        progress.message(f"test accuracy {test['accuracy']:.4f} at the best validation step "
                         f"{result['best_step']} (validation {result['best_val_accuracy']:.4f}); {workdir}/result.json")
        return result
    finally:
        progress.close()


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def quiet_library_errors() -> None:
    """Orbax, asyncio and thread pools log a failed write (a full disk) from their worker threads,
    each with a traceback; the run reports it once, as an ``error:`` line naming the path."""
    import logging as pylogging

    class _FromWorkers(pylogging.Filter):
        def __init__(self, path_part: str):
            super().__init__()
            self.path_part = path_part

        def filter(self, record: pylogging.LogRecord) -> bool:
            return record.levelno < pylogging.ERROR or self.path_part not in record.pathname

    pylogging.getLogger("absl").addFilter(_FromWorkers("orbax"))
    for name in ("asyncio", "concurrent.futures"):
        pylogging.getLogger(name).addFilter(_FromWorkers(""))
    # tensorstore's callbacks, finishing after orbax closed its event loop, report it as unraisable
    default_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        value = unraisable.exc_value
        if not (isinstance(value, RuntimeError) and str(value) == "Event loop is closed"):
            default_hook(unraisable)

    sys.unraisablehook = hook
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited")


def main(argv: list[str]) -> None:
    from absl import flags, logging

    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint at INFO
    quiet_library_errors()

    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}", EXIT_INVALID)
    config = flags.FLAGS.config
    workdir = Path(flags.FLAGS.workdir) if flags.FLAGS.workdir else default_workdir(config)
    try:
        train_and_evaluate(config, workdir, start_over=flags.FLAGS.start_over)
    except Interrupted as e:
        then = ("checkpoint saved in" if e.saved else "nothing needed saving in") + f" {workdir}"
        print(f"{e}; {then}. Rerun the same command to resume.", file=sys.stderr, flush=True)
        sys.exit(exit_code(e))
    except (ValueError, RuntimeError, OSError) as e:  # every class has its code (lra.run_errors)
        try:
            code = exit_code(e)
        except TypeError:
            raise e from None  # a bug, not a run error: keep the traceback
        _fail(describe(e), code)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing, with a bad flag, config file or config field as one ``error:`` line (exit 2)."""
    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as e:  # ml_collections puts the config file's traceback in the message
        lines = [line for line in str(e).splitlines() if line.strip()]
        if any(line.startswith("Traceback") for line in lines):
            lines = [lines[0].rstrip(":"), lines[-1]]
        _fail(": ".join(lines), EXIT_INVALID)
    except (AttributeError, KeyError) as e:  # ml_collections: a --config.<field> the config lacks
        name = str(e).strip("\"'")
        given = [a.split("=")[0] for a in argv if a.startswith("--config.") and name in a.split("=")[0].split(".")]
        _fail(f"{given[0] if given else 'a --config override'}: the config has no field {name!r} "
              f"(fields: lra/defaults.py)", EXIT_INVALID)
    except (ValueError, TypeError, OSError) as e:  # the config file or its options
        _fail(f"--config: {e}", EXIT_INVALID)
    return []


def _define_flags() -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/listops_transformer.py:cpu", lock_config=True)
    flags.DEFINE_string("workdir", None, "Run directory (default: runs/<task>_<variant>[_<preset>]/seed<k>).")
    flags.DEFINE_bool("start_over", False, "Delete the workdir's previous run (config, metrics, checkpoints, "
                      "result) and train from step 0; needed when that run cannot be resumed.")
    flags.mark_flags_as_required(["config"])


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main, flags_parser=parse_flags)
