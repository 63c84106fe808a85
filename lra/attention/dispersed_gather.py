"""Dispersed attention for accelerators: the fixed pattern as static shifted slices, no loop.

The same function as :func:`lra.attention.dispersed.dispersed_attention`'s ``"chunks"``, whose scans cost a kernel
launch per step on a GPU (docs/design.md, "Dispersed attention: one function, two implementations"). With ``K`` live
offsets ``d_j`` (``|d_j| < N``), key ``i + d_j`` for query ``i``:

* forward: ``s[i, j] = q_i . k_{i + d_j}``, softmax over ``j`` in float32, ``y_i = sum_j w[i, j] v_{i + d_j}``;
* backward (``jax.custom_vjp``: autodiff of the reads would scatter-add, contended on a GPU): ``dS = W (dW - dy . y)``,
  ``dW[i, j] = dy_i . v_{i + d_j}``, ``dq_i = sum_j dS[i, j] k_{i + d_j}``; key ``m`` is read by query ``m - d_j``
  through slot ``j``, so ``dk_m = sum_j dS[m - d_j, j] q_{m - d_j}`` and ``dv_m = sum_j Wd[m - d_j, j] dy_{m - d_j}``
  (``Wd``: after dropout), dropping slots whose query is outside ``[0, N)``.

Arrays with a head dimension are read as stacks of static slices of one zero-padded copy, fused by XLA's GPU compiler
into the reduction reading them (the B x K x N x H x D products are never written); those without (the mask, the
backward's weights seen from their keys) by one gather each (as slices, XLA would cut them into pieces growing with K).
Memory O(N x K): the B x K x N x H weights and their slot-shifted copies. On a CPU the sums are einsums: jaxlib 0.10.2's
CPU compiler miscomputes the multiply-and-sum form fused into a YNNPACK kernel (O(1) errors at N = 1000, found by
tests/test_dispersed.py; ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` avoids it). Out-of-sequence slots read a
zero with logit ``2 * MASK_LOGIT``, padded keys ``MASK_LOGIT``. Every query has the in-sequence slot ``d = 0``, so
out-of-sequence slots get weight exactly 0 (float32) and the backward, visiting only in-sequence slots, is the exact
gradient. The implementations differ only at queries with no real key (padding, zeroed by the module): ``"chunks"``
averages over all slots, this one over the in-sequence ones.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from lra.attention.base import MASK_LOGIT

F32 = jnp.float32
# SLOT_PARTS runs of <= MAX_RUN slices: XLA (jaxlib 0.10.2, H100) fuses 181 stacked slices (N = 4096), writes 257 as
# concatenations of 128; fixed runs keep kernels flat in N up to the paper's largest pattern (K <= 363: 3 x 121).
SLOT_PARTS = 3
MAX_RUN = 128


def _inside(live: tuple[int, ...], n: int, sign: int) -> jax.Array:
    """``inside_KxN``: whether ``i + sign * d_j`` lies in ``[0, n)``; from iotas (fused), not a K x N constant."""
    pos_KxN = sign * jnp.asarray(live, jnp.int32)[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    return (pos_KxN >= 0) & (pos_KxN < n)


def _shifts(x_BxNx___: jax.Array, shifts: tuple[int, ...]) -> jax.Array:
    """``out[:, j, i] = x[:, i + shifts[j]]``, zero outside ``[0, N)``: B x K x N x ..., K static slices."""
    n, pad = x_BxNx___.shape[1], max(abs(s) for s in shifts)
    widths = [(0, 0)] * x_BxNx___.ndim
    widths[1] = (pad, pad)
    padded = jnp.pad(x_BxNx___, widths)
    return jnp.stack([jax.lax.slice_in_dim(padded, pad + s, pad + s + n, axis=1) for s in shifts], axis=1)


def _rows(x_BxNx___: jax.Array, live: tuple[int, ...], sign: int) -> jax.Array:
    """``out[:, j, i] = x[:, i + sign * d_j]`` (clipped; callers mask those slots): one gather."""
    n = x_BxNx___.shape[1]
    pos_KxN = sign * jnp.asarray(live, jnp.int32)[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    return x_BxNx___.at[:, jnp.clip(pos_KxN, 0, n - 1)].get(mode="clip")


def _slot_shifts(x_BxKxNxH: jax.Array, live: tuple[int, ...], sign: int) -> jax.Array:
    """``out[:, j, m] = x[:, j, m + sign * d_j]`` (clipped; callers mask those slots): one gather."""
    b, k, n, h = x_BxKxNxH.shape
    pos_KxN = sign * jnp.asarray(live, jnp.int32)[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    flat_KxN = jnp.arange(k, dtype=jnp.int32)[:, None] * n + jnp.clip(pos_KxN, 0, n - 1)
    return x_BxKxNxH.reshape(b, k * n, h).at[:, flat_KxN].get(mode="clip")


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


def _parts(live: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """The offsets cut into ``parts`` contiguous runs of nearly equal length (none empty)."""
    cuts = [round(i * len(live) / parts) for i in range(parts + 1)]
    return [live[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


@partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _core(q, k, v, mask_BxN, kept, live, rate, parts):
    return _core_fwd(q, k, v, mask_BxN, kept, live, rate, parts)[0]


def _keep_scale(kept_BxKxNxH: jax.Array | None, rate: float) -> jax.Array | float:
    return 1.0 if kept_BxKxNxH is None else jnp.where(kept_BxKxNxH, 1.0 / (1.0 - rate), 0.0).astype(F32)


def _core_fwd(q, k, v, mask_BxN, kept, live, rate, parts):
    n = q.shape[1]
    runs = _parts(live, parts)
    inside_KxN = _inside(live, n, +1)
    real_BxKxN = _rows(mask_BxN.astype(bool), live, +1) & inside_KxN[None]
    masked_BxKxN = jnp.broadcast_to(jnp.where(inside_KxN, MASK_LOGIT, 2 * MASK_LOGIT).astype(F32), real_BxKxN.shape)
    dots_BxKxNxH = jnp.concatenate([_dots(q, _shifts(k, r)) for r in runs], axis=1)
    s_BxKxNxH = jnp.where(real_BxKxN[..., None], dots_BxKxNxH, masked_BxKxN[..., None])
    e_BxKxNxH = jnp.exp(s_BxKxNxH - jnp.max(s_BxKxNxH, axis=1, keepdims=True))
    w_BxKxNxH = e_BxKxNxH / jnp.sum(e_BxKxNxH, axis=1, keepdims=True)
    wd_BxKxNxH = w_BxKxNxH * _keep_scale(kept, rate)
    y_BxNxHxD = _sum_parts(wd_BxKxNxH, v, runs)
    return y_BxNxHxD.astype(v.dtype), (q, k, v, kept, w_BxKxNxH, y_BxNxHxD)


def _sum_parts(w_BxKxNxH, x_BxNxHxD, runs):
    """``sum_j w[:, j] x[:, i + s_j]`` over all slots, one reduction per run of shifts ``s``."""
    out, j0 = None, 0
    for r in runs:
        term = _mix(w_BxKxNxH[:, j0 : j0 + len(r)], _shifts(x_BxNxHxD, r))
        out, j0 = term if out is None else out + term, j0 + len(r)
    return out


def _core_bwd(live, rate, parts, residuals, dy_BxNxHxD):
    q, k, v, kept, w_BxKxNxH, y_BxNxHxD = residuals
    # a barrier: a shifted copy shared with the forward pass has several readers, so XLA would write it to memory
    q, k, v = jax.lax.optimization_barrier((q, k, v))
    n = q.shape[1]
    runs = _parts(live, parts)
    back = [tuple(-d for d in r) for r in runs]  # key m is read by query m - d_j through slot j
    from_inside_KxN = _inside(live, n, -1)
    keep = _keep_scale(kept, rate)
    dy = dy_BxNxHxD.astype(F32)
    row_BxNxH = jnp.sum(dy * y_BxNxHxD, axis=-1)  # = sum_j Wd dW: dy . y, with or without dropout
    dw_BxKxNxH = jnp.concatenate([_dots(dy, _shifts(v, r)) for r in runs], axis=1)
    ds_BxKxNxH = w_BxKxNxH * (dw_BxKxNxH * keep - row_BxNxH[:, None])
    dq = _sum_parts(ds_BxKxNxH, k, runs)
    inside = from_inside_KxN[None, :, :, None]
    seen_ds = _slot_shifts(ds_BxKxNxH, live, -1)
    seen_w = _slot_shifts(w_BxKxNxH * keep, live, -1)
    dk = _sum_parts(jnp.where(inside, seen_ds, 0.0), q, back)
    dv = _sum_parts(jnp.where(inside, seen_w, 0.0), dy, back)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_core.defvjp(_core_fwd, _core_bwd)


def gather_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    v_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    dropout_rng: jax.Array | None,
    *,
    live: tuple[int, ...],
    dropout_rate: float = 0.0,
    slot_parts: int | None = None,
) -> jax.Array:
    """Softmax attention of each (already scaled) query over the keys at the sorted in-sequence offsets ``live``;
    B x N x H x D in q's dtype. ``dropout_rng``: None, or one draw over the B x K x N x H weights."""
    b, n, h, _ = q_BxNxHxD.shape
    kept = None
    if dropout_rng is not None:
        kept = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, (b, len(live), n, h))
    parts = slot_parts or slot_parts_for(len(live))
    return _core(q_BxNxHxD, k_BxNxHxD, v_BxNxHxD, mask_BxN, kept, live, float(dropout_rate), parts)


def slot_parts_for(num_offsets: int) -> int:
    """:data:`SLOT_PARTS` runs, more only when a run would exceed :data:`MAX_RUN` offsets."""
    return max(SLOT_PARTS, -(-num_offsets // MAX_RUN))
