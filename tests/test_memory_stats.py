"""lra.memory_stats on hand-built memories and attention weights with known answers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lra.memory_stats as ms

normalized_entropy = jax.jit(ms.normalized_entropy)  # one program per shape, not one per primitive


def _three_vectors_16_cells(noise: float = 1e-4) -> np.ndarray:
    rng = np.random.default_rng(0)
    bases = rng.normal(size=(3, 32))
    which = np.array([0] * 6 + [1] * 5 + [2] * 5)
    rng.shuffle(which)
    return bases[which] * rng.uniform(0.5, 2.0, size=(16, 1)) + noise * rng.normal(size=(16, 32))


def test_distinct_vectors_counts_repeated_vectors_under_noise_and_scale():
    assert ms.distinct_vectors(_three_vectors_16_cells()) == 3


def test_distinct_vectors_all_different_and_threshold():
    rng = np.random.default_rng(1)
    assert ms.distinct_vectors(rng.normal(size=(16, 32))) == 16
    # two cells at cosine 0.98: distinct at 0.99, one group at 0.95
    a = np.array([1.0, 0.0])
    b = np.array([0.98, np.sqrt(1 - 0.98**2)])
    assert ms.distinct_vectors(np.stack([a, b])) == 2
    assert ms.distinct_vectors(np.stack([a, b]), threshold=0.95) == 1


def test_distinct_vectors_groups_by_single_linkage():
    # a chain: neighbours at cosine ~0.995, the ends at ~0.98: one group
    angles = np.radians([0.0, 5.7, 11.4])
    chain = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    cos_ends = chain[0] @ chain[2]
    assert cos_ends < 0.99 and chain[0] @ chain[1] >= 0.99
    assert ms.distinct_vectors(chain) == 1


def test_effective_rank_orthogonal_equal_norm_is_cells_and_rank_one_is_one():
    q, _ = np.linalg.qr(np.random.default_rng(2).normal(size=(24, 8)))
    orthogonal = 3.0 * q.T  # 8 orthonormal cells of norm 3 in 24 features
    assert ms.effective_rank(orthogonal) == pytest.approx(8.0, rel=1e-9)
    rank_one = np.outer(np.linspace(0.5, 2.0, 16), np.random.default_rng(3).normal(size=32))
    assert ms.effective_rank(rank_one) == pytest.approx(1.0, abs=1e-6)
    # two orthogonal directions with singular values 3 and 1: exp(H(3/4, 1/4))
    two = np.diag([3.0, 1.0])
    p = np.array([0.75, 0.25])
    assert ms.effective_rank(two) == pytest.approx(np.exp(-np.sum(p * np.log(p))))
    assert ms.effective_rank(np.zeros((4, 5))) == 0.0


def test_mean_pairwise_cosine_known_values():
    v = np.random.default_rng(4).normal(size=32)
    assert ms.mean_pairwise_cosine(np.tile(v, (16, 1))) == pytest.approx(1.0)
    assert ms.mean_pairwise_cosine(np.eye(5)) == pytest.approx(0.0)
    assert ms.mean_pairwise_cosine(np.stack([v, -v])) == pytest.approx(-1.0)
    # cells e1, e1, e2: pairs (1, 0, 0) -> 1/3
    assert ms.mean_pairwise_cosine(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])) == pytest.approx(1 / 3)
    assert ms.mean_pairwise_cosine(v[None]) is None


def test_summaries_average_over_the_batch():
    batch = np.stack([np.tile(np.eye(4)[0], (4, 1)), np.eye(4)])  # collapsed, then orthonormal
    s = ms.batch_summary(batch)
    assert s["distinct_vectors"] == pytest.approx((1 + 4) / 2)
    assert s["effective_rank"] == pytest.approx((1 + 4) / 2)
    assert s["mean_pairwise_cosine"] == pytest.approx((1 + 0) / 2)
    assert ms.batch_summary(np.ones((2, 1, 3)))["mean_pairwise_cosine"] is None


def _attention(rows_real: list[int], keys: int, kind: str, heads: int = 2, cells: int = 3):
    """B x H x M x J weights over each example's first ``rows_real[b]`` keys (the rest padded)."""
    w = np.zeros((len(rows_real), heads, cells, keys), np.float32)
    mask = np.zeros((len(rows_real), keys), bool)
    for b, real in enumerate(rows_real):
        mask[b, :real] = True
        if kind == "uniform":
            w[b, :, :, :real] = 1.0 / real
        else:  # one-hot on a real key (different per cell)
            for m in range(cells):
                w[b, :, m, m % real] = 1.0
    return jnp.asarray(w), jnp.asarray(mask)


def test_normalized_entropy_uniform_over_real_keys_is_one():
    w, mask = _attention([10, 6, 3], keys=10, kind="uniform")  # padded keys masked out
    assert float(normalized_entropy(w, mask)) == pytest.approx(1.0, abs=1e-6)


def test_normalized_entropy_one_hot_is_zero():
    w, mask = _attention([10, 6, 3], keys=10, kind="one_hot")
    assert float(normalized_entropy(w, mask)) == pytest.approx(0.0, abs=1e-7)


def test_normalized_entropy_mixed_and_single_key_rows_skipped():
    uniform, mask = _attention([8, 8], keys=8, kind="uniform")
    one_hot, _ = _attention([8, 8], keys=8, kind="one_hot")
    mixed = jnp.asarray(np.concatenate([np.asarray(uniform)[:1], np.asarray(one_hot)[1:]]))
    assert float(normalized_entropy(mixed, mask)) == pytest.approx(0.5, abs=1e-6)
    # the second example has a single real key: its rows (entropy 0 by force) are left out
    w, mask = _attention([5, 1], keys=6, kind="uniform")
    assert float(normalized_entropy(w, mask)) == pytest.approx(1.0, abs=1e-6)
    # half-uniform over 2 of 4 real keys: log 2 / log 4
    w = np.zeros((1, 1, 1, 4), np.float32)
    w[..., :2] = 0.5
    assert float(normalized_entropy(jnp.asarray(w), jnp.asarray(np.ones((1, 4), bool)))) == pytest.approx(0.5, abs=1e-6)


def test_probe_inputs_takes_the_first_rows_trimmed_to_the_longest():
    inputs = np.zeros((10, 20), np.int32)
    lengths = np.array([3, 7, 5, 20, 20, 20, 20, 20, 20, 20])
    for i, n in enumerate(lengths):
        inputs[i, :n] = 1
    split = type("Split", (), {"inputs": inputs, "max_lengths": lengths, "__len__": lambda self: len(inputs)})()
    got = ms.probe_inputs(split, 3)
    assert got.shape == (3, 7) and np.array_equal(got, inputs[:3, :7])
    assert ms.probe_inputs(split, 64).shape == (10, 20)
