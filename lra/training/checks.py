"""Everything bad input can fail, checked before a workdir is touched or anything compiles.

``prepare`` (lra.training.runs.set_up_runs calls it once it knows the seeds' workdirs): each config field's type and
range (``check_fields``, the error naming it), the workdirs' paths, the position table's memory before any data is
generated, the names the config looks up in the registries (``check_names``: task, family, options, heads), the
task's data, the model and its parameter shapes (traced, not compiled), and ``check_fits``, which refuses a model
that surely cannot fit one device (its estimate is a lower bound) before the first allocation would block.
``validate_config`` is the two config checks in that order; lra.evaluate, the sweeps and the preflight call it too.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from lra import attention as attention_registry
from lra import data as data_registry
from lra.attention.base import check_heads
from lra.console import binary_bytes
from lra.data import TaskData, load_task
from lra.defaults import option_type_problem
from lra.errors import InputError, StorageError
from lra.model import DUAL_COMBINES, EMBEDDINGS, HEAD_ACTIVATIONS, NORMS, PARAM_INITS, POOLINGS, build_model
from lra.training.step import check_split


def check_workdir_path(workdir: Path) -> None:
    """A workdir that cannot be a directory fails before data loading."""
    for parent in (workdir, *workdir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise StorageError(workdir, NotADirectoryError(f"{parent} is a file, not a directory"))
            break


DEEP_MODEL_BLOCKS = 64  # deeper than any paper's encoder: its trace is long enough to say so


def prepare(config: ml_collections.ConfigDict, workdirs: list[Path]) -> tuple[TaskData, Any, Any]:
    """Everything that can fail on bad input, before a workdir is touched or anything compiled: what the config
    alone can say first, then what the registries, the data and the model's shapes say."""
    check_fields(config, num_devices=jax.device_count())  # with check_names below: validate_config
    for workdir in workdirs:
        check_workdir_path(workdir)
    check_before_data(config, num_seeds=len(workdirs))  # a billion examples or positions: refused before generating
    check_names(config, num_devices=jax.device_count())
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
    """Raise ConfigError (or ValueError from a registry) for an invalid config: each field's type and range first
    (a count that is not a positive integer is named before anything uses it), then the names it looks up."""
    check_fields(config, num_devices)
    check_names(config, num_devices)


def check_fields(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
    """Each field's type, range and agreement with the others, without a registry: ConfigError naming it."""
    m = config.model
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
    for name in ("memory_init_scale", "pixel_std"):
        if not m[name] > 0:  # also refuses NaN
            raise ConfigError(f"config.model.{name} must be > 0, got {m[name]}")
    for name in ("gelu_approximate", "zero_padding_embedding", "cls_position"):
        if not isinstance(m[name], bool):
            raise ConfigError(f"config.model.{name} must be true or false, got {m[name]!r}")
    if not isinstance(m.head_hidden_layers, int) or m.head_hidden_layers < 0:
        raise ConfigError(f"config.model.head_hidden_layers must be an integer >= 0, got {m.head_hidden_layers!r}")
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
    if not isinstance(m.get("remat", False), bool):
        raise ConfigError(f"config.model.remat must be true or false, got {m.remat!r}")
    _check_seeds(config)
    _finite(config, "learning_rate", "weight_decay", "grad_clip_norm")
    if config.learning_rate <= 0 or config.weight_decay < 0 or config.warmup_steps < 0:
        raise ConfigError("config.learning_rate must be > 0, weight_decay and warmup_steps >= 0")


def check_names(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
    """The task, the attention family and its options looked up in their registries, and what they imply: the
    heads, the family's own option checks, memory pooling and statistics, the batch's split into microbatches."""
    try:
        data_registry.get_loader(config.task)
    except ValueError as e:
        raise ConfigError(f"config.task: {e}") from None
    m = config.model
    try:
        attn_cls = attention_registry.get(m.attention)
    except ValueError as e:
        raise ConfigError(f"config.model.attention: {e}") from None
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
    try:
        check_heads(m.num_heads, m.qkv_dim)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    # the family checks its own option values (e.g. ranges) when constructed
    try:
        attn_cls(
            num_heads=m.num_heads, qkv_dim=m.qkv_dim, dropout_rate=m.attention_dropout_rate, **dict(m.attention_kwargs)
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config.model.attention_kwargs for {m.attention!r}: {e}") from None
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
    if config.log_memory_stats and not attn_cls.uses_memory:
        raise ConfigError(
            f"config.log_memory_stats=True needs a memory family (luna, convluna); "
            f"{m.attention!r} has no memory: set it to False"
        )
    try:
        check_split(int(config.batch_size), config.get("microbatches", 1), num_devices)
    except InputError as e:
        raise ConfigError(str(e)) from None


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
