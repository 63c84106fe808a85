"""Each seed's run, built in one place before anything compiles: config checks, data, model shapes,
workdirs and locks, resume decisions.

``set_up_runs`` (the loop's one call) checks the ``--profile`` window, then ``prepare`` (all that can fail on bad
input: config checks naming the field, data, shapes, memory), ``open_runs`` (workdirs, locks) and ``plan_seeds``
(resume decisions, lra.training.checkpoints); nothing here compiles. With ``--config.seeds=0,1,2`` each seed is a run
of its own, with exactly its single-seed command's config, workdir and files (docs/design.md, Seeds). ``check_fits``
refuses a model that surely cannot fit (its estimate is a lower bound) before the first allocation would block.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from lra import attention as attention_registry
from lra import cpu_speed
from lra import data as data_registry
from lra.attention.base import check_heads
from lra.console import binary_bytes
from lra.data import TaskData, load_task
from lra.defaults import option_type_problem
from lra.errors import InputError, RunStateError, StorageError
from lra.model import DUAL_COMBINES, EMBEDDINGS, HEAD_ACTIVATIONS, NORMS, PARAM_INITS, POOLINGS, build_model
from lra.training import checkpoints
from lra.training.checkpoints import Checkpoints, ResumePlan
from lra.training.provenance import append_session
from lra.training.run_files import (
    MetricsLog,
    WorkdirLock,
    config_to_dict,
    remove_run,
    slug,
    write_json_atomic,
)
from lra.training.step import check_split


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


def check_workdir_path(workdir: Path) -> None:
    """A workdir that cannot be a directory fails before data loading."""
    for parent in (workdir, *workdir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise StorageError(workdir, NotADirectoryError(f"{parent} is a file, not a directory"))
            break


DEEP_MODEL_BLOCKS = 64  # deeper than any paper's encoder: its trace is long enough to say so


def prepare(config: ml_collections.ConfigDict, workdirs: list[Path]) -> tuple[TaskData, Any, Any]:
    """Everything that can fail on bad input, before a workdir is touched or anything compiled."""
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
    """The progress bar's one-time warning for a paper-scale run on a CPU (days); None elsewhere."""
    if config.preset != "paper" or jax.default_backend() != "cpu":
        return None
    return "on this CPU (paper scale: the :cpu preset trains in minutes; an accelerator: docs/gpu_runbook.md)"


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
    window: ProfileWindow | None


def set_up_runs(
    config: ml_collections.ConfigDict,
    workdir: str | Path | None,
    start_over: bool,
    profile: str | None,
    primary: bool,
    runs: list[SeedRun],
) -> RunSetup:
    """Every seed's run (module docstring); locks go into ``runs``, which the caller's ``finally`` releases."""
    seeds = run_seeds(config)
    workdirs = seed_workdirs(config, workdir)
    window = None
    if profile:
        window = ProfileWindow.parse(profile, workdirs[0] / "profile")
        window.check(config)
    data, model, param_shapes = prepare(config, workdirs)
    open_runs(config, seeds, workdirs, primary, start_over, runs)
    results, training, start = plan_seeds(config, runs, primary)
    return RunSetup(data, model, param_shapes, results, training, start, window)


# -- --profile: a jax.profiler trace of a window of steps ----------------------------------------------------
@dataclasses.dataclass
class ProfileWindow:
    start: int  # steps already done when the trace starts
    count: int  # steps traced
    folder: Path
    active: bool = False

    @classmethod
    def parse(cls, spec: str, folder: Path) -> ProfileWindow:
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

    def check(self, config: ml_collections.ConfigDict) -> None:
        """Refuse a window that would time validation, checkpoints or steps past the end."""
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

    def before_step(self, done: int) -> None:
        if done == self.start and not self.active:
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


# -- config checks before any data is read -------------------------------------------------------------------
class ConfigError(InputError):
    """An invalid config; the message names the field."""


def _positive(config: ml_collections.ConfigDict, *names: str) -> None:
    for name in names:
        node = config
        for part in name.split("."):
            node = node[part]
        if not isinstance(node, int) or node <= 0:
            raise ConfigError(f"config.{name} must be a positive integer, got {node!r}")


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
    """Raise ConfigError (or ValueError from a registry) for an invalid config."""
    try:
        data_registry.get_loader(config.task)
    except ValueError as e:
        raise ConfigError(f"config.task: {e}") from None
    m = config.model
    try:
        attn_cls = attention_registry.get(m.attention)
    except ValueError as e:
        raise ConfigError(f"config.model.attention: {e}") from None
    try:
        check_heads(m.num_heads, m.qkv_dim)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    valid = set(attention_registry.option_names(m.attention))
    unknown = sorted(set(m.attention_kwargs.keys()) - valid)
    if unknown:
        raise ConfigError(
            f"config.model.attention_kwargs: {', '.join(unknown)} not option(s) of attention "
            f"{m.attention!r}; valid: {', '.join(sorted(valid)) or '(none)'}"
        )
    for name, value in m.attention_kwargs.items():
        problem = option_type_problem(m.attention, name, value)
        if problem:
            raise ConfigError(f"config.model.attention_kwargs.{problem}")
    # the family checks its own option values (e.g. ranges) when constructed
    try:
        attn_cls(
            num_heads=m.num_heads, qkv_dim=m.qkv_dim, dropout_rate=m.attention_dropout_rate, **dict(m.attention_kwargs)
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config.model.attention_kwargs for {m.attention!r}: {e}") from None
    for field, value, allowed in (
        ("model.norm", m.norm, NORMS),
        ("model.pooling", m.pooling, POOLINGS),
        ("model.dual_combine", m.dual_combine, DUAL_COMBINES),
        ("model.dtype", m.dtype, ("float32", "bfloat16", "float16")),
        ("model.head_activation", m.head_activation, HEAD_ACTIVATIONS),
        ("model.embedding", m.embedding, EMBEDDINGS),
        ("model.param_init", m.param_init, PARAM_INITS),
    ):
        if value not in allowed:
            raise ConfigError(f"config.{field}={value!r} is not one of {', '.join(allowed)}")
    if m.pooling == "memory" and not attn_cls.uses_memory:
        memory_families = sorted(n for n, c in attention_registry.ATTENTIONS.items() if c.uses_memory)
        raise ConfigError(
            f"config.model.pooling='memory' needs a family with a memory ({', '.join(memory_families)}); "
            f"{m.attention!r} has none: use pooling 'cls' or 'mean'"
        )
    if m.attention_kwargs.get("implementation") == "cudnn" and m.dtype == "float32":
        raise ConfigError(
            "attention_kwargs.implementation='cudnn' has no float32 kernel: set "
            "config.model.dtype=bfloat16 (or implementation=xla)"
        )
    if m.embedding == "linear" and config.task not in ("image", "pathfinder", "pathx"):
        raise ConfigError(
            f"config.model.embedding='linear' embeds pixel values (tasks image, pathfinder, pathx); task "
            f"{config.task!r} has symbols: use 'table'"
        )
    for name in ("memory_init_scale", "pixel_std"):
        if not m[name] > 0:  # also refuses NaN
            raise ConfigError(f"config.model.{name} must be > 0, got {m[name]}")
    for name in ("gelu_approximate", "zero_padding_embedding", "cls_position"):
        if not isinstance(m[name], bool):
            raise ConfigError(f"config.model.{name} must be true or false, got {m[name]!r}")
    if not isinstance(m.head_hidden_layers, int) or m.head_hidden_layers < 0:
        raise ConfigError(f"config.model.head_hidden_layers must be an integer >= 0, got {m.head_hidden_layers!r}")
    if config.log_memory_stats and not attn_cls.uses_memory:
        raise ConfigError(
            f"config.log_memory_stats=True needs a memory family (luna, convluna); "
            f"{m.attention!r} has no memory: set it to False"
        )
    _positive(
        config,
        "model.num_layers",
        "model.num_heads",
        "model.emb_dim",
        "model.qkv_dim",
        "model.mlp_dim",
        "model.max_len",
        "data.max_len",
        "batch_size",
        "eval_batch_size",
        "num_train_steps",
        "eval_every",
        "checkpoint_every",
        "log_every",
        "data.num_train",
        "data.num_val",
        "data.num_test",
    )  # an empty split selects or reports nothing
    from lra.defaults import PRESETS

    variant = config.get("variant", "unnamed")
    if not isinstance(variant, str) or not variant.strip():  # it names the run's row and folder
        raise ConfigError(f"config.variant must name the row (e.g. 'ConvLuna-16'), got {variant!r}")
    source = config.data.get("source", "auto")
    if source not in ("auto", "release", "generated"):  # checked here, so the sweep refuses it too (SO2)
        raise ConfigError(f"config.data.source={source!r}: valid values are auto, release, generated")

    if config.preset not in PRESETS:  # it names the default workdir: a path there would write outside runs/
        raise ConfigError(f"config.preset={config.preset!r} is not one of {', '.join(PRESETS)}")
    if (
        not isinstance(config.max_eval_batches, int)
        or isinstance(config.max_eval_batches, bool)
        or (config.max_eval_batches < 0)
    ):  # a negative count would evaluate one batch, recorded as the split's accuracy
        raise ConfigError(
            f"config.max_eval_batches must be an integer >= 0 (0: the whole split), got {config.max_eval_batches!r}"
        )
    if config.num_train_steps >= 2**31:  # the step counter is int32 (checkpoints, schedules)
        raise ConfigError(
            f"config.num_train_steps must be below 2^31 (the step counter's range), got " f"{config.num_train_steps}"
        )
    for name in ("model.dropout_rate", "model.attention_dropout_rate"):
        rate = m[name.split(".")[1]]
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"config.{name} must be in [0, 1), got {rate}")
    if config.data.max_len > m.max_len:
        raise ConfigError(
            f"sequences of config.data.max_len={config.data.max_len} are longer than the position "
            f"table config.model.max_len={m.max_len}: raise config.model.max_len"
        )
    for name in ("batch_size", "eval_batch_size"):
        if config[name] % num_devices:
            raise ConfigError(
                f"config.{name}={config[name]} is not divisible by the {num_devices} devices: "
                f"use a multiple of {num_devices}"
            )
    try:
        check_split(int(config.batch_size), config.get("microbatches", 1), num_devices)
    except InputError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(m.get("remat", False), bool):
        raise ConfigError(f"config.model.remat must be true or false, got {m.remat!r}")
    _check_seeds(config)
    _finite(config, "learning_rate", "weight_decay", "grad_clip_norm")
    if config.learning_rate <= 0 or config.weight_decay < 0 or config.warmup_steps < 0:
        raise ConfigError("config.learning_rate must be > 0, weight_decay and warmup_steps >= 0")


def _finite(config: ml_collections.ConfigDict, *names: str) -> None:
    """NaN passes every ``<=``/``<`` range check, so finiteness is checked first."""
    for name in names:
        value = config.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"config.{name} must be a finite number, got {value!r}")


def _check_seeds(config: ml_collections.ConfigDict) -> None:
    """``seed`` and ``seeds``: integers in [0, 2^31), no seed listed twice (two runs in one workdir)."""
    seeds = tuple(config.get("seeds", ()) or ())
    for value in (config.seed, *seeds):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**31:
            raise ConfigError(
                f"seeds must be integers in [0, 2^31), got {value!r} "
                f"(config.seed={config.seed!r}, config.seeds={seeds!r}); e.g. --config.seeds=0,1,2,3,4"
            )
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"config.seeds={seeds!r} lists a seed twice: each seed is one run with its own workdir")


# -- memory: refuse what cannot fit --------------------------------------------------------------------------
_BYTES_PER_FLOAT = 4


def device_memory_bytes() -> int | None:
    """Memory of one device: the accelerator's limit, or this host's RAM (cgroup limit included)."""
    device = jax.devices()[0]
    try:
        stats = device.memory_stats() or {}
    except Exception:  # some backends do not implement it
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform != "cpu":
        return None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    limit = Path("/sys/fs/cgroup/memory.max")
    try:
        value = limit.read_text().strip()
        if value.isdigit():
            total = min(total, int(value))
    except OSError:
        pass
    return int(total)


def estimate_bytes(
    param_shapes: Any,
    config: ml_collections.ConfigDict,
    max_len: int,
    dual: bool,
    num_devices: int = 1,
    num_seeds: int = 1,
) -> dict[str, int]:
    """A lower bound on one device's training memory: parameters x4 (weights, gradients, Adam's two moments) and,
    per layer, each token's block input and MLP hidden activations; per seed of a vmapped program."""
    params = num_seeds * sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in jax.tree.leaves(param_shapes))
    m = config.model
    tokens = num_seeds * max(config.batch_size // num_devices, 1) * max_len * (2 if dual else 1)
    activations = tokens * (m.emb_dim + m.mlp_dim) * m.num_layers * _BYTES_PER_FLOAT
    return {"parameters": params, "state": 4 * params, "activations": activations, "total": 4 * params + activations}


def check_fits(
    param_shapes: Any, config: ml_collections.ConfigDict, max_len: int, dual: bool, num_seeds: int = 1
) -> None:
    """ConfigError, with the estimate, if training surely does not fit one device's memory."""
    available = device_memory_bytes()
    if available is None:
        return
    est = estimate_bytes(param_shapes, config, max_len, dual, jax.device_count(), num_seeds)
    if est["total"] > available:
        m = config.model
        raise ConfigError(
            f"this model cannot fit: training needs at least {binary_bytes(est['total'], digits=1)} per device "
            f"({binary_bytes(est['parameters'], digits=1)} of parameters x4 for weights, gradients and Adam's moments, "
            f"+ {binary_bytes(est['activations'], digits=1)} of activations), "
            f"the device has {binary_bytes(available, digits=1)}. "
            + (f"It trains {num_seeds} seeds in one program: list fewer in config.seeds. " if num_seeds > 1 else "")
            + f"Lower config.model.max_len={m.max_len} (the position table), config.batch_size="
            f"{config.batch_size}, config.model.emb_dim={m.emb_dim}, mlp_dim={m.mlp_dim} or num_layers={m.num_layers}."
        )


def check_before_data(config: ml_collections.ConfigDict, num_seeds: int = 1) -> None:
    """ConfigError, before any data is generated or read, if the position table alone (max_len x emb_dim) cannot fit."""
    m = config.model
    table = [jax.ShapeDtypeStruct((int(m.max_len), int(m.emb_dim)), np.float32)]
    check_fits(table, config, 1, False, num_seeds)  # activations of one token: a lower bound
