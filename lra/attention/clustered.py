"""Clustered and improved clustered attention (Vyas, Katharopoulos & Fleuret, 2020), tuned for a CPU.

Paper: *Fast Transformers with Clustered Attention*, arXiv:2007.04825. This is ``implementation="cpu"``;
:mod:`lra.attention.clustered_accelerator` computes the same for GPUs and TPUs (docs/design.md).

Clustered attention (Sec. 3.2): queries hashed by ``bits`` random hyperplanes are grouped into C clusters by Hamming
K-means (Sec. 3.2.2); one softmax row A^c per centroid is each member's (eqs. 3-6). Improved clustered (Sec. 3.3,
App. A.2): each query also attends exactly to its cluster's ``topk`` keys of highest centroid attention, rescaled by
the centroid's mass m^_j on them (eqs. 9-10), A^c covering the rest (eqs. 15-17); Prop. 2: never further (L1) from
full attention than clustered. Nothing is N x N, forward or backward: the largest arrays are C x N, N x bits and
a block of queries' gathered top keys/values. The speed-only choices (packed hashes, loops, scatters; see each
function) give the float formulation's clusters, ties included (tests/test_clustered.py).

Choices where the paper is silent (the authors' released code unless noted):
  * Hash: bit r of q is ``w_r . q > b_r``, w_r ~ N(0, I), b_r ~ N(0, 1) (``hash_bias=True``, the released default:
    Hamming distance then tracks L2, not angle); ``hash_bias=False``: the projection's sign. The planes are not
    parameters: drawn from the ``attention`` rng stream (a fixed key without one), shared by heads and batch.
  * Seeding ``kmeans_init`` (``"auto"``: ``"farthest"`` here, ``"first"`` on accelerators). ``"farthest"`` (ours):
    greedy farthest-point from the first real query, deterministic; every distinct hash gets a centroid when there are
    at most C, so C >= distinct queries is exactly softmax. ``"first"``: the first C real queries (fast-transformers
    <= 0.3.0). ``"random"``: C distinct real queries (fast-transformers >= 0.4.0 draws from the padded length); ours
    never seeds padding, is independent of the padded length, shared by batch and heads, from ``fold_in(rng, 1)``.
    With fewer real queries than C, one repeats; duplicates stay empty.
  * Lloyd step: nearest centroid (ties: lowest index), then each centroid is its members' bitwise majority (ties: 0);
    an empty cluster keeps its centroid (the released code redraws it, which needs an rng). One assignment, then
    ``iterations`` x (update, assign).
  * Padded queries join no cluster; padded keys get a large negative logit and are top keys only in rows with fewer
    than ``topk`` real keys, with weight exactly 0. ``topk`` is clipped to N (improved clustered is then softmax).
  * The assignment is not differentiated; centroids (means of real queries), both attentions, m^_j and values are.
    Attention dropout drops entries of A^c and of the per-query top-k weights.
  * ``num_clusters=100``: the paper's setting for long sequences (ASR, App. C.1).
"""

from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.attention.base import (
    MASK_LOGIT,
    Attention,
    Dtype,
    key_mask_bias,
    project_out,
    project_qkv,
    zero_padding,
)
from lra.attention.clustered_shared import (  # noqa: F401  (public names of this family, re-exported)
    INITS,
    WORD_BITS,
    _dropout,
    _farthest_point_init,
    _first_real_indices,
    _leading_real,
    _random_real_indices,
    _word_major_distance,
    hamming_distance,
    hash_bits,
    hash_queries,
    lsh_planes,
    pack_bits,
    softmax,
    unpack_bits,
)
from lra.errors import InputError

KMEANS_INITS = ("auto",) + INITS  # the module option: "auto" is the implementation's own default
IMPLEMENTATIONS = ("auto", "cpu", "accelerator")
ASSIGN_UNROLL = 10  # centroids per unrolled step of the assignment loop (fastest of 4-25)
TOP_BLOCK = 128  # queries per step of improved clustered's top-k attention (fastest of 64-1024)


# ----------------------------------------------------------------------------------- clustering


def nearest_centroids(words_WxBxHxN: jax.Array, centroids_WxBxHxC: jax.Array) -> jax.Array:
    """Index of the nearest centroid in Hamming distance (ties: the lowest index, by the strict ``<``), B x H x N.
    A loop over the C centroids keeps each query's best distance and index: nothing N x C is stored."""
    num_clusters = centroids_WxBxHxC.shape[-1]

    def step(c: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        best_BxHxN, idx_BxHxN = carry
        c_WxBxHx1 = jax.lax.dynamic_slice_in_dim(centroids_WxBxHxC, c, 1, axis=-1)
        d_BxHxN = _word_major_distance(words_WxBxHxN, c_WxBxHx1)
        closer = d_BxHxN < best_BxHxN
        return jnp.where(closer, d_BxHxN, best_BxHxN), jnp.where(closer, c, idx_BxHxN)

    shape = words_WxBxHxN.shape[1:]
    init = (jnp.full(shape, jnp.iinfo(jnp.int32).max, jnp.int32), jnp.zeros(shape, jnp.int32))
    # Unrolled: XLA fuses the steps into one pass over N (3x faster than one step per iteration, 10-20x than an argmin).
    _, idx_BxHxN = jax.lax.fori_loop(0, num_clusters, step, init, unroll=min(ASSIGN_UNROLL, num_clusters))
    return idx_BxHxN


def cluster_sums(
    x_BxHxNxF: jax.Array,
    clusters_BxHxN: jax.Array,
    mask_BxN: jax.Array,
    num_clusters: int,
    dtype: Dtype = jnp.float32,
) -> jax.Array:
    """Sums in ``dtype`` of each cluster's real rows, B x H x C x F: one scatter-add (``segment_sum`` made XLA copy
    the N x F rows every Lloyd step, 3-4x slower)."""
    b, h, n, f = x_BxHxNxF.shape
    segments = clusters_BxHxN + num_clusters * jnp.arange(b * h).reshape(b, h, 1)
    segments = jnp.where(mask_BxN[:, None, :], segments, b * h * num_clusters)
    dims = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    sums = jax.lax.scatter_add(
        jnp.zeros((b * h * num_clusters + 1, f), dtype),
        segments.reshape(-1, 1),
        x_BxHxNxF.reshape(b * h * n, f).astype(dtype),
        dims,
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )  # the segment ids are all in range
    return sums[:-1].reshape(b, h, num_clusters, f)


def hamming_kmeans(
    h_BxHxNxR: jax.Array,
    mask_BxN: jax.Array,
    num_clusters: int,
    iterations: int = 10,
    init: str = "farthest",
    rng: jax.Array | None = None,
) -> jax.Array:
    """Hamming K-means of hashes (bool, or a bit set where h > 0): each query's cluster, B x H x N. Padded queries
    get one (outputs discarded) but never move a centroid. ``rng``: ``init="random"``'s seeds."""
    bits = h_BxHxNxR if h_BxHxNxR.dtype == jnp.bool_ else h_BxHxNxR > 0
    return hamming_kmeans_bits(bits, mask_BxN, num_clusters, iterations, init, rng)


def hamming_kmeans_bits(
    bits_BxHxNxR: jax.Array,
    mask_BxN: jax.Array,
    num_clusters: int,
    iterations: int = 10,
    init: str = "farthest",
    rng: jax.Array | None = None,
) -> jax.Array:
    """:func:`hamming_kmeans` on boolean bits: distances by XOR + popcount of packed words, votes one sum per step."""
    if init not in INITS:
        raise InputError(f"unknown K-means init {init!r}; valid: {', '.join(INITS)}")
    if init == "random" and rng is None:
        raise ValueError("hamming_kmeans(init='random') draws its seeds from rng: pass a jax key")
    r = bits_BxHxNxR.shape[-1]
    words_WxBxHxN = jnp.moveaxis(pack_bits(bits_BxHxNxR), -1, 0)
    real_Bx1xN = mask_BxN[:, None, :]
    if init == "farthest":
        centroids = _farthest_point_init(words_WxBxHxN, real_Bx1xN, num_clusters)
    else:
        if init == "first":
            idx_BxC = _first_real_indices(mask_BxN, num_clusters)
        else:
            assert rng is not None  # refused above
            idx_BxC = _random_real_indices(mask_BxN, num_clusters, rng)
        centroids = jnp.take_along_axis(words_WxBxHxN, idx_BxC[None, :, None, :], axis=-1)

    # The bits and a ones column (the member count), summed per cluster. Counts <= N: uint16 when it fits (2x faster).
    count_dtype = jnp.uint16 if bits_BxHxNxR.shape[2] < 2**16 else jnp.int32
    ones = jnp.ones(bits_BxHxNxR.shape[:3] + (1,), count_dtype)
    votes_in = jnp.concatenate([bits_BxHxNxR.astype(count_dtype), ones], -1)

    def lloyd(_: int, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        centroids, clusters = carry
        # Bitwise majority: set where more than half the members have the bit (ties: 0).
        votes = cluster_sums(votes_in, clusters, mask_BxN, num_clusters, count_dtype)
        votes = votes.astype(jnp.int32)
        majority_WxBxHxC = jnp.moveaxis(pack_bits(2 * votes[..., :r] > votes[..., r:]), -1, 0)
        centroids = jnp.where(votes[..., r] > 0, majority_WxBxHxC, centroids)  # empty: keep
        return centroids, nearest_centroids(words_WxBxHxN, centroids)

    init_carry = (centroids, nearest_centroids(words_WxBxHxN, centroids))
    _, clusters = jax.lax.fori_loop(0, iterations, lloyd, init_carry)
    return clusters.astype(jnp.int32)


# Jitted so that eager calls (tests, notebooks) reuse the compiled loops.
@partial(jax.jit, static_argnames=("num_clusters", "bits", "iterations", "hash_bias", "init"))
def cluster_queries(
    q_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    rng: jax.Array,
    num_clusters: int,
    bits: int = 63,
    iterations: int = 10,
    hash_bias: bool = True,
    init: str = "farthest",
) -> jax.Array:
    """LSH + Hamming K-means of the queries (not differentiated): cluster ids, B x H x N. ``rng`` draws the planes,
    ``fold_in(rng, 1)`` the random seeds; float32 projections: the dtype acts only through the queries' rounding."""
    q_BxHxNxD = jax.lax.stop_gradient(q_BxNxHxD).transpose(0, 2, 1, 3)
    planes, thresholds = lsh_planes(rng, bits, q_BxHxNxD.shape[-1], hash_bias)
    clusters = hamming_kmeans_bits(
        hash_bits(q_BxHxNxD, planes, thresholds), mask_BxN, num_clusters, iterations, init, jax.random.fold_in(rng, 1)
    )
    return jax.lax.stop_gradient(clusters)


# ------------------------------------------------------------------------------------ attention


def _centroid_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    clusters_BxHxN: jax.Array,
    num_clusters: int,
) -> tuple[jax.Array, jax.Array]:
    """Centroids (mean of real members, eq. 3): float32 masked logits and softmax A^c (eq. 4), B x H x C x N."""
    q_BxHxNxD = q_BxNxHxD.transpose(0, 2, 1, 3)
    ones = jnp.ones(q_BxHxNxD.shape[:3] + (1,), q_BxNxHxD.dtype)
    sums = cluster_sums(jnp.concatenate([q_BxHxNxD, ones], -1), clusters_BxHxN, mask_BxN, num_clusters)
    centroids_BxHxCxD = (sums[..., :-1] / jnp.maximum(sums[..., -1:], 1.0)).astype(q_BxNxHxD.dtype)
    scale = q_BxNxHxD.shape[-1] ** -0.5
    logits_BxHxCxN = (
        jnp.einsum("bhcd,bnhd->bhcn", centroids_BxHxCxD, k_BxNxHxD, preferred_element_type=jnp.float32) * scale
    )
    logits_BxHxCxN = logits_BxHxCxN + key_mask_bias(mask_BxN)
    return logits_BxHxCxN, softmax(logits_BxHxCxN)


def _per_query(x_BxHxCx___: jax.Array, clusters_BxHxN: jax.Array) -> jax.Array:
    """Broadcast per-cluster rows to the cluster's queries (eq. 6): a gather, B x H x N x ..."""
    idx = clusters_BxHxN.reshape(clusters_BxHxN.shape + (1,) * (x_BxHxCx___.ndim - 3))
    return jnp.take_along_axis(x_BxHxCx___, idx, axis=2)


@partial(jax.jit, static_argnames=("num_clusters", "dropout_rate"))
def clustered_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    v_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    clusters_BxHxN: jax.Array,
    num_clusters: int,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
) -> jax.Array:
    """Clustered attention (eqs. 3-6) for a given clustering: B x N x H x D."""
    _, a_BxHxCxN = _centroid_attention(q_BxNxHxD, k_BxNxHxD, mask_BxN, clusters_BxHxN, num_clusters)
    a_BxHxCxN = _dropout(a_BxHxCxN, dropout_rate, dropout_rng)
    vc_BxHxCxD = jnp.einsum("bhcn,bnhd->bhcd", a_BxHxCxN.astype(v_BxNxHxD.dtype), v_BxNxHxD)
    return _per_query(vc_BxHxCxD, clusters_BxHxN).transpose(0, 2, 1, 3)


def _top_attention(
    q_BxNxHxD: jax.Array,
    ktop_BxHxCxKxD: jax.Array,
    vtop_BxHxCxKxD: jax.Array,
    real_BxHxCxK: jax.Array,
    mass_BxHxC: jax.Array,
    clusters_BxHxN: jax.Array,
    keep_BxHxNxK: jax.Array | None,
    block: int,
) -> jax.Array:
    """V^t (eq. 16): each query's softmax over its cluster's top-k keys, scaled by m^_j; B x N x H x D. A
    rematerialised scan over query blocks, so the N x K x D per-query keys/values (270 MB at 16K) never exist whole."""
    b, n, h, dh = q_BxNxHxD.shape
    t = max(1, min(block, n))
    nb = -(-n // t)
    pad = nb * t - n
    scale = dh**-0.5

    def blocks(x: jax.Array, axis: int) -> jax.Array:  # -> NB x ... (axis split in NB x T)
        x = jnp.pad(x, [(0, pad if i == axis else 0) for i in range(x.ndim)])
        x = x.reshape(x.shape[:axis] + (nb, t) + x.shape[axis + 1 :])
        return jnp.moveaxis(x, axis, 0)

    # Head-major blocks: query-major ones made XLA transpose every gathered block.
    @jax.checkpoint
    def one_block(carry: None, xs: tuple[jax.Array, ...]) -> tuple[None, jax.Array]:
        q_BxHxTxD, clusters_BxHxT, keep_BxHxTxK = xs
        k_BxHxTxKxD = _per_query(ktop_BxHxCxKxD, clusters_BxHxT)
        logits_BxHxTxK = (
            jnp.einsum("bhtd,bhtkd->bhtk", q_BxHxTxD, k_BxHxTxKxD, preferred_element_type=jnp.float32) * scale
        )
        logits_BxHxTxK = jnp.where(_per_query(real_BxHxCxK, clusters_BxHxT), logits_BxHxTxK, MASK_LOGIT)
        w_BxHxTxK = softmax(logits_BxHxTxK) * _per_query(mass_BxHxC, clusters_BxHxT)[..., None]
        if keep_BxHxTxK is not None:
            w_BxHxTxK = w_BxHxTxK * keep_BxHxTxK
        v_BxHxTxKxD = _per_query(vtop_BxHxCxKxD, clusters_BxHxT)
        return carry, jnp.einsum("bhtk,bhtkd->bhtd", w_BxHxTxK.astype(vtop_BxHxCxKxD.dtype), v_BxHxTxKxD)

    xs = (
        blocks(q_BxNxHxD.transpose(0, 2, 1, 3), 2),
        blocks(clusters_BxHxN, 2),
        None if keep_BxHxNxK is None else blocks(keep_BxHxNxK, 2),
    )
    _, y_NBxBxHxTxD = jax.lax.scan(one_block, None, xs)
    y_BxHxNxD = jnp.moveaxis(y_NBxBxHxTxD, 0, 2).reshape(b, h, nb * t, dh)[:, :, :n]
    return y_BxHxNxD.transpose(0, 2, 1, 3)


@partial(jax.jit, static_argnames=("num_clusters", "topk", "dropout_rate", "block"))
def improved_clustered_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    v_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    clusters_BxHxN: jax.Array,
    num_clusters: int,
    topk: int,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    block: int = TOP_BLOCK,
) -> jax.Array:
    """Improved clustered attention (eqs. 9-10, 15-17) for a given clustering: B x N x H x D. V^b (eq. 17) is
    A^c V minus its top-k part: no dense "not top" mask."""
    logits_BxHxCxN, a_BxHxCxN = _centroid_attention(q_BxNxHxD, k_BxNxHxD, mask_BxN, clusters_BxHxN, num_clusters)
    k_top = min(topk, k_BxNxHxD.shape[1])
    _, top_BxHxCxK = jax.lax.top_k(jax.lax.stop_gradient(logits_BxHxCxN), k_top)
    a_top_BxHxCxK = jnp.take_along_axis(a_BxHxCxN, top_BxHxCxK, axis=-1)
    mass_BxHxC = a_top_BxHxCxK.sum(-1)  # m^_j, eq. 9
    rng_bottom = rng_top = None
    if dropout_rng is not None:
        rng_bottom, rng_top = jax.random.split(dropout_rng)

    def top_rows(x_BxNxHxD: jax.Array) -> jax.Array:  # the top keys/values: B x H x C x K x D
        per_head = jax.vmap(jax.vmap(lambda x_NxD, i_CxK: x_NxD[i_CxK]))
        return per_head(x_BxNxHxD.transpose(0, 2, 1, 3), top_BxHxCxK)

    # V^b (eq. 17): the centroid attention on the keys outside the cluster's top-k, per cluster.
    a_BxHxCxN = _dropout(a_BxHxCxN, dropout_rate, rng_bottom)
    a_top_BxHxCxK = jnp.take_along_axis(a_BxHxCxN, top_BxHxCxK, axis=-1)
    vtop_BxHxCxKxD = top_rows(v_BxNxHxD)
    vb_BxHxCxD = jnp.einsum("bhcn,bnhd->bhcd", a_BxHxCxN.astype(v_BxNxHxD.dtype), v_BxNxHxD) - jnp.einsum(
        "bhck,bhckd->bhcd", a_top_BxHxCxK.astype(v_BxNxHxD.dtype), vtop_BxHxCxKxD
    )

    # V^t (eq. 16): each query's exact softmax over its cluster's top-k keys, scaled by m^_j.
    real_BxHxCxK = jax.vmap(lambda m_N, i_HxCxK: m_N[i_HxCxK])(mask_BxN, top_BxHxCxK)
    keep = None
    if rng_top is not None and dropout_rate > 0.0:
        b, n, h, _ = q_BxNxHxD.shape
        kept = jax.random.bernoulli(rng_top, 1.0 - dropout_rate, (b, h, n, k_top))
        keep = jnp.where(kept, 1.0 / (1.0 - dropout_rate), 0.0)
    vt_BxNxHxD = _top_attention(
        q_BxNxHxD, top_rows(k_BxNxHxD), vtop_BxHxCxKxD, real_BxHxCxK, mass_BxHxC, clusters_BxHxN, keep, block
    )
    return vt_BxNxHxD + _per_query(vb_BxHxCxD, clusters_BxHxN).transpose(0, 2, 1, 3)


def attention_matrix(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    clusters_BxHxN: jax.Array,
    num_clusters: int,
    topk: int | None = None,
) -> jax.Array:
    """Dense rows (B x H x N x N) of clustered (``topk=None``) or improved clustered attention (A^t, eq. 10).
    Small N only: tests and plots; the modules never call it."""
    logits_BxHxCxN, a_BxHxCxN = _centroid_attention(q_BxNxHxD, k_BxNxHxD, mask_BxN, clusters_BxHxN, num_clusters)
    rows_BxHxNxN = _per_query(a_BxHxCxN, clusters_BxHxN)
    if topk is None:
        return rows_BxHxNxN
    _, top_BxHxCxK = jax.lax.top_k(logits_BxHxCxN, min(topk, k_BxNxHxD.shape[1]))
    is_top_BxHxCxN = jnp.put_along_axis(jnp.zeros(a_BxHxCxN.shape, bool), top_BxHxCxK, True, axis=-1, inplace=False)
    is_top_BxHxNxN = _per_query(is_top_BxHxCxN, clusters_BxHxN)
    mass_BxHxNx1 = jnp.sum(jnp.where(is_top_BxHxNxN, rows_BxHxNxN, 0.0), -1, keepdims=True)
    full_logits = (
        jnp.einsum("bnhd,bmhd->bhnm", q_BxNxHxD, k_BxNxHxD, preferred_element_type=jnp.float32)
        * q_BxNxHxD.shape[-1] ** -0.5
    )
    full_logits = jnp.where(is_top_BxHxNxN & mask_BxN[:, None, None, :], full_logits, MASK_LOGIT)
    top_rows = jax.nn.softmax(full_logits, axis=-1) * mass_BxHxNx1
    return jnp.where(is_top_BxHxNxN, top_rows, rows_BxHxNxN)


# -------------------------------------------------------------------------------------- modules


def resolve_implementation(implementation: str) -> str:
    """``"auto"`` -> ``"cpu"`` on JAX's CPU backend, else ``"accelerator"``: this process's eager answer (the modules
    resolve it by the platform they are lowered for, as a deviceless compile for a GPU needs)."""
    if implementation != "auto":
        return implementation
    return "cpu" if jax.default_backend() == "cpu" else "accelerator"


def _accelerator():
    """:mod:`lra.attention.clustered_accelerator`, imported on use (it imports this module)."""
    from lra.attention import clustered_accelerator

    return clustered_accelerator


class ClusteredAttention(Attention):
    """Clustered attention: one softmax row per query cluster, broadcast to its members.

    ``num_clusters``: C per head and sequence; ``bits``: R (paper: 63); ``iterations``: Lloyd steps (paper: 10).
    ``implementation="auto"``: ``"cpu"`` when the step is lowered for a CPU, else ``"accelerator"``.
    """

    num_clusters: int = 100
    bits: int = 63
    iterations: int = 10
    hash_bias: bool = True
    kmeans_init: str = "auto"
    implementation: str = "auto"

    def _check(self) -> None:
        if self.num_clusters < 1 or self.bits < 1 or self.iterations < 0:
            raise InputError(
                f"{type(self).__name__}: num_clusters={self.num_clusters} and bits={self.bits} "
                f"must be >= 1 and iterations={self.iterations} >= 0 "
                "(config.model.attention_kwargs)"
            )
        if self.kmeans_init not in KMEANS_INITS:
            raise InputError(f"{type(self).__name__}: kmeans_init={self.kmeans_init!r} is not one of {KMEANS_INITS}")
        if self.implementation not in IMPLEMENTATIONS:
            raise InputError(
                f"{type(self).__name__}: implementation={self.implementation!r} is not one of {IMPLEMENTATIONS} "
                "(config.model.attention_kwargs)"
            )

    def _attend(self, q, k, v, mask, clusters, dropout_rng, accelerated: bool) -> jax.Array:
        attend = _accelerator().clustered_attention if accelerated else clustered_attention
        return attend(
            q, k, v, mask, clusters, self.num_clusters, dropout_rate=self.dropout_rate, dropout_rng=dropout_rng
        )

    def _cluster_and_attend(self, q, k, v, mask_BxN, rng, dropout_rng, accelerated: bool) -> jax.Array:
        init = self.kmeans_init
        if init == "auto":
            init = _accelerator().DEFAULT_INIT if accelerated else "farthest"
        cluster = _accelerator().cluster_queries if accelerated else cluster_queries
        clusters_BxHxN = cluster(q, mask_BxN, rng, self.num_clusters, self.bits, self.iterations, self.hash_bias, init)
        return self._attend(q, k, v, mask_BxN, clusters_BxHxN, dropout_rng, accelerated)

    @nn.compact
    def __call__(
        self,
        x_BxNxD: jax.Array,
        mask_BxN: jax.Array,
        memory: jax.Array | None = None,
        deterministic: bool = True,
    ) -> tuple[jax.Array, None]:
        self._check()
        q, k, v = project_qkv(self, x_BxNxD)
        rng = self.make_rng("attention") if self.has_rng("attention") else jax.random.key(0)
        dropout_rng = self.dropout_rng(deterministic)
        if self.implementation == "auto":
            # by the platform lowered for, not the default backend: a deviceless GPU compile runs on the CPU backend
            y_BxNxHxDh = jax.lax.platform_dependent(
                q,
                k,
                v,
                mask_BxN,
                cpu=lambda q, k, v, m: self._cluster_and_attend(q, k, v, m, rng, dropout_rng, accelerated=False),
                default=lambda q, k, v, m: self._cluster_and_attend(q, k, v, m, rng, dropout_rng, accelerated=True),
            )
        else:
            accelerated = resolve_implementation(self.implementation) == "accelerator"
            y_BxNxHxDh = self._cluster_and_attend(q, k, v, mask_BxN, rng, dropout_rng, accelerated)
        y = project_out(self, zero_padding(y_BxNxHxDh, mask_BxN), x_BxNxD.shape[-1])
        return y, None


class ImprovedClusteredAttention(ClusteredAttention):
    """Improved clustered attention: exact attention on each cluster's ``topk`` keys (paper: 32)."""

    topk: int = 32

    def _check(self) -> None:
        super()._check()
        if self.topk < 1:
            raise InputError(f"{type(self).__name__}: topk={self.topk} must be >= 1")

    def _attend(self, q, k, v, mask, clusters, dropout_rng, accelerated: bool) -> jax.Array:
        topk = min(self.topk, k.shape[1])  # clip here too: one compilation for every topk >= N
        attend = _accelerator().improved_clustered_attention if accelerated else improved_clustered_attention
        return attend(
            q, k, v, mask, clusters, self.num_clusters, topk, dropout_rate=self.dropout_rate, dropout_rng=dropout_rng
        )
