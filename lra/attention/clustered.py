"""Clustered and improved clustered attention (Vyas, Katharopoulos & Fleuret, 2020).

Clustered attention (Sec. 3.2) groups the *queries* into C clusters, attends once per cluster
centroid (a C x N attention matrix A^c instead of N x N) and gives every query the output of its
centroid (eqs. 3-6). Improved clustered attention (Sec. 3.3, App. A.2) additionally takes, per
cluster, the ``topk`` keys with the highest centroid attention; each query computes exact softmax
attention over those keys, rescaled by the centroid's mass m^_j on them (eqs. 9-10), while the
centroid attention covers the remaining keys (eqs. 15-17). Prop. 2: its rows are never further
(in L1) from the full attention rows than the clustered ones.

Clustering (Sec. 3.2.2): queries are hashed with ``bits`` random hyperplanes and clustered by
K-means in Hamming space (``iterations`` Lloyd steps). Nothing is N x N, forward or backward:
the largest arrays are N x C (query-centroid Hamming similarities), C x N (centroid
attention), N x bits (hashes) and N x topk x head_dim (the gathered top keys/values of each
query); per-cluster sums (centroids, majority votes) are segment sums, broadcasts are gathers.

Choices where the paper is silent (they follow the authors' released code unless noted):
  * Hash: bit r of query q is ``w_r . q > b_r`` with w_r ~ N(0, I) and a threshold b_r ~ N(0, 1)
    (``hash_bias=True``, the released code's default, which makes Hamming distance track L2
    rather than angular distance); ``hash_bias=False`` gives the plain sign of the projection.
    The planes are not parameters: they are drawn from the ``attention`` rng stream (a fixed
    key when none is given), shared by the heads and the batch, like the released code.
  * K-means initialisation (``kmeans_init``): ``"farthest"`` (default) is greedy farthest-point
    seeding in Hamming space, starting at the first real query: deterministic, and when the
    queries have at most C distinct hashes every one gets its own centroid, so C >= (distinct
    queries) reproduces softmax attention exactly. ``"first"`` seeds with the first C real
    queries: the released code up to fast-transformers 0.3.0 (the first C hashes of each
    sequence). ``"random"`` seeds with C distinct real queries drawn at random: the released
    code from fast-transformers 0.4.0 on, which draws C distinct positions of the padded length
    (``np.random.choice(L, C, replace=False)``, the same positions for the whole batch and every
    head). We draw among each sequence's real queries only, so padding is never a seed (one
    random priority per position, shared by the batch and the heads, independent of the padded
    length), from the ``attention`` rng stream (``fold_in(rng, 1)``: the hash planes stay those
    of the other inits), so the seeds are deterministic given the rng. With fewer real queries
    than C, ``"first"`` and ``"random"`` seed every real query and repeat one for the remaining
    centroids; the duplicates stay empty (ties go to the lowest index), as with ``"farthest"``.
  * Lloyd step: assign each query to its nearest centroid (ties: lowest index), then set every
    centroid to the bitwise majority of its members' hashes (ties: bit 0). An empty cluster keeps
    its previous centroid (the released code redraws it at random; keeping it needs no rng).
    One initial assignment, then ``iterations`` x (update, assign).
  * Padded queries join no cluster (they never move centroids or counts); padded keys are masked
    with a large negative logit, and in the improved variant they are only picked as top keys
    when a row has fewer than ``topk`` real keys, where they get weight exactly 0.
  * ``topk`` is clipped to the number of keys N (then improved clustered equals softmax).
  * The cluster assignment is not differentiated (stop_gradient); centroids (means of the
    real-valued queries), both attentions, m^_j and the values are.
  * Attention dropout (when enabled) drops entries of A^c and of the per-query top-k weights.
  * Default ``num_clusters=100``: the paper's setting for long sequences (ASR, benchmark App. C.1).

``attention_matrix`` builds the dense N x N rows A^c / A^t for a given clustering: it is for
tests and plots at small N only; the modules never call it.
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

INITS = ("farthest", "first", "random")


# ----------------------------------------------------------------------------------- clustering


def lsh_planes(
    rng: jax.Array, bits: int, dim: int, hash_bias: bool = True
) -> tuple[jax.Array, jax.Array]:
    """Random hyperplanes (bits x dim) and thresholds (bits,) for hashing queries."""
    planes = jax.random.normal(rng, (bits, dim + 1), jnp.float32)
    thresholds = planes[:, -1] if hash_bias else jnp.zeros((bits,), jnp.float32)
    return planes[:, :-1], thresholds


def hash_queries(q_BxHxNxD: jax.Array, planes_RxD: jax.Array, thresholds_R: jax.Array) -> jax.Array:
    """Hashes as +-1 vectors (B x H x N x R): +1 where the query lies above the plane."""
    proj = jnp.einsum("bhnd,rd->bhnr", q_BxHxNxD.astype(jnp.float32), planes_RxD)
    return jnp.where(proj > thresholds_R, 1.0, -1.0)


def _first_real_indices(mask_BxN: jax.Array, count: int) -> jax.Array:
    """Positions (B x count) of the first ``count`` real tokens; repeats the last when short."""
    order = jnp.argsort(jnp.where(mask_BxN, 0, 1), axis=-1, stable=True)  # real first, in order
    return _leading_real(order, mask_BxN, count)


def _random_real_indices(mask_BxN: jax.Array, count: int, rng: jax.Array) -> jax.Array:
    """Positions (B x count) of ``count`` distinct real tokens drawn uniformly at random per
    sequence (a random permutation of the real ones); every real token, then repeats, when short.

    Position n's random priority comes from ``fold_in(rng, n)``, so it does not depend on the
    padded length (extra padding never changes the seeds); like the released code, one draw is
    shared by the batch, so a sequence's seeds do not depend on its batch slot.
    """
    u_N = jax.vmap(lambda n: jax.random.uniform(jax.random.fold_in(rng, n)))(
        jnp.arange(mask_BxN.shape[-1]))
    # The real positions in random order (priorities < 1), then the padding.
    order = jnp.argsort(jnp.where(mask_BxN, u_N, 2.0), axis=-1)
    return _leading_real(order, mask_BxN, count)


def _leading_real(order_BxN: jax.Array, mask_BxN: jax.Array, count: int) -> jax.Array:
    """The first ``count`` entries of ``order`` (a permutation listing the real positions first),
    clipped to the real ones: the last real entry repeats when a sequence has fewer than count."""
    lengths = jnp.maximum(mask_BxN.sum(-1), 1)
    ranks = jnp.minimum(jnp.arange(count)[None, :], lengths[:, None] - 1)
    return jnp.take_along_axis(order_BxN, ranks, axis=-1)


def _gather_rows(x_BxHxNxR: jax.Array, idx_BxHxC: jax.Array) -> jax.Array:
    return jnp.take_along_axis(x_BxHxNxR, idx_BxHxC[..., None], axis=2)


def cluster_sums(
    x_BxHxNxF: jax.Array, clusters_BxHxN: jax.Array, mask_BxN: jax.Array, num_clusters: int
) -> jax.Array:
    """Float32 sums of the real rows of each cluster (B x H x C x F): one segment sum, O(N F).

    Padded rows go to an extra segment that is dropped, so they never count.
    """
    b, h, _, f = x_BxHxNxF.shape
    segments = clusters_BxHxN + num_clusters * jnp.arange(b * h).reshape(b, h, 1)
    segments = jnp.where(mask_BxN[:, None, :], segments, b * h * num_clusters)
    sums = jax.ops.segment_sum(x_BxHxNxF.reshape(-1, f).astype(jnp.float32), segments.reshape(-1),
                               num_segments=b * h * num_clusters + 1)
    return sums[:-1].reshape(b, h, num_clusters, f)


def _farthest_point_init(
    h_BxHxNxR: jax.Array, real_Bx1xN: jax.Array, num_clusters: int
) -> jax.Array:
    """Greedy farthest-point seeding in Hamming space: C sequential picks, each O(N x R)."""
    b, nh, _, r = h_BxHxNxR.shape
    first_BxH = jnp.broadcast_to(jnp.argmax(real_Bx1xN, axis=-1), (b, nh))
    c0_BxHxR = _gather_rows(h_BxHxNxR, first_BxH[..., None])[:, :, 0]
    centroids = jnp.zeros((b, nh, num_clusters, r), h_BxHxNxR.dtype).at[:, :, 0].set(c0_BxHxR)
    # Hamming distance of +-1 vectors: (R - h . c) / 2.
    dist0 = jnp.full(h_BxHxNxR.shape[:3], jnp.inf, jnp.float32)

    def pick(c: int, carry: tuple[jax.Array, jax.Array, jax.Array]):
        centroids, dist, last_BxHxR = carry
        d = (r - jnp.einsum("bhnr,bhr->bhn", h_BxHxNxR, last_BxHxR,
                            preferred_element_type=jnp.float32)) / 2
        dist = jnp.minimum(dist, d)
        far_BxH = jnp.argmax(jnp.where(real_Bx1xN, dist, -1.0), axis=-1)
        new_BxHxR = _gather_rows(h_BxHxNxR, far_BxH[..., None])[:, :, 0]
        return centroids.at[:, :, c].set(new_BxHxR), dist, new_BxHxR

    centroids, _, _ = jax.lax.fori_loop(1, num_clusters, pick, (centroids, dist0, c0_BxHxR))
    return centroids


def hamming_kmeans(
    h_BxHxNxR: jax.Array,
    mask_BxN: jax.Array,
    num_clusters: int,
    iterations: int = 10,
    init: str = "farthest",
    rng: jax.Array | None = None,
) -> jax.Array:
    """K-means on +-1 hashes with Hamming distance; returns the cluster of each query (B x H x N).

    Padded queries get an assignment too (their outputs are discarded) but never count as
    members, so they cannot move a centroid. ``rng`` draws the seeds of ``init="random"`` (the
    same positions for every head of a sequence) and is unused otherwise.
    """
    if init not in INITS:
        raise ValueError(f"unknown K-means init {init!r}; valid: {', '.join(INITS)}")
    if init == "random" and rng is None:
        raise ValueError("hamming_kmeans(init='random') draws its seeds from rng: pass a jax key")
    real_Bx1xN = mask_BxN[:, None, :]
    if init == "farthest":
        centroids = _farthest_point_init(h_BxHxNxR, real_Bx1xN, num_clusters)
    else:
        if init == "first":
            idx_BxC = _first_real_indices(mask_BxN, num_clusters)
        else:
            idx_BxC = _random_real_indices(mask_BxN, num_clusters, rng)
        idx_BxHxC = jnp.broadcast_to(idx_BxC[:, None, :], h_BxHxNxR.shape[:2] + (num_clusters,))
        centroids = _gather_rows(h_BxHxNxR, idx_BxHxC)

    def assign(centroids_BxHxCxR: jax.Array) -> jax.Array:
        # Nearest in Hamming distance = largest dot product of +-1 vectors (exact in any float).
        sim = jnp.einsum("bhnr,bhcr->bhnc", h_BxHxNxR, centroids_BxHxCxR,
                         preferred_element_type=jnp.float32)
        return jnp.argmax(sim, axis=-1)

    def lloyd(_: int, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        centroids, clusters = carry
        # Bitwise majority of the members' +-1 bits; the appended ones column counts the members.
        ones = jnp.ones(h_BxHxNxR.shape[:3] + (1,), h_BxHxNxR.dtype)
        votes = cluster_sums(jnp.concatenate([h_BxHxNxR, ones], -1), clusters, mask_BxN,
                             num_clusters)
        majority = jnp.where(votes[..., :-1] > 0, 1.0, -1.0).astype(h_BxHxNxR.dtype)
        centroids = jnp.where(votes[..., -1:] > 0, majority, centroids)
        return centroids, assign(centroids)

    _, clusters = jax.lax.fori_loop(0, iterations, lloyd, (centroids, assign(centroids)))
    return clusters.astype(jnp.int32)


# Jitted so that eager calls (tests, notebooks) reuse the compiled loops instead of re-tracing.
@partial(jax.jit,
         static_argnames=("num_clusters", "bits", "iterations", "hash_bias", "init", "dtype"))
def cluster_queries(
    q_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    rng: jax.Array,
    num_clusters: int,
    bits: int = 63,
    iterations: int = 10,
    hash_bias: bool = True,
    init: str = "farthest",
    dtype: Dtype = jnp.float32,
) -> jax.Array:
    """LSH + Hamming K-means of the queries (not differentiated): cluster ids, B x H x N.

    ``rng`` draws the hash planes; ``fold_in(rng, 1)`` draws the ``init="random"`` seeds, so the
    planes for a given rng are the same whatever the init.
    """
    q_BxHxNxD = jax.lax.stop_gradient(q_BxNxHxD).transpose(0, 2, 1, 3)
    planes, thresholds = lsh_planes(rng, bits, q_BxHxNxD.shape[-1], hash_bias)
    hashes = hash_queries(q_BxHxNxD, planes, thresholds).astype(dtype)  # +-1: exact in bf16 too
    clusters = hamming_kmeans(hashes, mask_BxN, num_clusters, iterations, init,
                              jax.random.fold_in(rng, 1))
    return jax.lax.stop_gradient(clusters)


# ------------------------------------------------------------------------------------ attention


def _centroid_attention(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    clusters_BxHxN: jax.Array,
    num_clusters: int,
) -> tuple[jax.Array, jax.Array]:
    """Centroids as the mean of their real member queries (eq. 3) and their logits (C x N).

    Returns the float32 logits (B x H x C x N, key mask applied) and the softmax A^c (eq. 4).
    """
    q_BxHxNxD = q_BxNxHxD.transpose(0, 2, 1, 3)
    ones = jnp.ones(q_BxHxNxD.shape[:3] + (1,), q_BxNxHxD.dtype)
    sums = cluster_sums(jnp.concatenate([q_BxHxNxD, ones], -1), clusters_BxHxN, mask_BxN,
                        num_clusters)
    centroids_BxHxCxD = (sums[..., :-1] / jnp.maximum(sums[..., -1:], 1.0)).astype(q_BxNxHxD.dtype)
    scale = q_BxNxHxD.shape[-1] ** -0.5
    logits_BxHxCxN = jnp.einsum("bhcd,bnhd->bhcn", centroids_BxHxCxD, k_BxNxHxD,
                                preferred_element_type=jnp.float32) * scale
    logits_BxHxCxN = logits_BxHxCxN + key_mask_bias(mask_BxN)
    return logits_BxHxCxN, jax.nn.softmax(logits_BxHxCxN, axis=-1)


def _dropout(w: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    if rng is None or rate <= 0.0:
        return w
    keep = jax.random.bernoulli(rng, 1.0 - rate, w.shape)
    return jnp.where(keep, w / (1.0 - rate), 0.0)


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


def _gather_keys(x_BxNxHxD: jax.Array, idx_BxHxNxK: jax.Array) -> jax.Array:
    """x[b, idx[b, h, n, k], h] for every (b, h, n, k): B x H x N x K x D."""
    per_row = jax.vmap(jax.vmap(lambda x_NxD, i_NxK: x_NxD[i_NxK]))  # over batch, then heads
    return per_row(x_BxNxHxD.transpose(0, 2, 1, 3), idx_BxHxNxK)


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
    """Improved clustered attention (eqs. 9-10, 15-17) for a given clustering: B x N x H x D."""
    logits_BxHxCxN, a_BxHxCxN = _centroid_attention(
        q_BxNxHxD, k_BxNxHxD, mask_BxN, clusters_BxHxN, num_clusters)
    k_top = min(topk, k_BxNxHxD.shape[1])
    _, top_BxHxCxK = jax.lax.top_k(jax.lax.stop_gradient(logits_BxHxCxN), k_top)
    mass_BxHxC = jnp.take_along_axis(a_BxHxCxN, top_BxHxCxK, axis=-1).sum(-1)  # m^_j, eq. 9
    not_top = jnp.put_along_axis(jnp.ones(a_BxHxCxN.shape, jnp.float32), top_BxHxCxK, 0.0,
                                 axis=-1, inplace=False)
    rng_bottom = rng_top = None
    if dropout_rng is not None:
        rng_bottom, rng_top = jax.random.split(dropout_rng)

    # V^b (eq. 17): the centroid attention on the keys outside the cluster's top-k, per cluster.
    bottom_BxHxCxN = _dropout(a_BxHxCxN * not_top, dropout_rate, rng_bottom)
    vb_BxHxCxD = jnp.einsum("bhcn,bnhd->bhcd", bottom_BxHxCxN.astype(v_BxNxHxD.dtype), v_BxNxHxD)

    # V^t (eq. 16): each query's exact softmax over its cluster's top-k keys, scaled by m^_j.
    top_BxHxNxK = _per_query(top_BxHxCxK, clusters_BxHxN)
    q_BxHxNxD = q_BxNxHxD.transpose(0, 2, 1, 3)
    logits_BxHxNxK = jnp.einsum("bhnd,bhnkd->bhnk", q_BxHxNxD, _gather_keys(k_BxNxHxD, top_BxHxNxK),
                                preferred_element_type=jnp.float32) * q_BxNxHxD.shape[-1] ** -0.5
    real_BxHxNxK = jax.vmap(lambda m_N, i_HxNxK: m_N[i_HxNxK])(mask_BxN, top_BxHxNxK)
    logits_BxHxNxK = jnp.where(real_BxHxNxK, logits_BxHxNxK, MASK_LOGIT)
    mass_BxHxNx1 = _per_query(mass_BxHxC, clusters_BxHxN)[..., None]
    w_BxHxNxK = jax.nn.softmax(logits_BxHxNxK, axis=-1) * mass_BxHxNx1
    w_BxHxNxK = _dropout(w_BxHxNxK, dropout_rate, rng_top)
    vt_BxHxNxD = jnp.einsum("bhnk,bhnkd->bhnd", w_BxHxNxK.astype(v_BxNxHxD.dtype),
                            _gather_keys(v_BxNxHxD, top_BxHxNxK))
    return (vt_BxHxNxD + _per_query(vb_BxHxCxD, clusters_BxHxN)).transpose(0, 2, 1, 3)


def attention_matrix(
    q_BxNxHxD: jax.Array,
    k_BxNxHxD: jax.Array,
    mask_BxN: jax.Array,
    clusters_BxHxN: jax.Array,
    num_clusters: int,
    topk: int | None = None,
) -> jax.Array:
    """Dense attention rows (B x H x N x N) of clustered (``topk=None``, A^c broadcast to each
    query) or improved clustered attention (A^t of eq. 10). Small N only: tests and plots."""
    logits_BxHxCxN, a_BxHxCxN = _centroid_attention(
        q_BxNxHxD, k_BxNxHxD, mask_BxN, clusters_BxHxN, num_clusters)
    rows_BxHxNxN = _per_query(a_BxHxCxN, clusters_BxHxN)
    if topk is None:
        return rows_BxHxNxN
    _, top_BxHxCxK = jax.lax.top_k(logits_BxHxCxN, min(topk, k_BxNxHxD.shape[1]))
    is_top_BxHxCxN = jnp.put_along_axis(jnp.zeros(a_BxHxCxN.shape, bool), top_BxHxCxK, True,
                                        axis=-1, inplace=False)
    is_top_BxHxNxN = _per_query(is_top_BxHxCxN, clusters_BxHxN)
    mass_BxHxNx1 = jnp.sum(jnp.where(is_top_BxHxNxN, rows_BxHxNxN, 0.0), -1, keepdims=True)
    full_logits = jnp.einsum("bnhd,bmhd->bhnm", q_BxNxHxD, k_BxNxHxD,
                             preferred_element_type=jnp.float32) * q_BxNxHxD.shape[-1] ** -0.5
    full_logits = jnp.where(is_top_BxHxNxN & mask_BxN[:, None, None, :], full_logits, MASK_LOGIT)
    top_rows = jax.nn.softmax(full_logits, axis=-1) * mass_BxHxNx1
    return jnp.where(is_top_BxHxNxN, top_rows, rows_BxHxNxN)


# -------------------------------------------------------------------------------------- modules


class ClusteredAttention(Attention):
    """Clustered attention: one softmax row per query cluster, broadcast to its members.

    Attributes (beyond :class:`Attention`'s):
      num_clusters: C, the number of query clusters per head and sequence.
      bits: hash length R (the paper uses 63).
      iterations: Lloyd iterations of the Hamming K-means (the paper uses 10).
      hash_bias: random thresholds b ~ N(0, 1) on the hyperplanes (else sign of projection).
      kmeans_init: K-means seeding: ``"farthest"`` (ours, deterministic), ``"first"``
        (fast-transformers <= 0.3.0) or ``"random"`` (fast-transformers 0.4.0; seeds drawn from
        the ``attention`` rng stream); see the module docstring.
    """

    num_clusters: int = 100
    bits: int = 63
    iterations: int = 10
    hash_bias: bool = True
    kmeans_init: str = "farthest"

    def _check(self) -> None:
        if self.num_clusters < 1 or self.bits < 1 or self.iterations < 0:
            raise ValueError(
                f"{type(self).__name__}: num_clusters={self.num_clusters} and bits={self.bits} "
                f"must be >= 1 and iterations={self.iterations} >= 0 "
                "(config.model.attention_kwargs)")
        if self.kmeans_init not in INITS:
            raise ValueError(
                f"{type(self).__name__}: kmeans_init={self.kmeans_init!r} is not one of {INITS}")

    def _attend(self, q, k, v, mask, clusters, dropout_rng) -> jax.Array:
        return clustered_attention(q, k, v, mask, clusters, self.num_clusters,
                                   dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)

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
        clusters_BxHxN = cluster_queries(
            q, mask_BxN, rng, self.num_clusters, self.bits, self.iterations, self.hash_bias,
            self.kmeans_init, self.dtype)
        dropout_rng = self.dropout_rng(deterministic)
        y_BxNxHxDh = self._attend(q, k, v, mask_BxN, clusters_BxHxN, dropout_rng)
        y = project_out(self, zero_padding(y_BxNxHxDh, mask_BxN), x_BxNxD.shape[-1])
        return y, None


class ImprovedClusteredAttention(ClusteredAttention):
    """Improved clustered attention: exact attention on each cluster's ``topk`` keys.

    Attributes: those of :class:`ClusteredAttention`, plus
      topk: keys per cluster recomputed exactly for every member query (the paper uses 32).
    """

    topk: int = 32

    def _check(self) -> None:
        super()._check()
        if self.topk < 1:
            raise ValueError(f"{type(self).__name__}: topk={self.topk} must be >= 1")

    def _attend(self, q, k, v, mask, clusters, dropout_rng) -> jax.Array:
        topk = min(self.topk, k.shape[1])  # clip here too: one compilation for every topk >= N
        return improved_clustered_attention(q, k, v, mask, clusters, self.num_clusters, topk,
                                            dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)
