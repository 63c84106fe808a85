"""Cheap linear and gated linear attention (de Brébisson & Vincent, 2016).

Paper: *A Cheap Linear Attention Mechanism with Fast Lookups and Fixed-Size Representations*, arXiv:1609.05866.

Without the softmax, ``R(D, Q) = H^T softmax(H q)`` becomes ``C q``: the document is summarised once into the fixed-size
``C = sum_t h_t h_t^T`` and each lookup costs O(k^2), whatever the length. Per head, with the shared q/k/v/out
projections: ``C = sum_t k_t v_t^T`` (Dh x Dh, real tokens) and ``out_i = C^T q_i = sum_t (q_i . k_t) v_t``. Choices
(the paper has one RNN state, not a transformer block):

* ``tie_kv`` (default off): True is the paper's symmetric C (``v_t = k_t``, no ``value`` projection; with
  ``normalize=false`` and one head, its ``out_i = C q_i`` read through ``out``). Off, the value has its own projection
  like every other family's: tree and capacity comparable with softmax (the LRA setting), and what a token is matched on
  decoupled from what it returns.
* ``normalize`` (default on): C is a mean over the real tokens (causal: up to i), not the paper's sum, so the output
  scale does not grow with the length (LRA's vary from hundreds to thousands; deep stacks would blow up).
* No 1/sqrt(Dh) scale: no softmax to keep out of saturation, and the paper has none.
* Gated (Section 4): ``f_t = sigmoid(W h_t + b) * h_t`` enters C as ``f_t f_t^T``. Here ``h_t`` is the block input x_t
  (standing for the document RNN's state) and the gate ``sigmoid(x_t W + b)``, one value per head feature, multiplies
  the projected key and value (``gate_on="both"``, the paper's form; ``"key"``/``"value"``: one side), so a closed gate
  removes the token entirely (the projection biases would leak in otherwise). It starts open (W = 0, ``gate_bias_init``
  b = 1: sigmoid(1) ~ 0.73 per side), as in the authors' code. Tied with ``"both"`` it is literally ``f_t f_t^T``.
* Dropout removes whole token contributions to C (per token and head): there are no attention weights, and dropping
  query-key pairs would need the N x N matrix this family avoids.

Causal: out_i reads ``C_i = sum_{t<=i} k_t v_t^T``, never stored per token: L x L lower-triangular products within
chunks of L = ``chunk_size``, plus an exclusive cumulative sum of the chunk summaries; memory O(B H (N/L Dh^2 + N L)),
~80 floats per token and head at L = 64, Dh = 32. Non-causal C is summed per chunk too (22% faster on CPU at N = 16K,
results/bench/chunked_sums.md; equal up to summation order). Summaries and normalisation are float32, the reads
``q^T C`` run in ``dtype``. Fast lookups (the paper's point): ``module.apply(variables, x, mask, method="encode")``
returns the normalised summary ``C_BxHxDhxDh`` (causal: C_N, the whole document),
``module.apply(variables, C, x_queries, method="lookup")`` answers queries against it; non-causal, the forward pass is
``lookup(encode(x, mask), x)`` at real positions.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.attention.base import (
    Attention,
    dense_heads,
    per_chunk,
    project_heads,
    project_out,
    qkv_modules,
    split_chunks,
    zero_padding,
)
from lra.errors import InputError

GATE_SIDES = ("both", "key", "value")


def summarize(k_BxNxHxK: jax.Array, v_BxNxHxV: jax.Array, chunk_size: int) -> jax.Array:
    """C = sum_t k_t v_t^T per head (float32), chunk by chunk; padded tokens must already have zero keys."""
    kv_BxCxHxKxV = jnp.einsum(
        "bclhk,bclhv->bchkv",
        split_chunks(k_BxNxHxK, chunk_size),
        split_chunks(v_BxNxHxV, chunk_size),
        preferred_element_type=jnp.float32,
    )
    return kv_BxCxHxKxV.sum(axis=1)


def read(q_BxNxHxK: jax.Array, c_BxHxKxV: jax.Array, chunk_size: int) -> jax.Array:
    """out_i = C^T q_i per head, O(Dh^2) per query; by chunks, so the backward's dC = sum_i q_i dout_i^T is too."""
    b, n, h, _ = q_BxNxHxK.shape
    q_BxCxLxHxK = split_chunks(q_BxNxHxK, chunk_size)
    c_BxCxHxKxV = per_chunk(c_BxHxKxV.astype(q_BxNxHxK.dtype), q_BxCxLxHxK.shape[1])
    out = jnp.einsum("bclhk,bchkv->bclhv", q_BxCxLxHxK, c_BxCxHxKxV)
    return out.reshape(b, -1, h, c_BxHxKxV.shape[-1])[:, :n]


def causal_linear_attention(
    q_BxNxHxK: jax.Array, k_BxNxHxK: jax.Array, v_BxNxHxV: jax.Array, chunk_size: int
) -> jax.Array:
    """out_i = sum_{t<=i} (q_i . k_t) v_t in chunks of L = ``chunk_size`` tokens (module docstring)."""
    b, n, h, _ = q_BxNxHxK.shape
    dv = v_BxNxHxV.shape[-1]
    q, k, v = (split_chunks(a, chunk_size) for a in (q_BxNxHxK, k_BxNxHxK, v_BxNxHxV))
    size = q.shape[2]
    # Summaries of each chunk, then of everything strictly before each chunk.
    kv_BxCxHxKxV = jnp.einsum("bclhk,bclhv->bchkv", k, v, preferred_element_type=jnp.float32)
    before = jnp.cumsum(kv_BxCxHxKxV, axis=1)
    before = jnp.concatenate([jnp.zeros_like(before[:, :1]), before[:, :-1]], axis=1)
    inter = jnp.einsum("bclhk,bchkv->bclhv", q, before.astype(q.dtype))
    # Within a chunk: the direct (L x L) causal products, t <= i.
    scores_BxCxHxLxL = jnp.einsum("bclhk,bcmhk->bchlm", q, k, preferred_element_type=jnp.float32)
    scores_BxCxHxLxL = jnp.where(jnp.tri(size, dtype=bool), scores_BxCxHxLxL, 0.0)
    intra = jnp.einsum("bchlm,bcmhv->bclhv", scores_BxCxHxLxL.astype(v.dtype), v)
    out = (inter.astype(jnp.float32) + intra).reshape(b, -1, h, dv)
    return out[:, :n]


class LinearAttention(Attention):
    """Cheap linear attention, out_i = C^T q_i with C = sum_t k_t v_t^T (options: module docstring)."""

    causal: bool = False
    normalize: bool = True
    chunk_size: int = 64
    tie_kv: bool = False

    def __call__(
        self,
        x_BxNxD: jax.Array,
        mask_BxN: jax.Array,
        memory: jax.Array | None = None,
        deterministic: bool = True,
    ) -> tuple[jax.Array, None]:
        return self._attend("forward", x_BxNxD, mask_BxN, None, deterministic), None

    def encode(self, x_BxNxD: jax.Array, mask_BxN: jax.Array, deterministic: bool = True) -> jax.Array:
        """Summarise the document once: C (B x H x Dh x Dh, float32), normalised if ``normalize``."""
        return self._attend("encode", x_BxNxD, mask_BxN, None, deterministic)

    def lookup(self, summary_BxHxKxV: jax.Array, x_BxMxD: jax.Array) -> jax.Array:
        """Answer queries x (B x M x D) against a summary from ``encode``: O(Dh^2) per query."""
        return self._attend("lookup", x_BxMxD, None, summary_BxHxKxV, True)

    @nn.compact
    def _attend(
        self,
        op: str,
        x: jax.Array,
        mask: jax.Array | None,
        summary: jax.Array | None,
        deterministic: bool,
    ) -> jax.Array:
        h, dh, features = self.num_heads, self.head_dim, x.shape[-1]
        if op == "lookup":
            assert summary is not None  # lookup() passes encode()'s summary
            q = dense_heads(h, dh, "query", self.dtype)(x)
            return project_out(self, read(q, summary, self.chunk_size).astype(self.dtype), features)

        assert mask is not None  # forward and encode pass the token mask
        gate_logits: list[jax.Array] = []  # the gate's projection, when made beside q, k and v
        if op == "forward" and not self.tie_kv:
            # q, k, v (and a gated variant's gate) as one GEMM on an accelerator (base.project_heads)
            gate = self._gate_projection()
            q, k, v, *gate_logits = project_heads(self, x, {**qkv_modules(self), **({"gate": gate} if gate else {})})
        else:  # encode needs keys and values only; tie_kv has no value projection
            if op == "forward":
                q = dense_heads(h, dh, "query", self.dtype)(x)
            k = dense_heads(h, dh, "key", self.dtype)(x)
            v = k if self.tie_kv else dense_heads(h, dh, "value", self.dtype)(x)
        k, v = self._gate(x, k, v, *gate_logits)
        k = jnp.where(mask[..., None, None], k, 0).astype(k.dtype)  # padding never enters C
        dropout_rng = self.dropout_rng(deterministic)
        if dropout_rng is not None:
            keep = jax.random.bernoulli(dropout_rng, 1.0 - self.dropout_rate, k.shape[:3] + (1,))
            k = jnp.where(keep, k / (1.0 - self.dropout_rate), 0).astype(k.dtype)

        counts = mask.astype(jnp.float32)
        if self.causal and op == "forward":
            counts_BxN = jnp.maximum(jnp.cumsum(counts, axis=1), 1.0)
            out = causal_linear_attention(q, k, v, self.chunk_size)
            if self.normalize:
                out = out / counts_BxN[:, :, None, None]
        else:
            c_BxHxKxV = summarize(k, v, self.chunk_size)
            if self.normalize:
                c_BxHxKxV = c_BxHxKxV / jnp.maximum(counts.sum(axis=1), 1.0)[:, None, None, None]
            if op == "encode":
                return c_BxHxKxV
            out = read(q, c_BxHxKxV, self.chunk_size)
        out = zero_padding(out.astype(self.dtype), mask)
        return project_out(self, out, features)

    @nn.nowrap
    def _gate_projection(self) -> Callable[[], nn.DenseGeneral] | None:
        """Hook for gated variants: the gate's projection of x (H x Dh logits), or None (no gate)."""
        return None

    @nn.nowrap
    def _gate(
        self, x_BxNxD: jax.Array, k: jax.Array, v: jax.Array, logits: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Hook for gated variants (``logits``: the gate's projection, if made); ungated, k and v pass unchanged."""
        return k, v


class GatedLinearAttention(LinearAttention):
    """Gated linear attention: each token enters C as (g_t * k_t)(g_t * v_t)^T, g_t = sigmoid(x_t W + b)."""

    gate_on: str = "both"
    gate_bias_init: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gate_on not in GATE_SIDES:  # at construction, so a bad option fails before compiling
            raise InputError(
                f"gate_on={self.gate_on!r} is invalid; set config.model.attention_kwargs.gate_on "
                f"to one of {', '.join(GATE_SIDES)}"
            )

    @nn.nowrap
    def _gate_projection(self) -> Callable[[], nn.DenseGeneral] | None:
        return partial(
            nn.DenseGeneral,
            features=(self.num_heads, self.head_dim),
            dtype=self.dtype,
            kernel_init=nn.initializers.zeros,
            bias_init=nn.initializers.constant(self.gate_bias_init),
            name="gate",
        )

    @nn.nowrap
    def _gate(
        self, x_BxNxD: jax.Array, k: jax.Array, v: jax.Array, logits: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        if logits is None:
            make = self._gate_projection()
            assert make is not None  # this class has a gate
            logits = make()(x_BxNxD)
        g = jax.nn.sigmoid(logits.astype(jnp.float32))
        if self.gate_on in ("both", "key"):
            k = (k * g).astype(k.dtype)
        if self.gate_on in ("both", "value"):
            v = (v * g).astype(v.dtype)
        return k, v
