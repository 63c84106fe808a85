"""What both clustered-attention implementations share: query hashing, seeding, softmax, dropout.

A module of its own so that neither implementation imports the other at import time (tests/test_layering.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

INITS = ("farthest", "first", "random")
WORD_BITS = 32  # hash bits per packed word (uint32: no need for jax's x64 mode)


def lsh_planes(rng: jax.Array, bits: int, dim: int, hash_bias: bool = True) -> tuple[jax.Array, jax.Array]:
    """Random hyperplanes (bits x dim) and thresholds (bits,) for hashing queries."""
    planes = jax.random.normal(rng, (bits, dim + 1), jnp.float32)
    thresholds = planes[:, -1] if hash_bias else jnp.zeros((bits,), jnp.float32)
    return planes[:, :-1], thresholds


def hash_queries(q_BxHxNxD: jax.Array, planes_RxD: jax.Array, thresholds_R: jax.Array) -> jax.Array:
    """Hashes as +-1 vectors (B x H x N x R), the float form of :func:`hash_bits` for tests and plots."""
    return jnp.where(hash_bits(q_BxHxNxD, planes_RxD, thresholds_R), 1.0, -1.0)


def hash_bits(q_BxHxNxD: jax.Array, planes_RxD: jax.Array, thresholds_R: jax.Array) -> jax.Array:
    """Hash bits (bool, B x H x N x R): True where the query lies above the plane."""
    proj = jnp.einsum("bhnd,rd->bhnr", q_BxHxNxD.astype(jnp.float32), planes_RxD)
    return proj > thresholds_R


def pack_bits(bits_Bx___xR: jax.Array) -> jax.Array:
    """Bits packed into uint32 words (... x W, W = ceil(R / 32)), bit r at word r // 32, position r % 32."""
    r = bits_Bx___xR.shape[-1]
    w = -(-r // WORD_BITS)
    padded = jnp.pad(bits_Bx___xR, [(0, 0)] * (bits_Bx___xR.ndim - 1) + [(0, w * WORD_BITS - r)])
    words = padded.astype(jnp.uint32).reshape(bits_Bx___xR.shape[:-1] + (w, WORD_BITS))
    # Distinct powers of two: their sum is the bitwise or.
    return jnp.sum(words << jnp.arange(WORD_BITS, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def unpack_bits(words_Bx___xW: jax.Array, bits: int) -> jax.Array:
    """Inverse of :func:`pack_bits`: bool ... x R."""
    shifts = jnp.arange(WORD_BITS, dtype=jnp.uint32)
    b = (words_Bx___xW[..., None] >> shifts) & 1
    return b.reshape(words_Bx___xW.shape[:-1] + (-1,))[..., :bits].astype(bool)


def hamming_distance(a_Bx___xW: jax.Array, b_Bx___xW: jax.Array) -> jax.Array:
    """Number of differing bits of packed hashes (broadcasting; int32 ...): XOR + popcount."""
    return jnp.sum(jax.lax.population_count(a_Bx___xW ^ b_Bx___xW), axis=-1, dtype=jnp.int32)


def _word_major_distance(a_WxBx___: jax.Array, b_WxBx___: jax.Array) -> jax.Array:
    """Hamming distance of word-major packed hashes (int32, broadcast over the trailing axes)."""
    d = jax.lax.population_count(a_WxBx___[0] ^ b_WxBx___[0]).astype(jnp.int32)
    for w in range(1, a_WxBx___.shape[0]):
        d = d + jax.lax.population_count(a_WxBx___[w] ^ b_WxBx___[w]).astype(jnp.int32)
    return d


def _first_real_indices(mask_BxN: jax.Array, count: int) -> jax.Array:
    """Positions (B x count) of the first ``count`` real tokens; repeats the last when short."""
    order = jnp.argsort(jnp.where(mask_BxN, 0, 1), axis=-1, stable=True)  # real first, in order
    return _leading_real(order, mask_BxN, count)


def _random_real_indices(mask_BxN: jax.Array, count: int, rng: jax.Array) -> jax.Array:
    """Positions (B x count) of ``count`` distinct real tokens at random, repeats when short. Position n's priority is
    ``fold_in(rng, n)``'s: independent of the padded length and of the batch slot (one draw, as the released code)."""
    u_N = jax.vmap(lambda n: jax.random.uniform(jax.random.fold_in(rng, n)))(jnp.arange(mask_BxN.shape[-1]))
    # The real positions in random order (priorities < 1), then the padding.
    order = jnp.argsort(jnp.where(mask_BxN, u_N, 2.0), axis=-1)
    return _leading_real(order, mask_BxN, count)


def _leading_real(order_BxN: jax.Array, mask_BxN: jax.Array, count: int) -> jax.Array:
    """The first ``count`` entries of ``order`` (real positions first), the last real one repeated when short."""
    lengths = jnp.maximum(mask_BxN.sum(-1), 1)
    ranks = jnp.minimum(jnp.arange(count)[None, :], lengths[:, None] - 1)
    return jnp.take_along_axis(order_BxN, ranks, axis=-1)


def _farthest_point_init(words_WxBxHxN: jax.Array, real_Bx1xN: jax.Array, num_clusters: int) -> jax.Array:
    """Greedy farthest-point seeding in Hamming space: packed centroids, W x B x H x C. C - 1 sequential picks,
    cheap enough to stay a loop (~10 ms for 99 at N = 16K, 4 heads: under a tenth of the layer)."""
    w, b, nh, _ = words_WxBxHxN.shape
    first_BxH = jnp.broadcast_to(jnp.argmax(real_Bx1xN, axis=-1), (b, nh))

    def word_at(idx_BxH: jax.Array) -> jax.Array:  # -> W x B x H x 1
        return jnp.take_along_axis(words_WxBxHxN, idx_BxH[None, :, :, None], axis=-1)

    c0_WxBxHx1 = word_at(first_BxH)
    centroids = jnp.zeros((w, b, nh, num_clusters), jnp.uint32).at[..., :1].set(c0_WxBxHx1)
    dist0 = jnp.full((b, nh, words_WxBxHxN.shape[-1]), jnp.iinfo(jnp.int32).max, jnp.int32)

    def pick(c: int, carry: tuple[jax.Array, jax.Array, jax.Array]):
        centroids, dist_BxHxN, last_WxBxHx1 = carry
        dist_BxHxN = jnp.minimum(dist_BxHxN, _word_major_distance(words_WxBxHxN, last_WxBxHx1))
        far_BxH = jnp.argmax(jnp.where(real_Bx1xN, dist_BxHxN, -1), axis=-1)
        new_WxBxHx1 = word_at(far_BxH)
        centroids = jax.lax.dynamic_update_slice_in_dim(centroids, new_WxBxHx1, c, axis=-1)
        return centroids, dist_BxHxN, new_WxBxHx1

    centroids, _, _ = jax.lax.fori_loop(1, num_clusters, pick, (centroids, dist0, c0_WxBxHx1))
    return centroids


@jax.custom_vjp
def softmax(x_Bx___xN: jax.Array) -> jax.Array:
    """``jax.nn.softmax`` over the last axis, its backward's ``sum(g * y)`` a batched dot: XLA's CPU backend ran the
    fused product-then-reduce 10-20x slower, the largest cost of the layer's backward."""
    return jax.nn.softmax(x_Bx___xN, axis=-1)


def _softmax_fwd(x_Bx___xN: jax.Array) -> tuple[jax.Array, jax.Array]:
    y = jax.nn.softmax(x_Bx___xN, axis=-1)
    return y, y


def _softmax_bwd(y_Bx___xN: jax.Array, g_Bx___xN: jax.Array) -> tuple[jax.Array]:
    gy_Bx___ = jnp.einsum("...n,...n->...", g_Bx___xN, y_Bx___xN)
    return (y_Bx___xN * (g_Bx___xN - gy_Bx___[..., None]),)


softmax.defvjp(_softmax_fwd, _softmax_bwd)


def _dropout(w: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    if rng is None or rate <= 0.0:
        return w
    keep = jax.random.bernoulli(rng, 1.0 - rate, w.shape)
    return jnp.where(keep, w / (1.0 - rate), 0.0)
