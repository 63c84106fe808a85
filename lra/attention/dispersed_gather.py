"""Dispersed attention for accelerators: the fixed pattern as gathers over the offset table.

The same function as :func:`lra.attention.dispersed.dispersed_attention`'s CPU-tuned
``"chunks"`` implementation (softmax over the keys at the pattern's relative offsets, padded and
out-of-sequence keys excluded), built for GPUs and TPUs, where that implementation's nested scans
of small elementwise steps cost one kernel launch each (26,183 launches per ListOps step at
N = 1K, 177,621 at 4K, on an H100). Here every stage is one gather feeding one reduction, with
no loop: the number of kernels is the same at every N.

With ``K`` live offsets ``d_j`` (``|d_j| < N``) and the table ``key[i, j] = i + d_j``:

* forward: logits ``s[i, j] = q_i . k_key[i, j]`` (a gather of K's rows by the table, reduced
  over the head dimension), softmax over ``j`` in float32, ``y_i = sum_j w[i, j] v_key[i, j]``
  (a gather of V's rows, reduced over ``j``);
* backward (``jax.custom_vjp``: autodiff of a gather is a scatter-add, contended on a GPU):
  ``dS = W (dW - dy . y)`` with ``dW[i, j] = dy_i . v_key[i, j]``, ``dq_i = sum_j dS[i, j]
  k_key[i, j]``, and the key and value gradients from the negated offsets, again gathers:
  key ``m`` is read by query ``m - d_j`` through slot ``j``, so ``dk_m = sum_j dS[m - d_j, j]
  q_{m - d_j}`` and ``dv_m = sum_j Wd[m - d_j, j] dy_{m - d_j}`` (``Wd``: the weights after
  dropout), slots whose query lies outside ``[0, N)`` dropped.

Each product is written as a multiply and a sum (not an einsum, which XLA would make a dot of a
materialised B x N x K x H x D gather), so XLA fuses the gather into the reduction that reads
it. Memory is O(N x K) (the B x N x K x H weights, kept for the backward pass, and as large
again transiently); no N x N array is built.

Out-of-sequence slots (``i + d_j`` outside ``[0, N)``) read a clipped, real key and get the
logit bias ``2 * MASK_LOGIT``; padded keys get ``MASK_LOGIT``. Every query has the in-sequence
slot ``d = 0``, so out-of-sequence slots always get weight exactly 0 (float32), and the backward
pass, which visits only in-sequence slots, is the exact gradient of the forward pass. The two
implementations differ only at queries with no real key (padding; the module zeroes those
outputs): there ``"chunks"`` averages over all slots, this one over the in-sequence ones.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from lra.attention.base import MASK_LOGIT

F32 = jnp.float32


def _table(live: tuple[int, ...], n: int, sign: int) -> tuple[jax.Array, jax.Array]:
    """``(index_NxK, inside_NxK)``: ``i + sign * d_j`` clipped into ``[0, n)``, and whether it was
    inside. Built from iotas (fused into the gathers), not stored as an N x K constant."""
    pos_NxK = jnp.arange(n, dtype=jnp.int32)[:, None] + sign * jnp.asarray(live, jnp.int32)[None, :]
    inside_NxK = (pos_NxK >= 0) & (pos_NxK < n)
    return jnp.clip(pos_NxK, 0, n - 1), inside_NxK


def _rows(x_BxNx___: jax.Array, index_NxK: jax.Array) -> jax.Array:
    """``x[:, index]``: B x N x K x ... (one gather; indices are already in range)."""
    return x_BxNx___.at[:, index_NxK].get(mode="promise_in_bounds")


def _slots(x_BxNxKxH: jax.Array, query_NxK: jax.Array) -> jax.Array:
    """``out[:, m, j] = x[:, query[m, j], j]``: each slot's entry seen from its key (one gather)."""
    b, n, k, h = x_BxNxKxH.shape
    flat_NxK = query_NxK * k + jnp.arange(k, dtype=jnp.int32)[None, :]
    return _rows(x_BxNxKxH.reshape(b, n * k, h), flat_NxK)


def _dots(a_BxNxHxD: jax.Array, rows_BxNxKxHxD: jax.Array) -> jax.Array:
    """``out[b, n, j, h] = a[b, n, h] . rows[b, n, j, h]`` in float32: B x N x K x H."""
    return jnp.sum(a_BxNxHxD.astype(F32)[:, :, None] * rows_BxNxKxHxD.astype(F32), axis=-1)


def _mix(w_BxNxKxH: jax.Array, rows_BxNxKxHxD: jax.Array) -> jax.Array:
    """``out[b, n, h] = sum_j w[b, n, j, h] rows[b, n, j, h]`` in float32: B x N x H x D."""
    return jnp.sum(w_BxNxKxH[..., None] * rows_BxNxKxHxD.astype(F32), axis=2)


@partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _gather_core(q, k, v, mask_BxN, kept, live, rate):
    return _gather_core_fwd(q, k, v, mask_BxN, kept, live, rate)[0]


def _keep_scale(kept_BxNxKxH: jax.Array | None, rate: float) -> jax.Array | float:
    return 1.0 if kept_BxNxKxH is None else jnp.where(kept_BxNxKxH, 1.0 / (1.0 - rate), 0.0).astype(F32)


def _gather_core_fwd(q, k, v, mask_BxN, kept, live, rate):
    n = q.shape[1]
    key_NxK, inside_NxK = _table(live, n, +1)
    real_BxNxK = _rows(mask_BxN.astype(bool), key_NxK) & inside_NxK[None]
    bias_BxNxK = jnp.where(real_BxNxK, 0.0, jnp.where(inside_NxK, MASK_LOGIT, 2 * MASK_LOGIT)[None])
    s_BxNxKxH = _dots(q, _rows(k, key_NxK)) + bias_BxNxK[..., None].astype(F32)
    e_BxNxKxH = jnp.exp(s_BxNxKxH - jnp.max(s_BxNxKxH, axis=2, keepdims=True))
    w_BxNxKxH = e_BxNxKxH / jnp.sum(e_BxNxKxH, axis=2, keepdims=True)
    y_BxNxHxD = _mix(w_BxNxKxH * _keep_scale(kept, rate), _rows(v, key_NxK))
    return y_BxNxHxD.astype(v.dtype), (q, k, v, kept, w_BxNxKxH, y_BxNxHxD)


def _gather_core_bwd(live, rate, residuals, dy_BxNxHxD):
    q, k, v, kept, w_BxNxKxH, y_BxNxHxD = residuals
    n = q.shape[1]
    key_NxK, _ = _table(live, n, +1)
    query_NxK, from_inside_NxK = _table(live, n, -1)  # key m is read by query m - d_j through slot j
    keep = _keep_scale(kept, rate)
    dy = dy_BxNxHxD.astype(F32)
    row_BxNxH = jnp.sum(dy * y_BxNxHxD, axis=-1)  # = sum_j Wd dW: dy . y, with or without dropout
    ds_BxNxKxH = w_BxNxKxH * (_dots(dy, _rows(v, key_NxK)) * keep - row_BxNxH[:, :, None])
    dq = _mix(ds_BxNxKxH, _rows(k, key_NxK))
    inside = from_inside_NxK[None, :, :, None]
    dk = _mix(jnp.where(inside, _slots(ds_BxNxKxH, query_NxK), 0.0), _rows(q, query_NxK))
    dv = _mix(jnp.where(inside, _slots(w_BxNxKxH * keep, query_NxK), 0.0), _rows(dy, query_NxK))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_gather_core.defvjp(_gather_core_fwd, _gather_core_bwd)


def gather_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    v_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    dropout_rng: jax.Array | None,
    *,
    live: tuple[int, ...],
    dropout_rate: float = 0.0,
) -> jax.Array:
    """Softmax attention of each (already scaled) query over the keys at the in-sequence offsets
    ``live`` (sorted, ``|d| < N``); B x N x H x D in q's dtype. ``dropout_rng``: None, or the key
    of one dropout draw over the B x N x K x H weights (rate ``dropout_rate``)."""
    b, n, h, _ = q_BxNxHxD.shape
    kept = None
    if dropout_rng is not None:
        kept = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, (b, n, len(live), h))
    return _gather_core(q_BxNxHxD, k_BxNxHxD, v_BxNxHxD, mask_BxN, kept, live, float(dropout_rate))
