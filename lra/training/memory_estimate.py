"""Refuse a model that cannot fit before anything is allocated.

An impossible size (``--config.model.max_len=1000000000``) otherwise blocks in the first device
allocation instead of failing. The estimate is a lower bound (state plus the activations the
backward pass must keep), so it refuses only what surely cannot fit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from lra.console import binary_bytes
from lra.training.validation import ConfigError

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
    """A lower bound on one device's memory for training: parameters x4 (weights, gradients,
    Adam's two moments) and, per layer, each token's block input and MLP hidden activations;
    each seed of a vmapped program has its own of both."""
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
    """A model that surely cannot fit, refused before any data is generated or read (ConfigError,
    exit 2, nothing written): the position table alone (``model.max_len`` x ``emb_dim``: every model
    has one) against the device's memory. (A generated set too large for its disk is refused by
    ``lra.data.listops.ensure_generated`` before generating.)"""
    m = config.model
    table = [jax.ShapeDtypeStruct((int(m.max_len), int(m.emb_dim)), np.float32)]
    check_fits(table, config, 1, False, num_seeds)  # activations of one token: a lower bound
