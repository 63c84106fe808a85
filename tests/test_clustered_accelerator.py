"""Clustered attention's accelerator implementation equals the CPU one, and has the structure it claims.

Components (assignment, votes, seeds, K-means) are compared exactly; attention outputs and
gradients, given the same clustering, within float rounding. The structure tests read the compiled
program (CPU backend): no while loop, sort or scatter where the implementation says there is none,
and the same counts at two lengths (nothing grows with N). They check structure, not time.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_checks import assert_no_quadratic, assert_padding_invariant
from lra import attention
from lra.attention import clustered as cl
from lra.attention import clustered_accelerator as ca
from test_clustered import init as softmax_params  # the jitted softmax init both files draw parameters from

NAMES = ("clustered", "improved_clustered")


def random_bits(seed: int, shape: tuple[int, ...]) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).random(shape) < 0.5)


def ragged_mask(n: int, lengths=(None, 57), holes: bool = False) -> jax.Array:
    """Prefix masks (``None``: full), or with ``holes`` some padding inside the sequence too."""
    mask = np.stack([np.arange(n) < (n if length is None else length) for length in lengths])
    if holes:
        mask[0, 3:9] = False
        mask[1, ::7] = False
    return jnp.asarray(mask)


def jit_both(cpu_fn, acc_fn, **static):
    """The CPU and accelerator functions, each one compiled program (exact comparisons: the same transformation)."""
    return jax.jit(cpu_fn, **static), jax.jit(acc_fn, **static)


@pytest.mark.parametrize("bits", [8, 63])  # 8 bits: many ties, which must go to the same index
def test_assignment_equals_the_cpu_loop(bits):
    h, c = (random_bits(bits + i, (2, 3, n, bits)) for i, n in ((0, 200), (1, 37)))

    def packed(nearest_centroids):
        return lambda h, c: nearest_centroids(*(jnp.moveaxis(cl.pack_bits(x), -1, 0) for x in (h, c)))

    cpu, acc = jit_both(packed(cl.nearest_centroids), packed(ca.nearest_centroids))
    np.testing.assert_array_equal(np.asarray(acc(h, c)), np.asarray(cpu(h, c)))


@pytest.mark.parametrize("holes", [False, True])
def test_votes_equal_the_cpu_scatter(holes):
    n, c = 90, 7
    mask = ragged_mask(n, holes=holes)
    bits = random_bits(0, (2, 3, n, 63))
    clusters = jnp.asarray(np.random.default_rng(1).integers(0, c, (2, 3, n)), jnp.int32)
    x = jnp.concatenate([bits, jnp.ones((2, 3, n, 1), bool)], -1)
    got = jax.jit(ca.cluster_votes, static_argnums=3)(x, clusters, mask, c)
    expected = jax.jit(
        lambda x, clusters, mask: cl.cluster_sums(x.astype(jnp.uint16), clusters, mask, c, jnp.uint16).astype(jnp.int32)
    )(x, clusters, mask)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


@pytest.mark.parametrize("holes", [False, True])
def test_first_seeds_equal_the_cpu_sort(holes):
    mask = ragged_mask(40, lengths=(None, 5), holes=holes)  # 5 real < 12 seeds: the last repeats
    cpu, acc = jit_both(cl._first_real_indices, ca.first_real_indices, static_argnums=1)
    for count in (1, 12, 40):
        np.testing.assert_array_equal(np.asarray(acc(mask, count)), np.asarray(cpu(mask, count)))


@pytest.mark.parametrize("init", cl.INITS)
@pytest.mark.parametrize("bits", [8, 63])
def test_kmeans_equals_the_cpu_kmeans(init, bits):
    mask = ragged_mask(90, holes=True)
    h = random_bits(bits, (2, 3, 90, bits))
    args = (h, mask, 7, 3, init, jax.random.key(3))
    # eager: the inits share the compiled Lloyd loops (jitted, each init compiles its own: no faster)
    np.testing.assert_array_equal(
        np.asarray(ca.hamming_kmeans_bits(*args)), np.asarray(cl.hamming_kmeans_bits(*args)), err_msg=init
    )


def qkv(seed: int, n: int = 40):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(2, n, 2, 8)) * 1.5, jnp.float32) for _ in range(3))
    mask = jnp.asarray(np.arange(n)[None, :] < np.array([[29], [n]]))
    return q, k, v, mask


@pytest.mark.parametrize("init", cl.INITS)
def test_cluster_queries_equal(init):
    q, _, _, mask = qkv(0)
    for c in (5, 40):
        np.testing.assert_array_equal(
            np.asarray(ca.cluster_queries(q, mask, jax.random.key(1), c, init=init)),
            np.asarray(cl.cluster_queries(q, mask, jax.random.key(1), c, init=init)),
        )


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("name", NAMES)
def test_attention_outputs_and_gradients_equal_given_the_clustering(name, dropout):
    q, k, v, mask = qkv(2)
    clusters = cl.cluster_queries(q, mask, jax.random.key(2), 5)
    args = (5,) if name == "clustered" else (5, 4)
    cpu, acc = (
        getattr(m, "clustered_attention" if name == "clustered" else "improved_clustered_attention") for m in (cl, ca)
    )
    rng = jax.random.key(9) if dropout else None

    def loss(f):
        def run(q, k, v):
            y = f(q, k, v, mask, clusters, *args, dropout_rate=dropout, dropout_rng=rng)
            return jnp.sum(jnp.where(mask[:, :, None, None], y, 0.0) ** 2), y

        return jax.jit(jax.value_and_grad(run, (0, 1, 2), has_aux=True))  # jit: ~3x cheaper than op by op

    (_, y_cpu), g_cpu = loss(cpu)(q, k, v)
    (_, y_acc), g_acc = loss(acc)(q, k, v)
    real = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(y_acc)[real], np.asarray(y_cpu)[real], rtol=1e-5, atol=1e-5)
    for a, b in zip(g_acc, g_cpu, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5 * np.abs(np.asarray(b)).max())
    assert np.abs(np.asarray(g_cpu[0])).max() > 1e-4  # the queries get a gradient (through the centroids)


def module(name: str, implementation: str, **kwargs):
    if name == "improved_clustered":
        kwargs.setdefault("topk", 4)
    kwargs.setdefault("num_clusters", 4)
    return attention.get(name)(num_heads=2, qkv_dim=16, implementation=implementation, **kwargs)


@pytest.mark.parametrize("init", ["first", "farthest"])
@pytest.mark.parametrize("name", NAMES)
def test_modules_equal_with_the_same_seeding(name, init):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 24, 8)).astype(np.float32)
    mask = np.arange(24)[None, :] < np.array([[17], [24]])
    variables = softmax_params(x, mask)
    rngs = {"attention": jax.random.key(3), "dropout": jax.random.key(4)}

    def run(implementation):
        m = module(name, implementation, kmeans_init=init, dropout_rate=0.2)

        def loss(params):
            y, _ = m.apply(params, x, mask, rngs=rngs, deterministic=False)
            return jnp.sum(y**2), y

        return jax.jit(jax.value_and_grad(loss, has_aux=True))(variables)

    (_, y_cpu), g_cpu = run("cpu")
    (_, y_acc), g_acc = run("accelerator")
    np.testing.assert_allclose(np.asarray(y_acc), np.asarray(y_cpu), rtol=1e-5, atol=1e-5)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_acc), jax.tree.leaves(g_cpu), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6, err_msg=str(path))


@pytest.mark.parametrize("name", NAMES)
def test_auto_is_the_cpu_implementation_with_farthest_seeding_on_cpu(name):
    assert jax.default_backend() == "cpu" and cl.resolve_implementation("auto") == "cpu"
    x = np.random.default_rng(6).normal(size=(2, 20, 8)).astype(np.float32)
    mask = np.arange(20)[None, :] < np.array([[13], [20]])
    variables = softmax_params(x, mask)
    y = {
        (impl, seeding): np.asarray(module(name, impl, kmeans_init=seeding).apply(variables, x, mask)[0])
        for impl, seeding in (("auto", "auto"), ("cpu", "farthest"), ("accelerator", "auto"), ("accelerator", "first"))
    }
    np.testing.assert_array_equal(y[("auto", "auto")], y[("cpu", "farthest")])
    np.testing.assert_array_equal(y[("accelerator", "auto")], y[("accelerator", "first")])  # its auto seeding
    assert np.abs(y[("accelerator", "auto")] - y[("cpu", "farthest")])[mask].max() > 1e-4  # other seeds


@pytest.mark.parametrize("name", NAMES)
def test_accelerator_padding_invariance_and_no_quadratic_memory(name):
    assert_padding_invariant(module(name, "accelerator"))
    assert_no_quadratic(module(name, "accelerator"), n=2048)


def test_invalid_implementation_fails_clearly():
    x = np.zeros((1, 8, 8), np.float32)
    mask = np.ones((1, 8), bool)
    with pytest.raises(ValueError, match="implementation='gpu'"):
        jax.eval_shape(module("clustered", "gpu").init, jax.random.key(0), x, mask)


RANDOM = re.compile(r'op_name="[^"]*(threefry|_uniform|_normal|_bernoulli|random_bits)')


def compiled_ops(name: str, implementation: str, n: int) -> dict[str, int]:
    """While loops, sorts and scatters in the compiled forward + backward of one layer, length n."""
    x = jax.ShapeDtypeStruct((2, n, 16), jnp.float32)
    mask = jax.ShapeDtypeStruct((2, n), jnp.bool_)
    m = module(name, implementation, num_clusters=8)  # kmeans_init="auto"
    variables = jax.eval_shape(m.init, jax.random.key(0), x, mask)

    def loss(params, x, mask):
        y, _ = m.apply(params, x, mask, rngs={"attention": jax.random.key(1)})
        return jnp.sum(y**2)

    text = jax.jit(jax.grad(loss)).lower(variables, x, mask).compile().as_text()
    # jax.random's threefry is a while loop on the CPU backend (a fixed number of rounds): not ours
    lines = [line for line in text.splitlines() if not RANDOM.search(line)]
    return {op: sum(bool(re.search(rf"\b{op}\(", line)) for line in lines) for op in ("while", "sort", "scatter")}


@pytest.mark.parametrize("name", NAMES)
def test_accelerator_program_has_no_loops_and_no_scatter_in_the_clustering(name):
    small, large = (compiled_ops(name, "accelerator", n) for n in (64, 256))
    assert small == large, (small, large)  # nothing grows with N
    assert small["while"] == 0, small  # no Lloyd, centroid, seeding or query-block loop
    if name == "clustered":
        assert small == {"while": 0, "sort": 0, "scatter": 0}
    else:  # top_k (at most one sort) and the top keys' and values' gathers' gradients (C x K rows)
        assert small["sort"] <= 1 and small["scatter"] <= 2, small
    cpu = compiled_ops(name, "cpu", 64)
    assert cpu["while"] > 0 and cpu["scatter"] > small["scatter"]  # the test can tell the two apart


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_runs_and_matches_the_cpu_implementation(name):
    x = np.random.default_rng(7).normal(size=(2, 24, 16)).astype(np.float32)
    mask = np.arange(24)[None, :] < np.array([[17], [24]])
    out = {}
    for implementation in ("cpu", "accelerator"):
        m = module(name, implementation, kmeans_init="first", dtype=jnp.bfloat16)
        variables = jax.jit(m.init)(jax.random.key(0), x, mask)  # jit: ~3x cheaper than op by op

        def loss(params, m=m):
            return jnp.sum(m.apply(params, x, mask)[0].astype(jnp.float32) ** 2)

        out[implementation] = jax.jit(jax.value_and_grad(loss))(variables)
    (l_cpu, g_cpu), (l_acc, g_acc) = out["cpu"], out["accelerator"]
    np.testing.assert_allclose(float(l_acc), float(l_cpu), rtol=1e-2)
    # bfloat16 rounds the two summation orders differently; small leaves (sums of cancelling terms)
    # differ most, so the bound is relative to the largest gradient entry of the layer
    scale = max(float(np.abs(np.asarray(b, np.float32)).max()) for b in jax.tree.leaves(g_cpu))
    for a, b in zip(jax.tree.leaves(g_acc), jax.tree.leaves(g_cpu), strict=True):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.all(np.isfinite(a)) and np.abs(a - b).max() <= 0.02 * scale
