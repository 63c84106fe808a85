"""Clustered and improved clustered attention for GPUs and TPUs: the same maths, few large kernels.

Paper: *Fast Transformers with Clustered Attention* (Vyas, Katharopoulos & Fleuret), arXiv:2007.04825. This is
``implementation="accelerator"`` (docs/design.md): :mod:`lra.attention.clustered`'s clusters (same seeding), attention
up to summation order (tests/test_clustered_accelerator.py), hash planes, padding, dropout draws and choices, so
weights trained with one evaluate with the other. One large fused kernel costs about what a small one does, and each
loop step a launch (and a host round trip for a GPU ``while``), so:

  * Assignment: every query against every centroid, one fused ``argmin`` (ties: lowest index).
  * Votes ``onehot^T @ [bits, 1]`` in bfloat16, float32 accumulation: exact (0/1 operands, integer sums < 2^24).
    Centroid sums are ``onehot^T @ q`` and per-query broadcasts (eq. 6) gathers with a one-hot GEMM gradient
    (:func:`take_clusters`): no float scatter-add. Lloyd steps are unrolled: no loop whose count grows with N.
  * Seeding (the paper is silent): ``"auto"`` is ``"first"``, fast-transformers' CUDA choice, found without a sort;
    ``"farthest"`` (the CPU default: C - 1 sequential picks) and ``"random"`` (one sort) are available.
  * Improved clustered: a dense C x N top-k mask gives m^_j and V^b (eq. 17); the top-k attention (eq. 16) runs over
    all N queries under :func:`jax.checkpoint`, so the N x K x D gathered copies are transient. Only the C x K top
    keys/values' own gather keeps a scatter-add gradient (independent of N).

Nothing is N x N: the largest arrays are C x N, N x C and, transiently, N x K x D.
"""

from __future__ import annotations

from functools import partial, reduce

import jax
import jax.numpy as jnp

from lra.attention.base import MASK_LOGIT, key_mask_bias
from lra.attention.clustered_shared import (
    INITS,
    _dropout,
    _farthest_point_init,
    _random_real_indices,
    hash_bits,
    lsh_planes,
    pack_bits,
    softmax,
)
from lra.errors import InputError

DEFAULT_INIT = "first"  # kmeans_init="auto" on accelerators: fast-transformers' CUDA seeding

HIGHEST = jax.lax.Precision.HIGHEST  # one-hot GEMMs, in float32: no TF32 rounding of q or g on a GPU


# ----------------------------------------------------------------------------------- clustering


def one_hot_clusters(clusters_BxHxN: jax.Array, num_clusters: int, dtype=jnp.float32) -> jax.Array:
    """The assignment as a B x H x N x C one-hot matrix (S of Sec. 3.2, transposed)."""
    return (clusters_BxHxN[..., None] == jnp.arange(num_clusters, dtype=clusters_BxHxN.dtype)).astype(dtype)


def nearest_centroids(words_WxBxHxN: jax.Array, centroids_WxBxHxC: jax.Array) -> jax.Array:
    """Index of the nearest centroid in Hamming distance (ties: the lowest index), B x H x N: one fused argmin."""
    d_BxHxNxC = jnp.zeros(words_WxBxHxN.shape[1:] + centroids_WxBxHxC.shape[-1:], jnp.int32)
    for w in range(words_WxBxHxN.shape[0]):
        x = words_WxBxHxN[w][..., :, None] ^ centroids_WxBxHxC[w][..., None, :]
        d_BxHxNxC = d_BxHxNxC + jax.lax.population_count(x).astype(jnp.int32)
    return jnp.argmin(d_BxHxNxC, axis=-1).astype(jnp.int32)


def cluster_votes(x_BxHxNxF: jax.Array, clusters_BxHxN: jax.Array, mask_BxN: jax.Array, num_clusters: int) -> jax.Array:
    """Exact per-cluster sums of 0/1 rows over the real queries (int32 B x H x C x F): one bfloat16 GEMM."""
    if x_BxHxNxF.shape[2] >= 2**24:
        raise InputError(f"cluster_votes: {x_BxHxNxF.shape[2]} queries; float32 counts are exact below 2^24")
    onehot_BxHxNxC = one_hot_clusters(clusters_BxHxN, num_clusters, jnp.bfloat16)
    onehot_BxHxNxC = onehot_BxHxNxC * mask_BxN[:, None, :, None].astype(jnp.bfloat16)
    sums = jnp.einsum(
        "bhnc,bhnf->bhcf", onehot_BxHxNxC, x_BxHxNxF.astype(jnp.bfloat16), preferred_element_type=jnp.float32
    )
    return sums.astype(jnp.int32)


def first_real_indices(mask_BxN: jax.Array, count: int) -> jax.Array:
    """Positions (B x count) of the first ``count`` real tokens, the last repeated when short.

    Without a sort (ranks are a cumsum, one compare-and-argmax); equal to the shared ``_first_real_indices`` (tested).
    """
    rank_BxN = jnp.cumsum(mask_BxN.astype(jnp.int32), axis=-1) - 1
    lengths_B = jnp.maximum(mask_BxN.sum(-1), 1)
    want_BxC = jnp.minimum(jnp.arange(count)[None, :], lengths_B[:, None] - 1)
    hit_BxCxN = mask_BxN[:, None, :] & (rank_BxN[:, None, :] == want_BxC[:, :, None])
    return jnp.argmax(hit_BxCxN, axis=-1).astype(jnp.int32)


def hamming_kmeans_bits(
    bits_BxHxNxR: jax.Array,
    mask_BxN: jax.Array,
    num_clusters: int,
    iterations: int = 10,
    init: str = DEFAULT_INIT,
    rng: jax.Array | None = None,
) -> jax.Array:
    """:func:`lra.attention.clustered.hamming_kmeans_bits` with all-centroid assignment and GEMM votes."""
    if init not in INITS:
        raise InputError(f"unknown K-means init {init!r}; valid: {', '.join(INITS)}")
    if init == "random" and rng is None:
        raise ValueError("hamming_kmeans(init='random') draws its seeds from rng: pass a jax key")
    r = bits_BxHxNxR.shape[-1]
    words_WxBxHxN = jnp.moveaxis(pack_bits(bits_BxHxNxR), -1, 0)
    if init == "farthest":
        centroids_WxBxHxC = _farthest_point_init(words_WxBxHxN, mask_BxN[:, None, :], num_clusters)
    else:
        if init == "first":
            idx_BxC = first_real_indices(mask_BxN, num_clusters)
        else:
            assert rng is not None  # refused above
            idx_BxC = _random_real_indices(mask_BxN, num_clusters, rng)
        centroids_WxBxHxC = jnp.take_along_axis(words_WxBxHxN, idx_BxC[None, :, None, :], axis=-1)

    ones = jnp.ones(bits_BxHxNxR.shape[:3] + (1,), bits_BxHxNxR.dtype)
    votes_in_BxHxNxR1 = jnp.concatenate([bits_BxHxNxR, ones], -1)
    clusters_BxHxN = nearest_centroids(words_WxBxHxN, centroids_WxBxHxC)
    for _ in range(iterations):  # a config constant (10): unrolled, no while loop
        votes = cluster_votes(votes_in_BxHxNxR1, clusters_BxHxN, mask_BxN, num_clusters)
        # Bitwise majority: set where more than half the members have the bit (ties: 0).
        majority_WxBxHxC = jnp.moveaxis(pack_bits(2 * votes[..., :r] > votes[..., r:]), -1, 0)
        centroids_WxBxHxC = jnp.where(votes[..., r] > 0, majority_WxBxHxC, centroids_WxBxHxC)  # empty: keep
        clusters_BxHxN = nearest_centroids(words_WxBxHxN, centroids_WxBxHxC)
    return clusters_BxHxN


@partial(jax.jit, static_argnames=("num_clusters", "bits", "iterations", "hash_bias", "init"))
def cluster_queries(
    q_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    rng: jax.Array,
    num_clusters: int,
    bits: int = 63,
    iterations: int = 10,
    hash_bias: bool = True,
    init: str = DEFAULT_INIT,
) -> jax.Array:
    """:func:`lra.attention.clustered.cluster_queries` (same planes and seeds): cluster ids, B x H x N."""
    q_BxHxNxD = jax.lax.stop_gradient(q_BxNxHxD).transpose(0, 2, 1, 3)
    planes, thresholds = lsh_planes(rng, bits, q_BxHxNxD.shape[-1], hash_bias)
    clusters = hamming_kmeans_bits(
        hash_bits(q_BxHxNxD, planes, thresholds), mask_BxN, num_clusters, iterations, init, jax.random.fold_in(rng, 1)
    )
    return jax.lax.stop_gradient(clusters)


# ------------------------------------------------------------------------------------ attention


@jax.custom_vjp
def take_clusters(table_BxHxCx___: jax.Array, clusters_BxHxN: jax.Array, onehot_BxHxNxC: jax.Array) -> jax.Array:
    """Each query's row of a per-cluster table (eq. 6), B x H x N x ...; backward ``onehot^T @ g``, no scatter-add."""
    idx = clusters_BxHxN.reshape(clusters_BxHxN.shape + (1,) * (table_BxHxCx___.ndim - 3))
    return jnp.take_along_axis(table_BxHxCx___, idx, axis=2)


def _take_fwd(table, clusters, onehot):
    return take_clusters(table, clusters, onehot), onehot


def _take_bwd(onehot_BxHxNxC, g_BxHxNx___):
    b, h, n = g_BxHxNx___.shape[:3]
    shape, dtype = (b, h, onehot_BxHxNxC.shape[-1]) + g_BxHxNx___.shape[3:], g_BxHxNx___.dtype  # the table's
    g_BxHxNxF = g_BxHxNx___.reshape(b, h, n, -1)
    # float32 operands, as the CPU path sums (XLA's CPU backend has no bfloat16 x bfloat16 -> float32 dot of this shape)
    d_BxHxCxF = jnp.einsum(
        "bhnc,bhnf->bhcf", onehot_BxHxNxC.astype(jnp.float32), g_BxHxNxF.astype(jnp.float32), precision=HIGHEST
    )
    return d_BxHxCxF.reshape(shape).astype(dtype), None, None


take_clusters.defvjp(_take_fwd, _take_bwd)


def _centroid_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    onehot_BxHxNxC: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Centroids (eq. 3) by one-hot GEMMs; their logits and softmax A^c (eq. 4), B x H x C x N."""
    real_BxHxNxC = onehot_BxHxNxC * mask_BxN[:, None, :, None].astype(onehot_BxHxNxC.dtype)
    sums_BxHxCxD = jnp.einsum(
        "bhnc,bnhd->bhcd",
        real_BxHxNxC.astype(jnp.float32),
        q_BxNxHxD.astype(jnp.float32),  # float32 sums, as the CPU path's
        precision=HIGHEST,
    )
    counts_BxHxC = real_BxHxNxC.astype(jnp.float32).sum(2)
    centroids_BxHxCxD = (sums_BxHxCxD / jnp.maximum(counts_BxHxC, 1.0)[..., None]).astype(q_BxNxHxD.dtype)
    scale = q_BxNxHxD.shape[-1] ** -0.5
    logits_BxHxCxN = (
        jnp.einsum("bhcd,bnhd->bhcn", centroids_BxHxCxD, k_BxNxHxD, preferred_element_type=jnp.float32) * scale
    )
    logits_BxHxCxN = logits_BxHxCxN + key_mask_bias(mask_BxN)
    return logits_BxHxCxN, softmax(logits_BxHxCxN)


def _one_hot(clusters_BxHxN: jax.Array, num_clusters: int, dtype) -> jax.Array:
    # in the model's dtype: 0/1 are exact in any float type
    return jax.lax.stop_gradient(one_hot_clusters(clusters_BxHxN, num_clusters, dtype))


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
    onehot = _one_hot(clusters_BxHxN, num_clusters, q_BxNxHxD.dtype)
    _, a_BxHxCxN = _centroid_attention(q_BxNxHxD, k_BxNxHxD, mask_BxN, onehot)
    a_BxHxCxN = _dropout(a_BxHxCxN, dropout_rate, dropout_rng)
    vc_BxHxCxD = jnp.einsum("bhcn,bnhd->bhcd", a_BxHxCxN.astype(v_BxNxHxD.dtype), v_BxNxHxD)
    return take_clusters(vc_BxHxCxD, clusters_BxHxN, onehot).transpose(0, 2, 1, 3)


@jax.checkpoint
def _top_attention(
    q_BxHxNxD: jax.Array,
    ktop_BxHxCxKxD: jax.Array,
    vtop_BxHxCxKxD: jax.Array,
    real_BxHxCxK: jax.Array,
    mass_BxHxC: jax.Array,
    clusters_BxHxN: jax.Array,
    onehot_BxHxNxC: jax.Array,
    keep_BxHxNxK: jax.Array | None,
) -> jax.Array:
    """V^t (eq. 16) for all N queries, B x H x N x D; rematerialised: the N x K x D gathers are redone backward."""
    scale = q_BxHxNxD.shape[-1] ** -0.5
    k_BxHxNxKxD = take_clusters(ktop_BxHxCxKxD, clusters_BxHxN, onehot_BxHxNxC)
    logits_BxHxNxK = jnp.einsum("bhnd,bhnkd->bhnk", q_BxHxNxD, k_BxHxNxKxD, preferred_element_type=jnp.float32) * scale
    real_BxHxNxK = jnp.take_along_axis(real_BxHxCxK, clusters_BxHxN[..., None], axis=2)  # not differentiated
    logits_BxHxNxK = jnp.where(real_BxHxNxK, logits_BxHxNxK, MASK_LOGIT)
    w_BxHxNxK = softmax(logits_BxHxNxK) * take_clusters(mass_BxHxC, clusters_BxHxN, onehot_BxHxNxC)[..., None]
    if keep_BxHxNxK is not None:
        w_BxHxNxK = w_BxHxNxK * keep_BxHxNxK
    v_BxHxNxKxD = take_clusters(vtop_BxHxCxKxD, clusters_BxHxN, onehot_BxHxNxC)
    return jnp.einsum("bhnk,bhnkd->bhnd", w_BxHxNxK.astype(vtop_BxHxCxKxD.dtype), v_BxHxNxKxD)


@partial(jax.jit, static_argnames=("num_clusters", "topk", "dropout_rate"))
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
) -> jax.Array:
    """Improved clustered attention (eqs. 9-10, 15-17) for a given clustering: B x N x H x D (CPU's dropout draws)."""
    onehot = _one_hot(clusters_BxHxN, num_clusters, q_BxNxHxD.dtype)
    logits_BxHxCxN, a_BxHxCxN = _centroid_attention(q_BxNxHxD, k_BxNxHxD, mask_BxN, onehot)
    k_top = min(topk, k_BxNxHxD.shape[1])
    _, top_BxHxCxK = jax.lax.top_k(jax.lax.stop_gradient(logits_BxHxCxN), k_top)
    # The top-k as a dense C x N mask: k compares or-ed, no scatter. Not one C x N x k compare: at N = 4,096, C = 100,
    # k = 32 that is 26M elements per head, over what the no-quadratic check (tests/attention_checks.py) accepts.
    n = k_BxNxHxD.shape[1]
    positions_N = jnp.arange(n)
    is_top_BxHxCxN = reduce(
        jnp.logical_or, (top_BxHxCxK[..., j, None] == positions_N for j in range(top_BxHxCxK.shape[-1]))
    )
    mass_BxHxC = jnp.where(is_top_BxHxCxN, a_BxHxCxN, 0.0).sum(-1)  # m^_j, eq. 9
    rng_bottom = rng_top = None
    if dropout_rng is not None:
        rng_bottom, rng_top = jax.random.split(dropout_rng)

    # V^b (eq. 17): the centroid attention on the keys outside the cluster's top-k, one GEMM.
    a_BxHxCxN = _dropout(a_BxHxCxN, dropout_rate, rng_bottom)
    a_bottom_BxHxCxN = jnp.where(is_top_BxHxCxN, 0.0, a_BxHxCxN)
    vb_BxHxCxD = jnp.einsum("bhcn,bnhd->bhcd", a_bottom_BxHxCxN.astype(v_BxNxHxD.dtype), v_BxNxHxD)

    def top_rows(x_BxNxHxD: jax.Array) -> jax.Array:  # the top keys/values: B x H x C x K x D
        per_head = jax.vmap(jax.vmap(lambda x_NxD, i_CxK: x_NxD[i_CxK]))
        return per_head(x_BxNxHxD.transpose(0, 2, 1, 3), top_BxHxCxK)

    # V^t (eq. 16): each query's exact softmax over its cluster's top-k keys, scaled by m^_j.
    real_BxHxCxK = jax.vmap(lambda m_N, i_HxCxK: m_N[i_HxCxK])(mask_BxN, top_BxHxCxK)
    keep = None
    if rng_top is not None and dropout_rate > 0.0:
        b, _, h, _ = q_BxNxHxD.shape
        kept = jax.random.bernoulli(rng_top, 1.0 - dropout_rate, (b, h, n, k_top))
        keep = jnp.where(kept, 1.0 / (1.0 - dropout_rate), 0.0)
    vt_BxHxNxD = _top_attention(
        q_BxNxHxD.transpose(0, 2, 1, 3),
        top_rows(k_BxNxHxD),
        top_rows(v_BxNxHxD),
        real_BxHxCxK,
        mass_BxHxC,
        clusters_BxHxN,
        onehot,
        keep,
    )
    return (vt_BxHxNxD + take_clusters(vb_BxHxCxD, clusters_BxHxN, onehot)).transpose(0, 2, 1, 3)
