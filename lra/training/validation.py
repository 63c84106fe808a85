"""Config checks that run before any data is loaded or anything is compiled.

Each error names the config field and what to set it to.
"""

from __future__ import annotations

import math

import ml_collections
import numpy as np

from lra import attention as attention_registry
from lra import data as data_registry
from lra.attention.base import check_heads
from lra.defaults import option_type_problem
from lra.errors import InputError
from lra.model import DUAL_COMBINES, EMBEDDINGS, HEAD_ACTIVATIONS, NORMS, PARAM_INITS, POOLINGS
from lra.training.microbatch import check_split


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
    # Let the family check its own option values (e.g. ranges) by constructing it.
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
    if not isinstance(variant, str) or not variant.strip():  # it names the run's row and folder (issue 52 O5)
        raise ConfigError(f"config.variant must name the row (e.g. 'ConvLuna-16'), got {variant!r}")
    source = config.data.get("source", "auto")
    if source not in ("auto", "release", "generated"):  # checked here, so the sweep refuses it too (SO2)
        raise ConfigError(f"config.data.source={source!r}: valid values are auto, release, generated")

    if config.preset not in PRESETS:  # it names the default workdir: a path there wrote outside runs/ (issue 52 SEC4)
        raise ConfigError(f"config.preset={config.preset!r} is not one of {', '.join(PRESETS)}")
    if (
        not isinstance(config.max_eval_batches, int)
        or isinstance(config.max_eval_batches, bool)
        or (config.max_eval_batches < 0)
    ):  # a negative count evaluated one batch and was recorded as the split's accuracy (issue 52 O8, EV1)
        raise ConfigError(
            f"config.max_eval_batches must be an integer >= 0 (0: the whole split), got {config.max_eval_batches!r}"
        )
    if config.num_train_steps >= 2**31:  # the step counter is int32 (checkpoints, schedules): issue 52 O4
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
