"""Gradient accumulation over microbatches (``config.microbatches``) with the full batch's semantics.

A train step of batch B split into M microbatches of b = B / M examples computes, one microbatch
at a time (a ``lax.scan``, so only one microbatch's activations are live), the gradient of
``sum of weighted losses of the microbatch / real examples of the whole batch`` and sums them: the
full batch's gradient of ``loss_sum / count`` up to float summation order. Loss and accuracy are
the whole batch's sums over its real examples (padding rows weigh 0), as in the one-batch step.

Microbatch m holds the examples m, m + M, m + 2M, ... (a strided split): on a data-parallel mesh
each device's contiguous share of the batch then holds b / devices rows of every microbatch, so
the split moves no data between devices.

Dropout. Flax draws a dropout mask as ``bernoulli(key, p, shape)`` over the whole batch tensor;
with jax's partitionable threefry (the default since jax 0.5, required here) element ``i`` of the
tensor gets the bits ``threefry2x32(key, i)`` of its flat index ``i``. A microbatch's tensor has
other flat indices, so plain keys would give each example other masks than the full batch did.
The microbatched step therefore gives the model a key of :func:`row_keyed_impl`, a PRNG
implementation whose keys are threefry keys plus the microbatch's index m, and whose row map
(M microbatches of b rows out of B, ``parts``) is static: it splits
and folds exactly as threefry (so flax derives the same per-module keys), and its random bits
for a tensor whose leading axis holds the microbatch's rows are the bits of those rows in the
full-batch tensor (the row's global index times the row size, plus the offset in the row, as a
64-bit counter). Each example thus gets the same dropout masks whatever the microbatch count.
The matching task's encoder runs both documents of a batch as 2B rows ([first documents; second
documents]): ``parts`` = 2 maps them too. A dropout tensor whose leading axis is not the
microbatch's rows (dispersed attention's chunked layout) cannot be mapped: it fails at trace time
naming its shape (never silently other bits). The attention families' own randomness
(``rngs["attention"]``: hash planes, seeding) is drawn without a batch axis and keeps plain keys.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np
from jax import lax

from lra.errors import InputError

_THREEFRY = jex_random.threefry_prng_impl
_K = 2  # key data: threefry's (k1, k2), then the microbatch's index m


def _split(key_data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    keys = _THREEFRY.split(key_data[:_K], shape)
    return jnp.concatenate([keys, jnp.broadcast_to(key_data[_K:], (*shape, 1))], axis=-1)


def _fold_in(key_data: jax.Array, data: Any) -> jax.Array:
    return jnp.concatenate([_THREEFRY.fold_in(key_data[:_K], data), key_data[_K:]])


def _seed(seed: jax.Array) -> jax.Array:
    return jnp.concatenate([_THREEFRY.seed(seed), jnp.zeros((1,), jnp.uint32)])


def mul_2x32(a: jax.Array, c: int) -> tuple[jax.Array, jax.Array]:
    """``a * c`` (uint32 array times a constant below 2^32) as the (hi, lo) words of a uint64."""
    assert 0 <= c < 2**32
    mask16 = jnp.uint32(0xFFFF)
    a0, a1 = a & mask16, a >> 16
    c0, c1 = jnp.uint32(c & 0xFFFF), jnp.uint32(c >> 16)
    p00, p01, p10, p11 = a0 * c0, a0 * c1, a1 * c0, a1 * c1
    mid = (p00 >> 16) + (p01 & mask16) + (p10 & mask16)
    lo = (p00 & mask16) | (mid << 16)
    hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
    return hi, lo


@functools.cache
def row_keyed_impl(count: int, rows: int, batch: int, parts: int) -> Any:
    """The PRNG implementation of microbatches of ``rows`` examples, ``count`` of them in a batch of
    ``batch`` (strided), whose model tensors hold the rows ``parts`` times (module docstring)."""

    def random_bits(key_data: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
        if bit_width not in (8, 16, 32):
            raise NotImplementedError(f"microbatched random bits of width {bit_width}")
        if not shape or shape[0] != parts * rows:
            raise InputError(
                f"a dropout draw of shape {tuple(shape)} does not have the microbatch's {parts * rows} rows as "
                f"its leading axis, so config.microbatches > 1 cannot give it the full batch's bits: use "
                f"config.microbatches=1 for this family (or no dropout)"
            )
        per_row = math.prod(shape[1:])
        if per_row >= 2**32:
            raise InputError(f"a microbatched dropout draw of shape {tuple(shape)} has rows of >= 2^32 elements")
        r = jnp.arange(shape[0], dtype=jnp.uint32)
        global_row = (r // rows) * jnp.uint32(batch) + key_data[_K] + (r % rows) * jnp.uint32(count)
        hi_row, lo_row = (w.reshape((shape[0],) + (1,) * (len(shape) - 1)) for w in mul_2x32(global_row, per_row))
        within = jnp.arange(per_row, dtype=jnp.uint32).reshape((1, *shape[1:]))
        lo = lo_row + within
        hi = hi_row + (lo < within).astype(jnp.uint32)  # the carry of the 64-bit add
        bits1, bits2 = jex_random.threefry2x32_p.bind(
            key_data[0], key_data[1], jnp.broadcast_to(hi, shape), jnp.broadcast_to(lo, shape)
        )
        bits = bits1 ^ bits2  # jax's partitionable threefry, 32 bits and narrower
        return bits if bit_width == 32 else bits.astype({8: jnp.uint8, 16: jnp.uint16}[bit_width])

    return jex_random.define_prng_impl(
        key_shape=(_K + 1,),
        seed=_seed,
        split=_split,
        random_bits=random_bits,
        fold_in=_fold_in,
        name=f"threefry2x32_rows_{count}x{rows}_of_{batch}x{parts}",
        tag="mbr",
    )


def row_keyed(key: jax.Array, index: jax.Array, count: int, rows: int, batch: int, parts: int) -> jax.Array:
    """``key`` (threefry) as a :func:`row_keyed_impl` key for microbatch ``index`` of ``count``: its
    ``rows`` examples are ``index + count * j`` of the full batch's ``batch``; the model's batch
    axis holds them ``parts`` times (2 for the matching task's two documents)."""
    data = jnp.concatenate([jax.random.key_data(key), jnp.asarray(index, jnp.uint32)[None]])
    return jax.random.wrap_key_data(data, impl=row_keyed_impl(count, rows, batch, parts))


def check_partitionable() -> None:
    """The row map reproduces jax's partitionable threefry only (jax's default since 0.5)."""
    if not jax.config.jax_threefry_partitionable:  # type: ignore[attr-defined]
        raise InputError(
            "config.microbatches > 1 needs jax_threefry_partitionable=True (jax's default): each example's "
            "dropout bits then depend on its index alone, which the microbatched step reproduces"
        )


def split_rows(batch_BxX: Any, index: jax.Array, count: int) -> Any:
    """Microbatch ``index`` of ``count`` (strided: rows index, index + count, ...) of every array."""

    def take(x: jax.Array) -> jax.Array:
        b = x.shape[0] // count
        return lax.dynamic_index_in_dim(x.reshape((b, count, *x.shape[1:])), index, axis=1, keepdims=False)

    return jax.tree.map(take, batch_BxX)


def accumulate(
    loss_sum_fn: Callable[[Any, Any, jax.Array], tuple[jax.Array, dict[str, jax.Array]]],
    params: Any,
    batch: dict[str, jax.Array],
    count: int,
    denominator: jax.Array,
) -> tuple[Any, dict[str, jax.Array]]:
    """The gradient of ``loss_sum / denominator`` summed over ``count`` microbatches, and the
    metric sums (``loss_sum``, ``correct``, ``count``) of the whole batch.

    ``loss_sum_fn(params, microbatch, index) -> (loss_sum, metric sums)``; its gradient is scaled
    by ``1 / denominator`` inside each microbatch, so the partial sums stay at the full batch's
    magnitude (float32 gradients, whatever the compute dtype)."""

    def one(carry: tuple[Any, dict[str, jax.Array]], index: jax.Array) -> tuple[Any, None]:
        grads, sums = carry
        micro = split_rows(batch, index, count)
        scaled = lambda p: (lambda out: (out[0] / denominator, out[1]))(loss_sum_fn(p, micro, index))  # noqa: E731
        (_, m), g = jax.value_and_grad(scaled, has_aux=True)(params)
        grads = jax.tree.map(jnp.add, grads, g)
        sums = {k: sums[k] + m[k] for k in sums}
        return (grads, sums), None

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.result_type(p.dtype, jnp.float32)), params)
    sums0 = {k: jnp.zeros((), jnp.float32) for k in ("loss_sum", "correct", "count")}
    (grads, sums), _ = lax.scan(one, (zeros, sums0), jnp.arange(count))
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
    return grads, sums


def check_split(batch_size: int, microbatches: int, num_devices: int = 1) -> None:
    """Refuse a split that is not exact: every microbatch the same size, a multiple of the devices."""
    if not isinstance(microbatches, (int, np.integer)) or isinstance(microbatches, bool) or microbatches < 1:
        raise InputError(f"config.microbatches must be an integer >= 1, got {microbatches!r}")
    if batch_size % microbatches:
        raise InputError(
            f"config.microbatches={microbatches} does not divide config.batch_size={batch_size}: "
            f"choose a divisor of {batch_size}"
        )
    if (batch_size // microbatches) % num_devices:
        raise InputError(
            f"config.batch_size / config.microbatches = {batch_size // microbatches} is not divisible by the "
            f"{num_devices} devices: each microbatch is split over them"
        )
