"""Dispersed hierarchical attention (Mukund S & Easwarakumar): a sliding window plus dispersed keys.

Each query ``i`` attends to the keys at the relative offsets of one fixed, symmetric pattern
(Algorithm 2 of the paper, read literally):

* the sliding window: offsets ``-h .. h`` with ``h = window // 2`` (the query itself included);
* dispersed keys beyond it: from ``j = i + h`` the algorithm steps ``j += g`` for the gaps
  ``g = 2, 3, ..., max_gap`` (180 in the paper), i.e. offsets ``h + (2 + 3 + ... + g)``, and the
  mirror image ``-(h + 2 + ... + g)`` on the left. The keys thin out linearly with distance.

Only keys inside ``[0, N)`` count. This literal reading reproduces every row of the paper's Table 1
exactly (window 4: N = 10 -> 62 scores, N = 1000 -> 60550, N = 16384 -> 3970510), so it is the
one implemented. (The paper's Algorithm 1 / Eq. 4 counting series ``1,1,1,2,2,2,2,3,...`` starts
the dispersed keys at offset ``w``; that agrees with Algorithm 2 only for ``w = 4``. We follow
Algorithm 2, as Section 4 defines the mechanism with it.) With ``max_gap = 180`` the farthest
key is ``h + 16289`` tokens away, covering the paper's 16 K tokens. An odd window rounds down
(``window // 2`` as in Algorithm 2).

The paper leaves the score function open ("a simple dot product ... or cosine similarity ...");
we use scaled dot-product scores (``Dh^-1/2``) by default so the module is softmax attention
restricted to the pattern: it keeps softmax's parameter tree (query/key/value/out), evaluates
softmax-trained weights, and equals softmax when the window covers the sequence.
``scale_scores=False`` gives the paper's plain dot product.

Memory is O(N x K) for K pattern offsets (at most 2h + 1 + 2 (max_gap - 1), 363 for w = 4;
offsets with ``|d| >= N`` are dropped when tracing, so K ~ 2 sqrt(2N): 181 at N = 4096), forward
and backward. The N x N pattern is never built: ``pattern()`` exists for tests and plots only.

Implementation (measured on a 2-core CPU; forward + backward at N = 4096, 4 heads of 32: ~90 ms,
was ~350 ms with per-query gathers; the module's history: results/bench/dispersed_impl.md).
The scores and the weighted sums are computed offset by offset from shifted copies of whole
sequences, never gathered per query, and the backward pass is written by hand
(``jax.custom_vjp``) so that every gradient is again a shifted weighted sum, never a
scatter-add:

* Layout "planes": q, k, v as D x B x H x N (float32), so every operation runs along the
  sequence, whose positions are contiguous. A shifted key row is a slice of the keys doubled
  along N (``[k, k]``): ``k[(i + d) mod N]`` starts at ``d mod N``. The wrapped reads only ever
  meet weight 0: a key outside ``[0, N)`` is masked like a padded key, and in the transposed
  sums the query ``(m - d) mod N`` that wraps has its own key at offset d outside the sequence.
* Scores: a scan over the K offsets; each step is one fused multiply-add over the D planes
  (``s[j, i] = sum_c q[c, i] k[c, i + d_j]``), one row of the K x B x H x N logits. No
  reduction is left to XLA: its CPU reductions of products (over D, or softmax's over K) ran
  10-20x slower than fused sums. The softmax's row maxima and sums come from a scan over the K
  rows (running maximum, rescaled running sum), then one elementwise pass gives the weights.
* Weighted sums ``y[i] = sum_j w[j, i] v[i + d_j]``: a scan over groups of ``block_size``
  offsets (at most 16 by default), each group one fused sum added to the accumulator.
* Backward: dS = W (dW - dy . y) with dW[j, i] = dy[i] . v[i + d_j], computed by the scores'
  scan (dW is never stored; ``dy . y = sum_j W dW`` holds with or without dropout);
  dq[i] = sum_j dS[j, i] k[i + d_j]; dk[m] = sum_j dS[j, m - d_j] q[m - d_j] and
  dv[m] = sum_j W[j, m - d_j] dy[m - d_j]: the same weighted sums over shifts -d_j, with the
  weights shifted too.
* Planes carry ``ALIAS_PAD`` extra columns: rows whose length is a multiple of 4 KiB made the
  32 plane reads of a step alias in the L1 cache (measured 2x slower).
* Rejected (slower here): one fused sum over all offsets (XLA split it, or took 20-40 s to
  compile the scores), per-query gathers of keys in blocks (the previous implementation, with
  scatter-add gradients), query chunks around the offset scans, XLA's softmax over K.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.attention.base import MASK_LOGIT, Attention, Dtype, project_out, project_qkv, zero_padding

PAPER_WINDOW = 4  # Table 1 ("the window size is normalized at w = 4")
PAPER_MAX_GAP = 180  # Algorithm 2's gap sequence [2, 3, ..., 180]

# Offsets per step of the weighted-sum scans (upper bound: the group size is chosen in
# [block_size / 2, block_size] to waste the fewest dummy offsets). 8-16 measured within noise
# of each other at N = 1K-16K, 4 and 32 slower.
DEFAULT_BLOCK_SIZE = 16
ALIAS_PAD = 48  # extra columns per plane (see the module docstring)



def offsets(window: int = PAPER_WINDOW, max_gap: int = PAPER_MAX_GAP) -> np.ndarray:
    """Sorted relative key offsets ``j - i`` of Algorithm 2 (0, the query itself, included)."""
    if window < 0 or max_gap < 1:
        raise ValueError(f"need window >= 0 and max_gap >= 1, got window={window}, max_gap={max_gap}")
    half = window // 2
    dispersed = half + np.cumsum(np.arange(2, max_gap + 1))  # j = i + h, then j += g for g = 2..
    return np.sort(np.concatenate([np.arange(-half, half + 1), dispersed, -dispersed]))


def live_offsets(seq_len: int, window: int = PAPER_WINDOW, max_gap: int = PAPER_MAX_GAP) -> np.ndarray:
    """The offsets that can reach a key inside a sequence of ``seq_len`` tokens (``|d| < N``)."""
    offs = offsets(window, max_gap)
    return offs[np.abs(offs) < seq_len]


def pattern(seq_len: int, window: int = PAPER_WINDOW, max_gap: int = PAPER_MAX_GAP) -> np.ndarray:
    """Boolean N x N: ``[i, j]`` is True when query ``i`` attends to key ``j`` (small N only)."""
    rel = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]
    return np.isin(rel, offsets(window, max_gap))


def num_scores(seq_len: int, window: int = PAPER_WINDOW, max_gap: int = PAPER_MAX_GAP) -> int:
    """Number of attention scores ``pattern(N).sum()`` without building N x N (Table 1's column)."""
    return int(np.maximum(seq_len - np.abs(offsets(window, max_gap)), 0).sum())


def _pattern_bias(mask_BxN: jax.Array, offs: np.ndarray) -> jax.Array:
    """Additive logit bias B x N x 1 x K: 0 where key ``n + d`` exists and is real, else MASK_LOGIT."""
    n = mask_BxN.shape[1]
    key_NxK = np.arange(n)[:, None] + offs[None, :]
    inside_NxK = (key_NxK >= 0) & (key_NxK < n)
    real_BxNxK = mask_BxN[:, key_NxK % n] & inside_NxK
    return jnp.where(real_BxNxK, 0.0, MASK_LOGIT)[:, :, None, :].astype(jnp.float32)


def _tree_sum(terms: Sequence[jax.Array]) -> jax.Array:
    """Pairwise sum: independent adds (more parallel than a running sum; XLA keeps the order)."""
    terms = list(terms)
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


def _planes(x_BxNxHxD: jax.Array) -> jax.Array:
    """B x N x H x D -> float32 D x B x H x N: one contiguous sequence per (feature, row, head)."""
    return jnp.transpose(x_BxNxHxD.astype(jnp.float32), (3, 0, 2, 1))


def _unplanes(x_DxBxHxN: jax.Array, dtype: Dtype) -> jax.Array:
    return jnp.transpose(x_DxBxHxN, (1, 3, 2, 0)).astype(dtype)


def _doubled(x_Dx___xN: jax.Array) -> jax.Array:
    """``[x, x]`` along N, then ALIAS_PAD zero columns: x[(i + s) mod N] is column s + i (s < N)."""
    zeros = jnp.zeros(x_Dx___xN.shape[:-1] + (ALIAS_PAD,), x_Dx___xN.dtype)
    return jnp.concatenate([x_Dx___xN, x_Dx___xN, zeros], axis=-1)


def _scores(a_DxBxHxN: jax.Array, x2_DxBxHxM: jax.Array, starts_K: jax.Array,
            w_KxBxHxN: jax.Array | None = None, row_BxHxN: jax.Array | None = None,
            wd_KxBxHxN: jax.Array | None = None) -> jax.Array:
    """s[j, b, h, i] = sum_c a[c, b, h, i] x[c, b, h, (i + s_j) mod N]: K x B x H x N.

    With ``w`` and ``row``: softmax's backward ``wd s - w row`` instead (``wd``: the weights
    after dropout, default ``w``), fused into the same pass so that s is never stored. A scan
    over the offsets; each step reads the D planes once, shifted by one dynamic slice per plane
    (one slice of all planes was materialised by XLA, twice as slow).
    """
    n = a_DxBxHxN.shape[-1]
    a_DxBxHxM = jnp.pad(a_DxBxHxN, [(0, 0)] * 3 + [(0, ALIAS_PAD)])

    def step(carry: None, xs: tuple[jax.Array, ...]) -> tuple[None, jax.Array]:
        start, w_BxHxN, wd_BxHxN = xs
        s_BxHxN = _shifted_dot(a_DxBxHxM, x2_DxBxHxM, start, n)
        if w_BxHxN is None:
            return carry, s_BxHxN
        if wd_BxHxN is None:
            return carry, w_BxHxN * (s_BxHxN - row_BxHxN)
        return carry, wd_BxHxN * s_BxHxN - w_BxHxN * row_BxHxN

    return jax.lax.scan(step, None, (starts_K, w_KxBxHxN, wd_KxBxHxN))[1]


def _shifted_dot(a_DxBxHxM: jax.Array, x2_DxBxHxM: jax.Array, start: jax.Array, n: int) -> jax.Array:
    """sum_c a[c, :, :, i] x[c, :, :, start + i] for i < n: B x H x n, one fused sum."""
    return _tree_sum([a_DxBxHxM[c, :, :, :n]
                      * jax.lax.dynamic_slice_in_dim(x2_DxBxHxM[c], start, n, axis=2)
                      for c in range(a_DxBxHxM.shape[0])])


def _softmax_weights(a_DxBxHxN: jax.Array, x2_DxBxHxM: jax.Array, starts_K: jax.Array,
                     bias_KxBx1xN: jax.Array) -> jax.Array:
    """softmax over the offsets of ``_scores(a, x) + bias``: K x B x H x N.

    The row maxima and sums of exponentials come from a scan over the K logit rows (running
    maximum and rescaled running sum, as in online softmax), so the weights are one elementwise
    pass ``exp(s - max) / sum``: XLA's CPU reductions over this K x N array (jax.nn.softmax)
    took ~5 ns an element. (Keeping the running sums in the scan that computes the logits made
    XLA recompute every logit row three times.)
    """
    s_KxBxHxN = _scores(a_DxBxHxN, x2_DxBxHxM, starts_K)

    def running(carry: tuple[jax.Array, jax.Array], xs: tuple[jax.Array, jax.Array]):
        top_BxHxN, total_BxHxN = carry
        s_BxHxN = xs[0] + xs[1]
        new_top = jnp.maximum(top_BxHxN, s_BxHxN)
        total_BxHxN = total_BxHxN * jnp.exp(top_BxHxN - new_top) + jnp.exp(s_BxHxN - new_top)
        return (new_top, total_BxHxN), None

    shape = s_KxBxHxN.shape[1:]
    init = (jnp.full(shape, -jnp.inf, jnp.float32), jnp.zeros(shape, jnp.float32))
    (top_BxHxN, total_BxHxN), _ = jax.lax.scan(running, init, (s_KxBxHxN, bias_KxBx1xN))
    return jnp.exp(s_KxBxHxN + bias_KxBx1xN - top_BxHxN) * (1.0 / total_BxHxN)


def _weighted_sum(w_KxBxHxN: jax.Array, x2_DxBxHxM: jax.Array, starts_K: jax.Array, group: int,
                  shift_weights: bool) -> jax.Array:
    """y[c, b, h, i] = sum_j w[j, b, h, i'] x[c, b, h, (i + s_j) mod N]: D x B x H x N.

    ``i' = i``, or ``(i + s_j) mod N`` with ``shift_weights`` (the transposed sums of the
    backward pass). A scan over groups of ``group`` offsets (K must be a multiple): each step
    adds one fused sum of ``group`` shifted products to the accumulator. Every weight row is
    its own dynamic slice of ``w`` (slicing a whole group first made XLA copy it).
    """
    k, n = w_KxBxHxN.shape[0], w_KxBxHxN.shape[-1]
    w = jnp.concatenate([w_KxBxHxN, w_KxBxHxN], axis=-1) if shift_weights else w_KxBxHxN
    row_shape = (1,) + w_KxBxHxN.shape[1:]

    def step(acc: jax.Array, xs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        g, starts_G = xs
        terms = []
        for i in range(group):
            col = starts_G[i] if shift_weights else 0
            w_row = jax.lax.dynamic_slice(w, (g * group + i, 0, 0, col), row_shape)
            terms.append(w_row * jax.lax.dynamic_slice_in_dim(x2_DxBxHxM, starts_G[i], n, axis=3))
        return acc + _tree_sum(terms), None

    acc0 = jnp.zeros(x2_DxBxHxM.shape[:3] + (n,), jnp.float32)
    groups = (jnp.arange(k // group), starts_K.reshape(k // group, group))
    return jax.lax.scan(step, acc0, groups)[0]


def _starts(offs: tuple[int, ...], n: int, sign: int) -> jax.Array:
    return jnp.asarray((sign * np.asarray(offs, np.int64)) % n, jnp.int32)


@partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _pattern_attention(q, k, v, bias_KxBx1xN, keep_KxBxHxN, offs, group):
    """Softmax attention over the offsets (``keep``: dropout's scaled mask, or None)."""
    return _pattern_attention_fwd(q, k, v, bias_KxBx1xN, keep_KxBxHxN, offs, group)[0]


def _pattern_attention_fwd(q, k, v, bias_KxBx1xN, keep_KxBxHxN, offs, group):
    n = q.shape[1]
    fwd = _starts(offs, n, 1)
    q_p, k2_p, v2_p = _planes(q), _doubled(_planes(k)), _doubled(_planes(v))
    w_KxBxHxN = _softmax_weights(q_p, k2_p, fwd, bias_KxBx1xN)
    wd_KxBxHxN = w_KxBxHxN if keep_KxBxHxN is None else w_KxBxHxN * keep_KxBxHxN
    y_p = _weighted_sum(wd_KxBxHxN, v2_p, fwd, group, shift_weights=False)
    residuals = (q_p, k2_p, v2_p, w_KxBxHxN, keep_KxBxHxN, y_p)
    return _unplanes(y_p, v.dtype), residuals


def _pattern_attention_bwd(offs, group, residuals, dy_BxNxHxD):
    q_p, k2_p, v2_p, w_KxBxHxN, keep_KxBxHxN, y_p = residuals
    n = dy_BxNxHxD.shape[1]
    fwd, back = _starts(offs, n, 1), _starts(offs, n, -1)
    dy_p = _planes(dy_BxNxHxD)
    # Softmax backward dS = W (dW - row) with dW = scores(dy, v) (times the dropout mask), and
    # row = sum_j W dW = sum_j Wd dWd = dy . y (a sum over D, not over the K offsets).
    row_BxHxN = _tree_sum([dy_p[c] * y_p[c] for c in range(dy_p.shape[0])])
    wd_KxBxHxN = None if keep_KxBxHxN is None else w_KxBxHxN * keep_KxBxHxN
    ds_KxBxHxN = _scores(dy_p, v2_p, fwd, w_KxBxHxN, row_BxHxN, wd_KxBxHxN)
    wd_KxBxHxN = w_KxBxHxN if wd_KxBxHxN is None else wd_KxBxHxN
    dq_p = _weighted_sum(ds_KxBxHxN, k2_p, fwd, group, shift_weights=False)
    dk_p = _weighted_sum(ds_KxBxHxN, _doubled(q_p), back, group, shift_weights=True)
    dv_p = _weighted_sum(wd_KxBxHxN, _doubled(dy_p), back, group, shift_weights=True)
    dtype = dy_BxNxHxD.dtype  # q, k, v and y share the module dtype
    return _unplanes(dq_p, dtype), _unplanes(dk_p, dtype), _unplanes(dv_p, dtype), None, None


_pattern_attention.defvjp(_pattern_attention_fwd, _pattern_attention_bwd)


def _group_size(num_offsets: int, block_size: int) -> int:
    """Offsets per step: in [block_size / 2, block_size], wasting the fewest dummy offsets."""
    most = max(1, min(block_size, num_offsets))
    return min(range(max(1, most // 2), most + 1),
               key=lambda g: (-(-num_offsets // g) * g - num_offsets, -g))


def dispersed_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    v_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    offs: np.ndarray,
    *,
    scale: float | None = None,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> jax.Array:
    """Softmax attention of each query over the keys at relative offsets ``offs`` (static).

    Keys outside ``[0, N)`` and padded keys are excluded; logits and softmax are float32.
    Memory is O(N x K) forward and backward (module docstring). ``block_size`` is the number of
    offsets per step of the weighted-sum scans (speed only). Dropout drops entries of the
    K x B x H x N weights, one draw for the whole sequence.
    """
    b, n, h, dh = q_BxNxHxD.shape
    offs = np.asarray(offs)
    offs = offs[np.abs(offs) < n]
    if scale is None:
        scale = dh**-0.5
    group = _group_size(len(offs), block_size)
    bias_KxBx1xN = jnp.transpose(_pattern_bias(mask_BxN, offs), (3, 0, 2, 1))
    extra = -(-len(offs) // group) * group - len(offs)
    if extra:  # dummy offsets (0, always masked: weight 0) fill the last group
        offs = np.concatenate([offs, np.zeros(extra, offs.dtype)])
        bias_KxBx1xN = jnp.concatenate(
            [bias_KxBx1xN, jnp.full((extra, b, 1, n), MASK_LOGIT, jnp.float32)])
    keep = None
    if not deterministic and dropout_rate > 0.0:
        kept = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, (len(offs), b, h, n))
        keep = jnp.where(kept, 1.0 / (1.0 - dropout_rate), 0.0).astype(jnp.float32)
    q = q_BxNxHxD * jnp.asarray(scale, q_BxNxHxD.dtype)
    return _pattern_attention(q, k_BxNxHxD, v_BxNxHxD, bias_KxBx1xN, keep,
                              tuple(int(d) for d in offs), group)


class DispersedAttention(Attention):
    """Softmax attention restricted to the dispersed hierarchical pattern (module docstring).

    Attributes:
      window: sliding-window width w (w // 2 keys each side); the paper's default 4.
      max_gap: last gap of the dispersion sequence 2, 3, ..., max_gap (paper: 180).
      scale_scores: scale scores by Dh^-1/2 (default); False: the paper's plain dot product.
      block_size: offsets per step of the weighted-sum scans (speed only; same result).
    """

    window: int = PAPER_WINDOW
    max_gap: int = PAPER_MAX_GAP
    scale_scores: bool = True
    block_size: int = DEFAULT_BLOCK_SIZE

    @nn.compact
    def __call__(
        self,
        x_BxNxD: jax.Array,
        mask_BxN: jax.Array,
        memory: jax.Array | None = None,
        deterministic: bool = True,
    ) -> tuple[jax.Array, None]:
        q, k, v = project_qkv(self, x_BxNxD)
        dropout_rng = self.dropout_rng(deterministic)
        y_BxNxHxDh = dispersed_attention(
            q,
            k,
            v,
            mask_BxN,
            offsets(self.window, self.max_gap),
            scale=None if self.scale_scores else 1.0,
            dropout_rate=self.dropout_rate,
            dropout_rng=dropout_rng,
            deterministic=deterministic,
            block_size=self.block_size,
        )
        y = project_out(self, zero_padding(y_BxNxHxDh, mask_BxN), x_BxNxD.shape[-1])
        return y, None
