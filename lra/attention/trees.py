"""Which families can evaluate each other's weights: their parameter trees, traced, not declared.

Two families can swap checkpoints (``python -m lra.evaluate --attention``) exactly when they build the same parameter
paths and shapes, both with or both without the encoder's learned memory. The trees come from ``jax.eval_shape`` of
``init`` on a small abstract input (nothing computed), so a new family is grouped by what it builds, not by a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import traverse_util

from lra.attention import ATTENTIONS, get
from lra.attention.base import memory_cells

# The encoder's learned initial memory, a parameter of the model whenever the family has a memory.
ENCODER_MEMORY = "encoder memory"


def parameter_tree(
    name: str,
    options: Mapping[str, Any] | None = None,
    num_heads: int = 4,
    qkv_dim: int = 64,
    features: int = 64,
    length: int = 32,
) -> dict[str, tuple[int, ...]]:
    """``{"query/kernel": (D, H, Dh), ...}`` of one block's ``name`` attention with ``options``
    (plus :data:`ENCODER_MEMORY` for a memory family); a wrong option raises the family's error."""
    options = dict(options or {})
    cls = get(name)
    module = cls(num_heads=num_heads, qkv_dim=qkv_dim, **options)
    x = jax.ShapeDtypeStruct((1, length, features), jnp.float32)
    mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)
    cells = memory_cells(cls, options) if cls.uses_memory else 0
    memory = jax.ShapeDtypeStruct((1, cells, features), jnp.float32) if cls.uses_memory else None
    rngs = {"params": jax.random.key(0), "attention": jax.random.key(1)}
    variables = jax.eval_shape(lambda x, m, mem: module.init(rngs, x, m, memory=mem), x, mask, memory)
    tree = {
        "/".join(path): tuple(leaf.shape)
        for path, leaf in traverse_util.flatten_dict(dict(variables.get("params", {}))).items()
    }
    if cls.uses_memory:
        tree[ENCODER_MEMORY] = (cells, features)
    return tree


def tree_difference(
    a: Mapping[str, tuple[int, ...]], b: Mapping[str, tuple[int, ...]], name_a: str = "a", name_b: str = "b"
) -> str:
    """What ``a`` has that ``b`` lacks and the reverse, in one clause, by module (a layer's kernel and
    bias are one name): ``"only convluna's: log_temperature; only clustered's: value; shapes differ: out"``."""

    def modules(keys: set[str]) -> list[str]:
        return sorted({k.rsplit("/", 1)[0] for k in keys})

    only_a = modules(set(a) - set(b))
    only_b = modules(set(b) - set(a))
    reshaped = modules({k for k in set(a) & set(b) if a[k] != b[k]})
    parts = [
        f"{what}: {', '.join(keys)}"
        for what, keys in ((f"only {name_a}'s", only_a), (f"only {name_b}'s", only_b), ("shapes differ", reshaped))
        if keys
    ]
    return "; ".join(parts) or "none"


def swap_groups(num_heads: int = 4, qkv_dim: int = 64, features: int = 64) -> list[list[str]]:
    """The registered families grouped by parameter tree (each with its default options), in
    registry order: families in one group can evaluate each other's checkpoints."""
    groups: list[tuple[dict[str, tuple[int, ...]], list[str]]] = []
    for name in ATTENTIONS:
        tree = parameter_tree(name, num_heads=num_heads, qkv_dim=qkv_dim, features=features)
        for known, members in groups:
            if known == tree:
                members.append(name)
                break
        else:
            groups.append((tree, [name]))
    return [members for _, members in groups]
