"""Cheap linear and gated linear attention (de Brébisson & Vincent, 2016).

Paper: *A Cheap Linear Attention Mechanism with Fast Lookups and Fixed-Size Representations*,
arXiv:1609.05866.

The paper removes the softmax from ``R(D, Q) = H^T softmax(H q)``, leaving ``R = H^T H q = C q``:
the document is summarised once into the fixed-size matrix ``C = sum_t h_t h_t^T`` (k x k), and
every lookup then costs O(k^2), independent of the document length. In the transformer's per-head
q/k/v form (the shared ``query``/``key``/``value``/``out`` projections) the hidden state ``h_t``
plays two roles, key and value, so per head::

    C = sum_t k_t v_t^T          (Dh x Dh, over the real tokens)
    out_i = C^T q_i = sum_t (q_i . k_t) v_t

Choices (the paper works with one RNN state, not a transformer block):

* ``tie_kv`` (default off): whether the value is the key. The paper's summary is the symmetric
  ``C = sum_t h_t h_t^T``, one vector on both sides; ``tie_kv=True`` makes that literal
  (``v_t = k_t``, no ``value`` projection is created), so ``linear:tie_kv=true,normalize=false``
  with one head is the paper's form ``out_i = C q_i`` read through the ``out`` projection. Our
  default gives the value its own projection, as every other family here does: it keeps the
  parameter tree and capacity comparable with softmax attention (the LRA setting), and it
  decouples what a token is matched on (its key) from what it returns (its value); tied, C is
  symmetric positive semi-definite and a token returns the very vector it is matched on.
* ``normalize`` (default on): C is divided by the number of real tokens (causal: by the number of
  real tokens up to i), i.e. a mean instead of the paper's sum. A sum grows with the length, so
  without it the output scale would depend on how long the sequence is (LRA lengths vary from
  hundreds to thousands of tokens), and deep stacks would blow up; ``normalize=False`` is the
  paper's plain sum.
* No 1/sqrt(Dh) logit scale: there is no softmax to keep out of saturation; the paper has none.
* Gated linear attention (Section 4): ``f_t = sigmoid(W h_t + b) * h_t`` enters C as ``f_t f_t^T``,
  i.e. the same gated vector on both sides of the outer product. Here ``h_t`` is the token's
  representation at the block input (the analogue of the document RNN's state) and the gate,
  ``sigmoid(x_t W + b)`` with one value per head feature, multiplies both the key and the value
  (``gate_on="both"``, the paper's form; ``"key"``/``"value"`` gate one side only). Gating the
  projected key/value rather than x_t itself means a closed gate removes the token's contribution
  entirely (the projection biases would otherwise still leak in). The gate starts open:
  W = 0, b = 1 (``gate_bias_init``), so at initialisation every token passes with weight
  sigmoid(1) ~ 0.73 on each side, as in the authors' code. With ``tie_kv=True`` and
  ``gate_on="both"`` the two sides are literally the same vector ``g_t * k_t``, the paper's
  ``f_t f_t^T``; untied, the same gate multiplies two different projections.
* Attention dropout: there are no attention weights, so dropout removes whole token
  contributions to C (per token and head, inverted-dropout scaled); dropping the query-key pair
  weights would need the N x N matrix this family exists to avoid.

Causal mode (``causal=True``): out_i uses the running summary ``C_i = sum_{t<=i} k_t v_t^T``.
It is computed chunk by chunk without ever storing one C per token: within a chunk of
``chunk_size`` = L tokens the (L x L, lower-triangular) products are computed directly, and the
chunks' summaries are combined by an exclusive cumulative sum over chunks. Forward and backward
memory is O(B H (N/L Dh^2 + N L)) -- linear in N, with N/L summaries instead of N (the backward
of a cumulative sum is a reverse cumulative sum of the same size). With the default L = 64 and
Dh = 32 (4 heads, qkv 128) that is about 80 floats per token and head.

Non-causal mode sums C chunk by chunk too (same result up to summation order): on CPU that makes
the layer 22% faster at N = 16K (results/bench/chunked_sums.md).

Summaries (C and the chunk sums, sums over up to N tokens) and the normalisation are float32;
the reads ``q^T C`` run in ``dtype`` like softmax's weighted sum.

Fast lookups (the paper's point): ``encode(x, mask)`` returns the summary ``C_BxHxDhxDh`` (already
normalised) and ``lookup(C, x)`` answers any number of queries against it; call them through
``module.apply(variables, x, mask, method="encode")`` and
``module.apply(variables, C, x_queries, method="lookup")``. In non-causal mode the forward pass is
exactly ``lookup(encode(x, mask), x)`` at the real positions. In causal mode ``encode`` gives the
final state C_N, the summary of the whole document.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.attention.base import (
    QKV,
    Attention,
    dense_heads,
    per_chunk,
    project_heads,
    project_out,
    split_chunks,
    zero_padding,
)
from lra.errors import InputError

GATE_SIDES = ("both", "key", "value")


def summarize(k_BxNxHxK: jax.Array, v_BxNxHxV: jax.Array, chunk_size: int) -> jax.Array:
    """C = sum_t k_t v_t^T per head (float32); padded tokens must already have zero keys.

    Summed chunk by chunk (see ``read``): one Dh x Dh partial sum per chunk of ``chunk_size``
    tokens, then a sum over the chunks.
    """
    kv_BxCxHxKxV = jnp.einsum(
        "bclhk,bclhv->bchkv",
        split_chunks(k_BxNxHxK, chunk_size),
        split_chunks(v_BxNxHxV, chunk_size),
        preferred_element_type=jnp.float32,
    )
    return kv_BxCxHxKxV.sum(axis=1)


def read(q_BxNxHxK: jax.Array, c_BxHxKxV: jax.Array, chunk_size: int) -> jax.Array:
    """out_i = C^T q_i per head: O(Dh^2) per query, whatever the document length.

    Computed per chunk of ``chunk_size`` queries against C broadcast to every chunk, so that the
    backward pass's sum over queries (dC = sum_i q_i dout_i^T) is also taken chunk by chunk (see
    ``split_chunks``). Results equal the unchunked sums up to float summation order.
    """
    b, n, h, _ = q_BxNxHxK.shape
    q_BxCxLxHxK = split_chunks(q_BxNxHxK, chunk_size)
    c_BxCxHxKxV = per_chunk(c_BxHxKxV.astype(q_BxNxHxK.dtype), q_BxCxLxHxK.shape[1])
    out = jnp.einsum("bclhk,bchkv->bclhv", q_BxCxLxHxK, c_BxCxHxKxV)
    return out.reshape(b, -1, h, c_BxHxKxV.shape[-1])[:, :n]


def causal_linear_attention(
    q_BxNxHxK: jax.Array, k_BxNxHxK: jax.Array, v_BxNxHxV: jax.Array, chunk_size: int
) -> jax.Array:
    """out_i = sum_{t<=i} (q_i . k_t) v_t, in chunks of ``chunk_size`` tokens.

    Memory O(B H (N/L Dh^2 + N L)) for chunk size L, forward and backward; no per-token C.
    """
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
    """Cheap linear attention: out_i = C^T q_i with the document summary C = sum_t k_t v_t^T.

    Attributes:
      causal: out_i sees only tokens t <= i (running summary); else the whole sequence.
      normalize: divide C by the number of real tokens (up to i when causal), so the output scale
        does not grow with the sequence length; False is the paper's plain sum.
      chunk_size: tokens per chunk. Causal: the running summary's granularity (memory
        N/L Dh^2 + N L per head). Non-causal: the sums over tokens are taken chunk by chunk, a
        speed setting only (see lra.attention.base.split_chunks).
      tie_kv: values are the keys (v_t = k_t, no ``value`` parameters): the paper's symmetric
        C = sum_t h_t h_t^T. Off by default so the value has its own projection like every other
        family's (see the module docstring).
    """

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
            # q, k, v (and a gated variant's gate: a projection of x of the same shape) as one GEMM
            # on an accelerator (base.project_heads)
            modules = {n: partial(dense_heads, h, dh, n, self.dtype) for n in QKV}
            gate = self._gate_projection()
            q, k, v, *gate_logits = project_heads(self, x, {**modules, **({"gate": gate} if gate else {})})
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
        """Hook for gated variants (``logits``: the gate's projection when the caller made it): the plain
        mechanism lets every token in unchanged."""
        return k, v


class GatedLinearAttention(LinearAttention):
    """Gated linear attention: each token enters C as (g_t * k_t)(g_t * v_t)^T, g_t = sigmoid(x_t W + b).

    Attributes:
      gate_on: "both" (the paper's f_t f_t^T: the same gate on both sides), "key" or "value".
      gate_bias_init: initial gate bias b (W starts at 0), so the gate starts open at sigmoid(b).
    """

    gate_on: str = "both"
    gate_bias_init: float = 1.0

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
        if self.gate_on not in GATE_SIDES:
            raise InputError(
                f"gate_on={self.gate_on!r} is invalid; set config.model.attention_kwargs.gate_on "
                f"to one of {', '.join(GATE_SIDES)}"
            )
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
