"""Dispersed hierarchical attention (Mukund S & Easwarakumar): a sliding window plus dispersed keys.

Paper: *Dispersed Hierarchical Attention Network for Machine Translation and Language Understanding on Long Documents
with Linear Complexity*, ICON 2023 (ACL Anthology 2023.icon-1.10; no arXiv version).

Query ``i`` attends to the keys at fixed offsets (Algorithm 2, read literally): the window ``-h .. h``,
``h = window // 2`` (an odd window rounds down), and ``+-(h + 2 + 3 + ... + g)`` for the gaps ``g = 2 .. max_gap``
(paper: 180, reaching ``h + 16289``, its 16 K tokens); only keys in ``[0, N)`` count. This reproduces every row of
Table 1 (window 4: N = 10 -> 62 scores, 1000 -> 60550, 16384 -> 3970510). Algorithm 1 / Eq. 4's series
``1,1,1,2,2,2,2,3,...`` starts the dispersed keys at ``w`` and agrees only for w = 4; we follow Algorithm 2, with which
Section 4 defines the mechanism. The score is left open ("a simple dot product ... or cosine similarity ..."): the
default scales the dot product by ``Dh^-1/2``, so this is softmax restricted to the pattern (softmax's parameter tree
and weights; equal to softmax when the window covers the sequence); ``scale_scores=False`` is the paper's plain dot
product.

Memory O(N x K), forward and backward, for K offsets (at most 2h + 1 + 2 (max_gap - 1); dropping ``|d|>=N`` when
tracing, K ~ 2 sqrt(2N): 181 at N = 4096); the N x N ``pattern()`` is for tests and plots only. ``implementation``:
docs/design.md ("Dispersed attention: one function, two implementations"). ``"chunks"``, the CPU-tuned one (fwd + bwd at
N = 4096, 4 heads of 32, 2-core CPU: 40-50 ms; results/bench/dispersed_impl.md), computes scores and weighted sums
offset by offset from shifted windows, with a hand-written ``jax.custom_vjp``:

* q, k, v as float32 "planes" D x B x H x N, so every operation runs along contiguous positions. A chunk of about
  ``chunk_size`` queries reads, for offset d, the key window ``c0 + d + [0, chunk)`` of planes zero-padded by ``chunk``
  each side (pad reads, padded and out-of-sequence keys masked), and only the sorted offsets whose window overlaps
  ``[0, N)`` (``_tiling``): this skips a third of the K x N pairs (``num_scores(N) / (K N)`` = 0.67) and keeps a chunk's
  weights in cache between passes.
* Logits by a scan over offsets, each step one fused multiply-add over the D planes (XLA's CPU reductions of products
  ran 10-20x slower); softmax by a running-maximum scan; ``y`` by a scan over groups of ``block_size`` offsets.
  Backward: ``dS = W (dW - dy . y)`` (``dy . y = sum_j W dW``, with or without dropout); dk and dv added into the key
  window each offset read (a dense update, never an index scatter).
* The chunk length and ``ALIAS_PAD`` keep the D planes from lying a multiple of 4 KiB apart, competing for one L1 set
  (256 positions x 4 heads ran 1.2-1.3x slower than 248).
* Slower in one-off A/B runs at N = 4096, not kept: whole-sequence offset scans (~70 ms, planes read from L3 per
  offset); per-query gathers with scatter-add gradients (~350 ms); dk, dv from whole-sequence weight rows or across
  neighbouring chunks; FlashAttention-style recomputation (XLA recomputed the dots per feature: 3x); one fused sum over
  all offsets (split, or 20-40 s to compile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.attention.base import MASK_LOGIT, Attention, Dtype, project_out, project_qkv, zero_padding
from lra.attention.dispersed_gather import gather_attention
from lra.errors import InputError

PAPER_WINDOW = 4  # Table 1 ("the window size is normalized at w = 4")
PAPER_MAX_GAP = 180  # Algorithm 2's gap sequence [2, 3, ..., 180]

# Offsets per step of the weighted sums, at most (``_group_size``); 8-16 within noise at N = 1K-16K, 4 and 32 slower.
DEFAULT_BLOCK_SIZE = 16
ALIAS_PAD = 48  # extra columns per plane (see the module docstring)
DEFAULT_CHUNK_SIZE = 256  # positions per chunk (see the module docstring)
IMPLEMENTATIONS = ("auto", "chunks", "gather")  # see dispersed_attention


def offsets(window: int = PAPER_WINDOW, max_gap: int = PAPER_MAX_GAP) -> np.ndarray:
    """Sorted relative key offsets ``j - i`` of Algorithm 2 (0, the query itself, included)."""
    if window < 0 or max_gap < 1:
        raise InputError(f"need window >= 0 and max_gap >= 1, got window={window}, max_gap={max_gap}")
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
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


class _Tiling(NamedTuple):
    """Static layout: query chunks and, per chunk, the window of offsets it needs."""

    n: int  # sequence length
    n_pad: int  # n rounded up to whole chunks (padded keys are masked, padded queries dropped)
    chunk: int
    group: int  # offsets per step of the weighted sums
    offs: np.ndarray  # the live offsets, sorted, then dummies (2 n_pad: never inside [0, n))
    first_q: np.ndarray  # per query chunk: its first row of offs (a window of rows_q rows)
    rows_q: int

    def starts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per chunk and row: the offset d, and ``chunk + c0 + d``, where its keys start in a ``_padded`` row. Pad
        reads are masked (their gradients dropped); a row the chunk does not need is moved wholly into a pad."""
        offs_CxR = self.offs[self.first_q[:, None] + np.arange(self.rows_q)[None, :]]
        c0_C = np.arange(len(self.first_q)) * self.chunk
        start_CxR = np.clip(c0_C[:, None] + offs_CxR, -self.chunk, self.n_pad)
        return offs_CxR.astype(np.int32), (self.chunk + start_CxR).astype(np.int32)


def _chunk_length(chunk_size: int, n: int, rows: int, planes: int) -> int:
    """Positions per chunk: a multiple of 8 in [chunk_size / 2, chunk_size]: most L1 sets, least padding."""
    if n <= chunk_size:
        return n

    def score(c: int) -> tuple[int, int, int]:
        stride = 4 * rows * c
        return len({(p * stride % 4096) // 64 for p in range(planes)}), -_round_up(n, c), c

    return max(range(chunk_size - chunk_size % 8, max(8, chunk_size // 2) - 1, -8), key=score)


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


@lru_cache(maxsize=64)
def _tiling(live: tuple[int, ...], n: int, chunk: int, block_size: int) -> _Tiling:
    """Chunks of ``chunk`` positions, each with the run of sorted offsets whose keys overlap ``[0, n)``."""
    offs = np.asarray(live, np.int64)
    c = max(1, min(chunk, n))
    n_pad = _round_up(n, c)
    c0 = np.arange(n_pad // c) * c
    # Query chunk [c0, c0 + c) reads keys c0 + d + [0, c): some inside [0, n) iff -(c - 1) - c0 <= d <= n - 1 - c0.
    lo_q, hi_q = np.searchsorted(offs, -(c - 1) - c0, "left"), np.searchsorted(offs, n - 1 - c0, "right")
    group = _group_size(int((hi_q - lo_q).max()), block_size)
    rows_q = _round_up(int((hi_q - lo_q).max()), group)
    k_ext = max(len(offs), rows_q)
    offs = np.concatenate([offs, np.full(k_ext - len(offs), 2 * n_pad, np.int64)])
    return _Tiling(n, n_pad, c, group, offs, np.minimum(lo_q, k_ext - rows_q), rows_q)


def _planes(x_BxNxHxD: jax.Array, n_pad: int) -> jax.Array:
    """B x N x H x D -> float32 D x B x H x n_pad: one contiguous sequence per (feature, row, head)."""
    x = jnp.transpose(x_BxNxHxD.astype(jnp.float32), (3, 0, 2, 1))
    return jnp.pad(x, [(0, 0)] * 3 + [(0, n_pad - x.shape[-1])])


def _chunks(x_BxNxHxD: jax.Array, t: _Tiling) -> jax.Array:
    """B x N x H x D -> float32 chunks x D x B x H x chunk (zero-padded to n_pad)."""
    b, n, h, d = x_BxNxHxD.shape
    x = jnp.pad(x_BxNxHxD.astype(jnp.float32), [(0, 0), (0, t.n_pad - n), (0, 0), (0, 0)])
    return jnp.transpose(x.reshape(b, t.n_pad // t.chunk, t.chunk, h, d), (1, 4, 0, 3, 2))


def _unchunks(x_CxDxBxHxL: jax.Array, n: int, dtype: Dtype) -> jax.Array:
    nc, d, b, h, c = x_CxDxBxHxL.shape
    x = jnp.transpose(x_CxDxBxHxL, (2, 0, 4, 3, 1)).reshape(b, nc * c, h, d)
    return x[:, :n].astype(dtype)


def _padded(x_Bx___xN: jax.Array, chunk: int) -> jax.Array:
    """``chunk`` zero columns, x, then ``chunk + ALIAS_PAD`` zero columns (see ``_Tiling.starts``)."""
    zeros = lambda width: jnp.zeros(x_Bx___xN.shape[:-1] + (width,), x_Bx___xN.dtype)  # noqa: E731
    return jnp.concatenate([zeros(chunk), x_Bx___xN, zeros(chunk + ALIAS_PAD)], axis=-1)


def _row_scan(
    a_DxBxHxL: jax.Array,
    x2_DxBxHxM: jax.Array,
    starts_R: jax.Array,
    finish: Callable[..., jax.Array],
    extra_xs: tuple[jax.Array, ...],
) -> jax.Array:
    """Rows r of ``finish(s_r, *extra_r)``, s_r[b, h, i] = sum_c a[c, b, h, i] x[c, b, h, starts[r] + i]; a slice
    per plane (one slice of all planes was materialised by XLA, twice as slow)."""
    width = a_DxBxHxL.shape[-1]

    def step(carry: None, xs):
        start, *extra = xs
        s_BxHxL = _tree_sum(
            [
                a_DxBxHxL[c] * jax.lax.dynamic_slice_in_dim(x2_DxBxHxM[c], start, width, axis=2)
                for c in range(a_DxBxHxL.shape[0])
            ]
        )
        return carry, finish(s_BxHxL, start, *extra)

    return jax.lax.scan(step, None, (starts_R, *extra_xs))[1]


def _softmax_rows(s_RxBxHxL: jax.Array) -> jax.Array:
    """Softmax over the rows (offsets) of masked logits, by an online-softmax scan: XLA's CPU reductions over this
    axis took ~5 ns an element, and running sums inside the logits' scan made XLA recompute each logit row 3 times."""

    def running(carry, s_BxHxL):
        top, total = carry
        new_top = jnp.maximum(top, s_BxHxL)
        return (new_top, total * jnp.exp(top - new_top) + jnp.exp(s_BxHxL - new_top)), None

    shape = s_RxBxHxL.shape[1:]
    init = (jnp.full(shape, -jnp.inf, jnp.float32), jnp.zeros(shape, jnp.float32))
    (top, total), _ = jax.lax.scan(running, init, s_RxBxHxL)
    return jnp.exp(s_RxBxHxL - top) * (1.0 / total)


def _weighted_sum(w_RxBxHxL: jax.Array, x2_DxBxHxM: jax.Array, starts_R: jax.Array, group: int) -> jax.Array:
    """acc[c, b, h, i] = sum_r w[r, b, h, i] x[c, b, h, starts[r] + i]: D x B x H x L, by groups of ``group`` rows
    (R a multiple); each weight row its own dynamic slice (slicing a whole group made XLA copy it)."""
    width = w_RxBxHxL.shape[-1]
    row_shape = (1,) + w_RxBxHxL.shape[1:]

    def step(acc: jax.Array, xs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        g, starts_G = xs
        terms = [
            jax.lax.dynamic_slice(w_RxBxHxL, (g * group + i, 0, 0, 0), row_shape)
            * jax.lax.dynamic_slice_in_dim(x2_DxBxHxM, starts_G[i], width, axis=3)
            for i in range(group)
        ]
        return acc + _tree_sum(terms), None

    acc0 = jnp.zeros(x2_DxBxHxM.shape[:3] + (width,), jnp.float32)
    steps = starts_R.shape[0] // group
    return jax.lax.scan(step, acc0, (jnp.arange(steps), starts_R.reshape(steps, group)))[0]


@partial(jax.custom_vjp, nondiff_argnums=(5,))
def _pattern_attention(q, k, v, mask2_BxM, keep, key):
    """Softmax attention over the offsets (``keep``: dropout's scaled mask, or None)."""
    return _pattern_attention_fwd(q, k, v, mask2_BxM, keep, key)[0]


def _pattern_attention_fwd(q, k, v, mask2_BxM, keep, key):
    t = _tiling(*key)
    offs_CxR, starts_CxR = t.starts()
    k2, v2 = _padded(_planes(k, t.n_pad), t.chunk), _padded(_planes(v, t.n_pad), t.chunk)
    c0_C = jnp.arange(t.n_pad // t.chunk, dtype=jnp.int32) * t.chunk
    cols_L = jnp.arange(t.chunk, dtype=jnp.int32)

    def chunk_step(carry: None, xs):
        c0, q_DxBxHxL, offs_R, starts_R, keep_R = xs

        def logits(s_BxHxL, start, d):  # + the mask: keys outside [0, n) and padded keys
            key_L = c0 + d + cols_L
            real_BxL = jax.lax.dynamic_slice_in_dim(mask2_BxM, start, t.chunk, axis=1) & (key_L >= 0) & (key_L < t.n)
            return s_BxHxL + jnp.where(real_BxL, 0.0, MASK_LOGIT)[:, None, :]

        w_R = _softmax_rows(_row_scan(q_DxBxHxL, k2, starts_R, logits, (offs_R,)))
        wd_R = w_R if keep_R is None else w_R * keep_R
        y_DxBxHxL = _weighted_sum(wd_R, v2, starts_R, t.group)
        return carry, (y_DxBxHxL, w_R)

    q_chunks = _chunks(q, t)
    xs = (c0_C, q_chunks, jnp.asarray(offs_CxR), jnp.asarray(starts_CxR), keep)
    _, (y_chunks, w_chunks) = jax.lax.scan(chunk_step, None, xs)
    return _unchunks(y_chunks, t.n, v.dtype), (q_chunks, k2, v2, w_chunks, keep, y_chunks)


def _pattern_attention_bwd(key, residuals, dy_BxNxHxD):
    q_chunks, k2, v2, w_chunks, keep, y_chunks = residuals
    t = _tiling(*key)
    _, starts_CxR = t.starts()
    _, d, b, h, _ = q_chunks.shape

    # One pass over the query chunks (module docstring); row = sum_j W dW = dy . y, a sum over D, not the offsets.
    dy_chunks = _chunks(dy_BxNxHxD, t)

    def query_step(accs, xs):
        starts_R, w_R, keep_R, q_DxBxHxL, dy_DxBxHxL, y_DxBxHxL = xs
        row_BxHxL = _tree_sum([dy_DxBxHxL[c] * y_DxBxHxL[c] for c in range(dy_DxBxHxL.shape[0])])
        wd_R = w_R if keep_R is None else w_R * keep_R
        if keep_R is None:
            ds_R = _row_scan(dy_DxBxHxL, v2, starts_R, lambda s, _, w: w * (s - row_BxHxL), (w_R,))
        else:
            ds_R = _row_scan(dy_DxBxHxL, v2, starts_R, lambda s, _, w, wd: wd * s - w * row_BxHxL, (w_R, wd_R))
        dq_DxBxHxL = _weighted_sum(ds_R, k2, starts_R, t.group)

        def scatter(accs, xs):
            start, ds_BxHxL, wd_BxHxL = xs
            new = []
            for acc, w, x in zip(accs, (ds_BxHxL, wd_BxHxL), (q_DxBxHxL, dy_DxBxHxL), strict=False):
                window = jax.lax.dynamic_slice_in_dim(acc, start, t.chunk, axis=3)
                new.append(jax.lax.dynamic_update_slice_in_dim(acc, window + w * x, start, axis=3))
            return tuple(new), None

        accs, _ = jax.lax.scan(scatter, accs, (starts_R, ds_R, wd_R))
        return accs, dq_DxBxHxL

    zeros = jnp.zeros((d, b, h, t.n_pad + 2 * t.chunk + ALIAS_PAD), jnp.float32)
    xs = (jnp.asarray(starts_CxR), w_chunks, keep, q_chunks, dy_chunks, y_chunks)
    (dk2, dv2), dq_chunks = jax.lax.scan(query_step, (zeros, zeros), xs)
    dtype = dy_BxNxHxD.dtype  # q, k, v and y share the module dtype
    unplanes = lambda x: jnp.transpose(x[..., t.chunk : t.chunk + t.n], (1, 3, 2, 0)).astype(dtype)  # noqa: E731
    return _unchunks(dq_chunks, t.n, dtype), unplanes(dk2), unplanes(dv2), None, None


_pattern_attention.defvjp(_pattern_attention_fwd, _pattern_attention_bwd)


def _group_size(num_offsets: int, block_size: int) -> int:
    """Offsets per step: in [block_size / 2, block_size], wasting the fewest dummy offsets."""
    most = max(1, min(block_size, num_offsets))
    return min(range(max(1, most // 2), most + 1), key=lambda g: (-(-num_offsets // g) * g - num_offsets, -g))


def _chunks_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask_BxN: jax.Array,
    dropout_rng: jax.Array | None,
    *,
    live: tuple[int, ...],
    dropout_rate: float,
    block_size: int,
    chunk_size: int,
) -> jax.Array:
    """The CPU-tuned implementation (``"chunks"``): scans over query chunks (module docstring)."""
    b, n, h, dh = q.shape
    key = (live, n, _chunk_length(chunk_size, n, b * h, dh), block_size)
    t = _tiling(*key)
    mask2_BxM = _padded(jnp.pad(mask_BxN.astype(bool), [(0, 0), (0, t.n_pad - n)]), t.chunk)
    keep = None
    if dropout_rng is not None:
        shape = (t.n_pad // t.chunk, t.rows_q, b, h, t.chunk)
        kept = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, shape)
        keep = jnp.where(kept, 1.0 / (1.0 - dropout_rate), 0.0).astype(jnp.float32)
    return _pattern_attention(q, k, v, mask2_BxM, keep, key)


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
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    implementation: str = "auto",
) -> jax.Array:
    """Softmax attention over the keys at static relative offsets ``offs`` (not outside ``[0, N)``, not padded),
    float32 logits; ``block_size`` and ``chunk_size`` set the speed of ``"chunks"`` only (module docstring)."""
    if implementation not in IMPLEMENTATIONS:
        raise InputError(f"dispersed implementation={implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    n, dh = q_BxNxHxD.shape[1], q_BxNxHxD.shape[3]
    offs = np.sort(np.asarray(offs))
    live = tuple(int(d) for d in offs[np.abs(offs) < n])
    if scale is None:
        scale = dh**-0.5
    if deterministic or dropout_rate <= 0.0:
        dropout_rng = None
    else:
        assert dropout_rng is not None, "dropout in training needs dropout_rng"
    q = q_BxNxHxD * jnp.asarray(scale, q_BxNxHxD.dtype)
    chunks = partial(
        _chunks_attention, live=live, dropout_rate=dropout_rate, block_size=block_size, chunk_size=chunk_size
    )
    gather = partial(gather_attention, live=live, dropout_rate=dropout_rate)
    args = (q, k_BxNxHxD, v_BxNxHxD, mask_BxN, dropout_rng)
    if implementation == "chunks":
        return chunks(*args)
    if implementation == "gather":
        return gather(*args)
    return jax.lax.platform_dependent(*args, cpu=chunks, default=gather)


class DispersedAttention(Attention):
    """Softmax attention restricted to the dispersed hierarchical pattern (options: module docstring)."""

    window: int = PAPER_WINDOW
    max_gap: int = PAPER_MAX_GAP
    scale_scores: bool = True
    block_size: int = DEFAULT_BLOCK_SIZE
    chunk_size: int = DEFAULT_CHUNK_SIZE
    implementation: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.implementation not in IMPLEMENTATIONS:
            raise InputError(
                f"attention_kwargs.implementation={self.implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}"
            )

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
            chunk_size=self.chunk_size,
            implementation=self.implementation,
        )
        y = project_out(self, zero_padding(y_BxNxHxDh, mask_BxN), x_BxNxD.shape[-1])
        return y, None
