"""Agglomerative attention (Spellings, 2019): class summaries instead of pairwise affinities.

Paper: *Agglomerative Attention*, arXiv:1907.06607. Each token is softly assigned to m classes as a reference and,
with other weights, as a query; each query reads its classes' summaries of their references. Linear in time and
memory. For inputs x (B x N x D) and classes k = 1..m::

    c^r_ik = softmax_k(x_i W^r + b^r)            c^q_ik = softmax_k(x_i W^q + b^q)
    n_ik   = sum_{tau} c^r_tau,k                 (full: all tau; causal/"masked": tau <= i)
    a^k_i  = (1 / n_ik) sum_{tau} c^r_tau,k x_tau P^k      (P^k: D -> qkv_dim / m)
    p_i    = concat_k(c^q_ik a^k_i)              y_i = Q p_i

Parameters: ``key_classes`` (W^r, b^r), ``query_classes`` (W^q, b^q), ``value`` (the P^k stacked as D -> m x
qkv_dim/m, like a per-head value projection) and ``out`` (Q). Choices:

* ``num_classes`` defaults to the number of heads (the paper says "8 heads or agglomerative classes"); it must divide
  qkv_dim.
* ``value`` and ``out`` have biases like every family's projections (the paper has none): zero-initialised, so the
  paper's form at initialisation.
* Padding is out of the sums and masses (its reference assignments are zeroed); outputs at padding are zero.
* The average divides by ``max(n_ik, epsilon)``: the exact mean above epsilon; below (an empty class, a causal prefix
  with no real token) the summary shrinks to zero instead of NaN or amplified rounding noise.
* Attention dropout drops c^r_tau,k; the masses are summed after dropping, so summaries stay averages.
* Assignments, masses and running sums are float32 whatever ``dtype`` is.
* Non-causal: one summary per class, so ``y_i = Q p_i + b = sum_k c^q_ik (Q_k a^k + b)`` (the query assignments sum
  to 1): each summary goes through ``out`` once and the N x m x qkv_dim/m tensor p is never built (CPU, N = 16K:
  100.7 -> 61.9 ms per forward+backward, results/bench/attention_scaling.md).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.attention.base import (
    Attention,
    dense_heads,
    per_chunk,
    project_out,
    split_chunks,
    zero_padding,
)
from lra.errors import InputError


def class_averages(
    w_BxNxM: jax.Array, v_BxNxMxC: jax.Array, causal: bool, epsilon: float, chunk_size: int = 64
) -> jax.Array:
    """a^k_i, the per-class weighted averages (float32): B x N x M x C causal (up to i), else B x 1 x M x C."""
    if causal:
        weighted = w_BxNxM[..., None] * v_BxNxMxC.astype(jnp.float32)
        sums = jnp.cumsum(weighted, axis=1)
        mass = jnp.cumsum(w_BxNxM, axis=1)
    else:
        sums = jnp.einsum(
            "bklm,bklmc->bkmc",
            split_chunks(w_BxNxM.astype(v_BxNxMxC.dtype), chunk_size),
            split_chunks(v_BxNxMxC, chunk_size),
            preferred_element_type=jnp.float32,
        ).sum(axis=1, keepdims=True)
        mass = jnp.sum(w_BxNxM, axis=1, keepdims=True)
    return sums / jnp.maximum(mass, epsilon)[..., None]


class AgglomerativeAttention(Attention):
    """Soft class assignments; each query reads the (causal or full) averages of its classes.

    ``causal``: the paper's "masked" variant (tau <= i). ``chunk_size``: speed only (same results up to summation
    order; lra.attention.base.split_chunks).
    """

    num_classes: int | None = None
    causal: bool = False
    epsilon: float = 1e-6
    chunk_size: int = 64

    @property
    def classes(self) -> int:
        m = self.num_heads if self.num_classes is None else self.num_classes
        if m < 1 or self.qkv_dim % m:
            raise InputError(
                f"qkv_dim={self.qkv_dim} is not divisible by the number of agglomerative classes "
                f"{m}: set config.model.attention_kwargs.num_classes (default: num_heads) to a "
                f"divisor of config.model.qkv_dim."
            )
        return m

    @nn.compact
    def __call__(
        self,
        x_BxNxD: jax.Array,
        mask_BxN: jax.Array,
        memory: jax.Array | None = None,
        deterministic: bool = True,
    ) -> tuple[jax.Array, None]:
        m = self.classes

        def assignments(name: str) -> jax.Array:  # B x N x M, float32
            logits = nn.Dense(m, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(), name=name)(x_BxNxD)
            return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)

        c_key_BxNxM = assignments("key_classes")
        c_query_BxNxM = assignments("query_classes")
        v_BxNxMxC = dense_heads(m, self.qkv_dim // m, "value", self.dtype)(x_BxNxD)

        w_BxNxM = jnp.where(mask_BxN[..., None], c_key_BxNxM, 0.0)
        dropout_rng = self.dropout_rng(deterministic)
        if dropout_rng is not None:
            keep = jax.random.bernoulli(dropout_rng, 1.0 - self.dropout_rate, w_BxNxM.shape)
            w_BxNxM = jnp.where(keep, w_BxNxM, 0.0)  # no rescaling: the mass renormalises

        a = class_averages(w_BxNxM, v_BxNxMxC, self.causal, self.epsilon, self.chunk_size)
        features = x_BxNxD.shape[-1]
        if self.causal:  # a differs per position: build p = concat_k(c^q_ik a^k_i) and project it
            p_BxNxMxC = (c_query_BxNxM[..., None] * a).astype(self.dtype)
            return project_out(self, zero_padding(p_BxNxMxC, mask_BxN), features), None
        # One summary per class (module docstring): the m summaries go through `out` once, as m inputs with one class
        # filled in each, leaving an N x m by m x D product per sequence.
        a_BxMxC = a[:, 0].astype(self.dtype)
        one_class_BxMxMxC = jnp.eye(m, dtype=a_BxMxC.dtype)[None, :, :, None] * a_BxMxC[:, None]
        classes_out_BxMxD = project_out(self, one_class_BxMxMxC, features)
        b, n, _ = c_query_BxNxM.shape
        c_query_BxKxLxM = split_chunks(c_query_BxNxM.astype(self.dtype), self.chunk_size)
        classes_out_BxKxMxD = per_chunk(classes_out_BxMxD, c_query_BxKxLxM.shape[1])
        y = jnp.einsum("bklm,bkmd->bkld", c_query_BxKxLxM, classes_out_BxKxMxD).reshape(b, -1, features)
        return zero_padding(y[:, :n], mask_BxN), None
