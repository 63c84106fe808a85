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

On accelerators each product is written as a multiply and a sum (not an einsum, which XLA would
make a dot of a materialised B x K x N x H x D gather), so XLA fuses the gather into the reduction
that reads it. On a CPU the same sums are einsums: jaxlib 0.10.2's CPU compiler miscomputes the
multiply-and-sum form when it fuses it with its neighbours into a YNNPACK kernel (results off by
O(1) at N = 1000, found by tests/test_dispersed.py; ``XLA_FLAGS=
--xla_cpu_experimental_ynn_fusion_type=`` restores them), and the CPU default is ``"chunks"``
anyway. Memory is O(N x K) (the B x N x K x H weights, kept for the backward pass, and as large
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
# Elements of the largest gathered product one fused kernel reads (B x K x N x H x D). XLA's GPU
# compiler (jaxlib 0.10.2, H100 target) fuses each gather into the reduction that reads it up to
# some size and materialises the gather beyond (deviceless compiles of the forward and backward
# pass at N = 4096, 181 offsets, 4 heads of 32, float32: 4 batch rows, 380M elements, fused, 0.14
# GiB of temporaries; 5 rows, 474M, materialised, 3.6 GiB), so larger inputs are cut into groups
# of rows below this bound (a factor 1.4 under the largest size seen fused).
FUSED_ELEMENTS = 2**28


def _table(live: tuple[int, ...], n: int, sign: int) -> tuple[jax.Array, jax.Array]:
    """``(index_KxN, inside_KxN)``: ``i + sign * d_j`` clipped into ``[0, n)``, and whether it was
    inside. Built from iotas (fused into the gathers), not stored as a K x N constant."""
    pos_KxN = sign * jnp.asarray(live, jnp.int32)[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    inside_KxN = (pos_KxN >= 0) & (pos_KxN < n)
    return jnp.clip(pos_KxN, 0, n - 1), inside_KxN


def _rows(x_BxNx___: jax.Array, index_KxN: jax.Array) -> jax.Array:
    """``x[:, index]``: B x K x N x ... (one gather; indices are already in range). Slot-major, so
    for one slot consecutive queries read consecutive rows (coalesced) and the sums over slots
    are reductions of a major dimension, which XLA fuses with the gather at every N."""
    return x_BxNx___.at[:, index_KxN].get(mode="clip")


def _slots(x_BxKxNxH: jax.Array, query_KxN: jax.Array) -> jax.Array:
    """``out[:, j, m] = x[:, j, query[j, m]]``: each slot's entry seen from its key (one gather)."""
    b, k, n, h = x_BxKxNxH.shape
    flat_KxN = jnp.arange(k, dtype=jnp.int32)[:, None] * n + query_KxN
    return _rows(x_BxKxNxH.reshape(b, k * n, h), flat_KxN)


def _dots(a_BxNxHxD: jax.Array, rows_BxKxNxHxD: jax.Array) -> jax.Array:
    """``out[b, j, n, h] = a[b, n, h] . rows[b, j, n, h]`` in float32: B x K x N x H."""
    a, rows = a_BxNxHxD.astype(F32), rows_BxKxNxHxD.astype(F32)
    return jax.lax.platform_dependent(
        a, rows, cpu=partial(jnp.einsum, "bnhd,bknhd->bknh"), default=lambda a, r: jnp.sum(a[:, None] * r, axis=-1)
    )


def _mix(w_BxKxNxH: jax.Array, rows_BxKxNxHxD: jax.Array) -> jax.Array:
    """``out[b, n, h] = sum_j w[b, j, n, h] rows[b, j, n, h]`` in float32: B x N x H x D."""
    rows = rows_BxKxNxHxD.astype(F32)
    return jax.lax.platform_dependent(
        w_BxKxNxH,
        rows,
        cpu=partial(jnp.einsum, "bknh,bknhd->bnhd"),
        default=lambda w, r: jnp.sum(w[..., None] * r, axis=1),
    )


@partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _gather_core(q, k, v, mask_BxN, kept, live, rate):
    return _gather_core_fwd(q, k, v, mask_BxN, kept, live, rate)[0]


def _keep_scale(kept_BxKxNxH: jax.Array | None, rate: float) -> jax.Array | float:
    return 1.0 if kept_BxKxNxH is None else jnp.where(kept_BxKxNxH, 1.0 / (1.0 - rate), 0.0).astype(F32)


def _gather_core_fwd(q, k, v, mask_BxN, kept, live, rate):
    n = q.shape[1]
    key_KxN, inside_KxN = _table(live, n, +1)
    real_BxKxN = _rows(mask_BxN.astype(bool), key_KxN) & inside_KxN[None]
    masked_BxKxN = jnp.broadcast_to(jnp.where(inside_KxN, MASK_LOGIT, 2 * MASK_LOGIT).astype(F32), real_BxKxN.shape)
    s_BxKxNxH = jnp.where(real_BxKxN[..., None], _dots(q, _rows(k, key_KxN)), masked_BxKxN[..., None])
    e_BxKxNxH = jnp.exp(s_BxKxNxH - jnp.max(s_BxKxNxH, axis=1, keepdims=True))
    w_BxKxNxH = e_BxKxNxH / jnp.sum(e_BxKxNxH, axis=1, keepdims=True)
    y_BxNxHxD = _mix(w_BxKxNxH * _keep_scale(kept, rate), _rows(v, key_KxN))
    return y_BxNxHxD.astype(v.dtype), (q, k, v, kept, w_BxKxNxH, y_BxNxHxD)


def _gather_core_bwd(live, rate, residuals, dy_BxNxHxD):
    q, k, v, kept, w_BxKxNxH, y_BxNxHxD = residuals
    n = q.shape[1]
    key_KxN, _ = _table(live, n, +1)
    query_KxN, from_inside_KxN = _table(live, n, -1)  # key m is read by query m - d_j through slot j
    keep = _keep_scale(kept, rate)
    dy = dy_BxNxHxD.astype(F32)
    row_BxNxH = jnp.sum(dy * y_BxNxHxD, axis=-1)  # = sum_j Wd dW: dy . y, with or without dropout
    ds_BxKxNxH = w_BxKxNxH * (_dots(dy, _rows(v, key_KxN)) * keep - row_BxNxH[:, None])
    dq = _mix(ds_BxKxNxH, _rows(k, key_KxN))
    inside = from_inside_KxN[None, :, :, None]
    dk = _mix(jnp.where(inside, _slots(ds_BxKxNxH, query_KxN), 0.0), _rows(q, query_KxN))
    dv = _mix(jnp.where(inside, _slots(w_BxKxNxH * keep, query_KxN), 0.0), _rows(dy, query_KxN))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_gather_core.defvjp(_gather_core_fwd, _gather_core_bwd)


def _groups(size: int, parts: int) -> list[slice]:
    """``parts`` contiguous, nearly equal slices of ``range(size)``."""
    cuts = [round(i * size / parts) for i in range(parts + 1)]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def gather_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    v_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    dropout_rng: jax.Array | None,
    *,
    live: tuple[int, ...],
    dropout_rate: float = 0.0,
    fused_elements: int | None = None,
) -> jax.Array:
    """Softmax attention of each (already scaled) query over the keys at the in-sequence offsets
    ``live`` (sorted, ``|d| < N``); B x N x H x D in q's dtype. ``dropout_rng``: None, or the key
    of one dropout draw over the B x K x N x H weights (rate ``dropout_rate``).

    The rows (batch, then heads) are cut into the fewest static groups whose gathered products
    (B x K x N x H x D per group) stay within ``fused_elements`` (see ``FUSED_ELEMENTS``); each
    group is the same few kernels, so their number grows with N only through that count.
    """
    b, n, h, d = q_BxNxHxD.shape
    fused_elements = fused_elements or FUSED_ELEMENTS
    kept = None
    if dropout_rng is not None:
        kept = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, (b, len(live), n, h))
    per_head = n * len(live) * d  # gathered elements of one (batch row, head)
    if per_head * h <= fused_elements:  # whole batch rows per group
        batch_parts, head_parts = -(-b // (fused_elements // (per_head * h))), 1
    else:  # one batch row, some heads per group
        batch_parts, head_parts = b, -(-h // max(1, fused_elements // per_head))
    outs = []
    for rows in _groups(b, batch_parts):
        heads = []
        for cols in _groups(h, head_parts):
            x = [a[rows, :, cols] for a in (q_BxNxHxD, k_BxNxHxD, v_BxNxHxD)]
            keep = None if kept is None else kept[rows, :, :, cols]
            heads.append(_gather_core(*x, mask_BxN[rows], keep, live, float(dropout_rate)))
        outs.append(heads[0] if len(heads) == 1 else jnp.concatenate(heads, axis=2))
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)
