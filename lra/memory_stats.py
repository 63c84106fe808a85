"""The memory families' degradation statistics, logged at each evaluation (``config.log_memory_stats``) and
read by lra_lab's diagnostics.

Of a memory M x D (the ConvLuna paper's Section 2, Figure 1; docs/running.md, Memory diagnostics):
``distinct_vectors`` (groups of cells linked at cosine >= 0.99, single linkage), ``effective_rank`` (exp of the
entropy of the normalised singular values, Roy & Vetterli 2007: 1 for rank one, M for M orthogonal equal-norm
cells), ``mean_pairwise_cosine``; ``packing_entropy``: each memory cell's entropy over the real keys / log(real
keys) (1.0 uniform, 0.0 one key; rows with one real key left out). Per-example values are averaged over the batch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

DISTINCT_COSINE = 0.99
STATS = ("distinct_vectors", "effective_rank", "mean_pairwise_cosine")


def _cosines(memory_MxD: np.ndarray) -> np.ndarray:
    m = np.asarray(memory_MxD, np.float64)
    unit = m / np.maximum(np.linalg.norm(m, axis=-1, keepdims=True), 1e-12)
    return unit @ unit.T


def distinct_vectors(memory_MxD: np.ndarray, threshold: float = DISTINCT_COSINE) -> int:
    """Number of groups of cells linked by cosine >= ``threshold`` (connected components)."""
    close = _cosines(memory_MxD) >= threshold
    cells = close.shape[0]
    group = -np.ones(cells, int)
    groups = 0
    for start in range(cells):
        if group[start] >= 0:
            continue
        group[start], stack = groups, [start]
        while stack:
            i = stack.pop()
            for j in np.flatnonzero(close[i] & (group < 0)):
                group[j] = groups
                stack.append(int(j))
        groups += 1
    return groups


def effective_rank(memory_MxD: np.ndarray) -> float:
    """exp(entropy of the normalised singular values)."""
    s = np.linalg.svd(np.asarray(memory_MxD, np.float64), compute_uv=False)
    if s.sum() <= 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def mean_pairwise_cosine(memory_MxD: np.ndarray) -> float | None:
    """Mean cosine over distinct pairs of cells; None for a single cell."""
    cells = memory_MxD.shape[0]
    if cells < 2:
        return None
    c = _cosines(memory_MxD)
    return float((c.sum() - np.trace(c)) / (cells * (cells - 1)))


def memory_summary(memory_MxD: np.ndarray) -> dict[str, float | None]:
    return {
        "distinct_vectors": float(distinct_vectors(memory_MxD)),
        "effective_rank": effective_rank(memory_MxD),
        "mean_pairwise_cosine": mean_pairwise_cosine(memory_MxD),
    }


def batch_summary(memory_BxMxD: np.ndarray) -> dict[str, float | None]:
    """:func:`memory_summary` of each example's memory, averaged over the batch."""
    rows = [memory_summary(m) for m in np.asarray(memory_BxMxD)]
    out: dict[str, float | None] = {}
    for key in STATS:
        values = [v for r in rows if (v := r[key]) is not None]
        out[key] = float(np.mean(values)) if values else None
    return out


def normalized_entropy(weights_BxHxMxJ: jax.Array, key_mask_BxJ: jax.Array) -> jax.Array:
    """Mean over (example, head, cell) of entropy / log(real keys); rows with one real key skipped."""
    w = weights_BxHxMxJ.astype(jnp.float32)
    real = key_mask_BxJ[:, None, None, :]
    plogp = jnp.where(real & (w > 0), w * jnp.log(jnp.where(w > 0, w, 1.0)), 0.0)
    entropy_BxHxM = -jnp.sum(plogp, axis=-1)
    keys_B = jnp.sum(key_mask_BxJ, axis=-1).astype(jnp.float32)
    log_keys = jnp.log(jnp.maximum(keys_B, 1.0))[:, None, None]
    valid = jnp.broadcast_to((keys_B > 1)[:, None, None], entropy_BxHxM.shape)
    ratio = jnp.where(valid, entropy_BxHxM / jnp.where(valid, log_keys, 1.0), 0.0)
    return jnp.sum(ratio) / jnp.maximum(jnp.sum(valid), 1)


def _blocks(tree: dict[str, Any]) -> list[str]:
    return sorted((k for k in tree if k.startswith("block_")), key=lambda k: int(k.split("_")[1]))


def make_probe(model: Any):
    """Jitted ``probe(params, inputs)``: per block, its output memory (B x M x D) and its packing entropy."""

    def probe(params: Any, inputs: jax.Array) -> tuple[list[jax.Array], list[jax.Array]]:
        _, state = model.apply(
            {"params": params},
            inputs,
            deterministic=True,
            rngs={"attention": jax.random.key(0)},
            mutable=["intermediates"],
        )
        encoder = state["intermediates"]["encoder"]
        memories, entropies = [], []
        for name in _blocks(encoder):
            memories.append(encoder[name]["memory"][0])
            attn = encoder[name]["attention"]
            entropies.append(normalized_entropy(attn["packing_weights"][0], attn["packing_key_mask"][0]))
        return memories, entropies

    return jax.jit(probe)


def collect(probe: Any, params: Any, inputs: jax.Array) -> dict[str, float | None]:
    """metrics.jsonl's ``initial/<stat>``, ``block<i>/<stat>`` (batch means) and ``block<i>/packing_entropy``."""
    memories, entropies = jax.device_get(probe(params, inputs))
    out: dict[str, float | None] = {}
    initial = np.asarray(jax.device_get(params["encoder"]["memory"]))
    out.update({f"initial/{k}": v for k, v in memory_summary(initial).items()})
    for i, (memory, entropy) in enumerate(zip(memories, entropies, strict=False)):
        out.update({f"block{i}/{k}": v for k, v in batch_summary(memory).items()})
        out[f"block{i}/packing_entropy"] = float(entropy)
    return out


def probe_inputs(split: Any, batch_size: int) -> np.ndarray:
    """The first ``batch_size`` examples in file order (lengths mixed), cut to the longest: the same every time."""
    rows = min(batch_size, len(split))
    inputs = np.asarray(split.inputs[:rows])
    longest = max(int(np.max(split.max_lengths[:rows])), 1)
    return inputs[..., :longest]


def log_memory_stats(model: Any, config: Any, validation: Any, sharding: Any):
    """``params -> statistics`` on a fixed validation batch if ``config.log_memory_stats``, else None."""
    if not config.log_memory_stats:
        return None
    from lra.training import hosts

    rows = config.eval_batch_size
    inputs = probe_inputs(validation, rows)
    if len(inputs) < rows:  # keep the batch divisible by the devices: repeat rows
        inputs = np.resize(inputs, (rows,) + inputs.shape[1:])
    probe = make_probe(model)
    placed = hosts.shard_batch({"inputs": inputs}, sharding)["inputs"]
    return lambda params: collect(probe, params, placed)
