"""Clustered and improved clustered attention: exactness limits, Prop. 2, padding, memory, rng."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_checks import (
    assert_no_quadratic,
    assert_padding_invariant,
    reference_softmax_attention,
)
from lra import attention
from lra.attention import clustered as cl

NAMES = ("clustered", "improved_clustered")
N = 12
MASK = np.arange(N)[None, :] < np.array([[8], [N]])  # lengths 8 and 12


def make(name: str, topk: int | None = None, **kwargs):
    """A small module; ``topk`` only applies to (and is only passed to) the improved variant."""
    if name == "improved_clustered" and topk is not None:
        kwargs["topk"] = topk
    return attention.get(name)(num_heads=2, qkv_dim=16, **kwargs)


def token_inputs(vocab: int = 4, n: int = N, dim: int = 8, seed: int = 0):
    """Inputs built from a few token embeddings, so equal tokens give identical queries."""
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(vocab, dim)).astype(np.float32)
    tokens = rng.integers(0, vocab, size=(2, n))
    return emb[tokens], MASK


def random_inputs(seed: int = 0):
    return np.random.default_rng(seed).normal(size=(2, N, 8)).astype(np.float32), MASK


_softmax_init = jax.jit(attention.get("softmax")(num_heads=2, qkv_dim=16).init)


def init(x: np.ndarray, mask: np.ndarray):
    """Parameters from the softmax module: the families share its tree (and it inits quickly)."""
    return _softmax_init(jax.random.key(0), x, mask)


# Compiled once for every test and parameter (the same shapes): eager, each op compiles its own program.
attention_matrix = jax.jit(cl.attention_matrix, static_argnums=4, static_argnames="topk")
hamming_kmeans = jax.jit(cl.hamming_kmeans, static_argnums=(2, 3, 4))


def softmax_rows(q, k, mask):
    logits = np.einsum("bnhd,bmhd->bhnm", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask[:, None, None, :], logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def test_registry_and_same_parameter_tree_as_softmax():
    x, mask = token_inputs()
    trees = {}
    for name in ("softmax",) + NAMES:
        module = attention.get(name)(num_heads=4, qkv_dim=64)  # the paper's defaults otherwise
        variables = jax.eval_shape(module.init, jax.random.key(0), x, mask)
        y, memory = jax.eval_shape(module.apply, variables, x, mask)
        assert y.shape == x.shape and memory is None
        trees[name] = jax.tree.map(lambda a: a.shape, variables)
    assert trees["clustered"] == trees["softmax"] == trees["improved_clustered"]
    assert "num_clusters" in attention.option_names("clustered")
    assert "topk" in attention.option_names("improved_clustered")


@pytest.mark.parametrize("name", NAMES)
def test_enough_clusters_for_the_distinct_queries_equals_softmax(name):
    # 3 token types -> at most 3 distinct queries per head; farthest-point seeding finds them all.
    module = make(name, num_clusters=3, topk=2)
    for vocab, exact in ((3, True), (8, False)):  # 8 token types: too many, an approximation
        x, mask = token_inputs(vocab=vocab)
        variables = init(x, mask)
        y, _ = module.apply(variables, x, mask, rngs={"attention": jax.random.key(5)})
        ref = reference_softmax_attention(variables, x, mask, num_heads=2)
        error = np.abs(np.asarray(y)[mask] - ref[mask]).max()
        assert error < 2e-5 if exact else error > 1e-3, (vocab, error)


@pytest.mark.parametrize("kmeans_init", cl.INITS)
def test_clusters_at_least_length_equals_softmax(kmeans_init):
    x, mask = random_inputs(2)
    variables = init(x, mask)
    y, _ = make("clustered", num_clusters=N, kmeans_init=kmeans_init).apply(variables, x, mask)
    ref = reference_softmax_attention(variables, x, mask, num_heads=2)
    np.testing.assert_allclose(np.asarray(y)[mask], ref[mask], atol=2e-5)


@pytest.mark.parametrize("topk", [N, 64])  # = N, and > N (clipped)
def test_improved_with_topk_covering_all_keys_equals_softmax(topk):
    x, mask = random_inputs(3)
    variables = init(x, mask)
    y, _ = make("improved_clustered", num_clusters=3, topk=topk).apply(variables, x, mask)
    ref = reference_softmax_attention(variables, x, mask, num_heads=2)
    np.testing.assert_allclose(np.asarray(y)[mask], ref[mask], atol=2e-5)


def random_qkv_and_clusters(seed: int, n: int = 16, num_clusters: int = 3, lengths=(11, 16)):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(2, n, 2, 4)) * 1.5, jnp.float32) for _ in range(3))
    mask = jnp.asarray(np.arange(n)[None, :] < np.asarray(lengths)[:, None])
    clusters = cl.cluster_queries(q, mask, jax.random.key(seed), num_clusters)
    return q, k, v, mask, clusters


@pytest.mark.parametrize("seed", range(4))
def test_proposition_2_improved_rows_are_closer_to_full_attention(seed):
    q, k, _, mask, clusters = random_qkv_and_clusters(seed)
    full = softmax_rows(np.asarray(q, np.float64), np.asarray(k, np.float64), np.asarray(mask))
    a_c = np.asarray(attention_matrix(q, k, mask, clusters, 3))
    a_t = np.asarray(attention_matrix(q, k, mask, clusters, 3, topk=4))
    real_q = np.broadcast_to(np.asarray(mask)[:, None, :], a_c.shape[:3])  # B x H x N queries
    padded_k = np.broadcast_to(~np.asarray(mask)[:, None, None, :], a_c.shape)
    for rows in (a_c, a_t):
        np.testing.assert_allclose(rows.sum(-1)[real_q], 1.0, atol=1e-5)
        assert np.all(rows[padded_k] < 1e-30)
    err_c = np.abs(a_c - full).sum(-1)[real_q]
    err_t = np.abs(a_t - full).sum(-1)[real_q]
    assert np.all(err_t <= err_c + 1e-5), (err_t - err_c).max()
    assert err_t.mean() < 0.8 * err_c.mean()  # and the improvement is real, not a tie


@pytest.mark.parametrize("topk", [4, 13])  # 13 > the 11 real keys of the first sequence
def test_efficient_outputs_match_dense_rows(topk):
    q, k, v, mask, clusters = random_qkv_and_clusters(7)
    mask_np = np.asarray(mask)
    for fn, rows in (
        (cl.clustered_attention(q, k, v, mask, clusters, 3), attention_matrix(q, k, mask, clusters, 3)),
        (
            cl.improved_clustered_attention(q, k, v, mask, clusters, 3, topk),
            attention_matrix(q, k, mask, clusters, 3, topk=topk),
        ),
    ):
        expected = np.einsum("bhnm,bmhd->bnhd", np.asarray(rows), np.asarray(v))
        np.testing.assert_allclose(np.asarray(fn)[mask_np], expected[mask_np], atol=1e-5)


def test_kmeans_recovers_separated_groups_and_ignores_padding():
    rng = np.random.default_rng(0)
    centers = np.sign(rng.normal(size=(3, 63)))
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 0, 0])
    noise = np.where(rng.random((10, 63)) < 0.05, -1.0, 1.0)
    hashes = (centers[labels] * noise)[None, None]  # B=1, H=1, N=10
    hashes[..., -2:, :] = -centers[0]  # two padded queries far from everything
    mask = jnp.asarray(np.arange(10)[None, :] < 8)
    for init in cl.INITS:
        got = np.asarray(hamming_kmeans(jnp.asarray(hashes, jnp.float32), mask, 3, 5, init, jax.random.key(0)))
        got = got[0, 0, :8]
        # Same partition as the labels (cluster ids are arbitrary).
        assert len(set(zip(got, labels[:8], strict=False))) == 3 == len(set(got))


# --- The packed clustering against the +-1 float formulation it replaced (same clusters, ties
# included: both pick the lowest index among equally near centroids).


def float_hamming_kmeans(h_BxHxNxR, mask_BxN, num_clusters, iterations, init, rng):
    """Reference: K-means on +-1 float hashes with dot products, as before the bits were packed."""
    b, nh, n, r = h_BxHxNxR.shape
    real_Bx1xN = mask_BxN[:, None, :]

    def rows(idx_BxHxC):
        return jnp.take_along_axis(h_BxHxNxR, idx_BxHxC[..., None], axis=2)

    if init == "farthest":
        first = jnp.broadcast_to(jnp.argmax(real_Bx1xN, axis=-1), (b, nh))
        cents = [rows(first[..., None])[:, :, 0]]
        dist = jnp.full((b, nh, n), jnp.inf)
        for _ in range(1, num_clusters):
            dist = jnp.minimum(dist, (r - jnp.einsum("bhnr,bhr->bhn", h_BxHxNxR, cents[-1])) / 2)
            far = jnp.argmax(jnp.where(real_Bx1xN, dist, -1.0), axis=-1)
            cents.append(rows(far[..., None])[:, :, 0])
        centroids = jnp.stack(cents, axis=2)
    else:
        pick = cl._first_real_indices if init == "first" else cl._random_real_indices
        idx = pick(mask_BxN, num_clusters) if init == "first" else pick(mask_BxN, num_clusters, rng)
        centroids = rows(jnp.broadcast_to(idx[:, None, :], (b, nh, num_clusters)))

    def assign(c):
        return jnp.argmax(jnp.einsum("bhnr,bhcr->bhnc", h_BxHxNxR, c), axis=-1)

    clusters = assign(centroids)
    ones = jnp.ones((b, nh, n, 1))
    for _ in range(iterations):
        votes = cl.cluster_sums(jnp.concatenate([h_BxHxNxR, ones], -1), clusters, mask_BxN, num_clusters)
        majority = jnp.where(votes[..., :-1] > 0, 1.0, -1.0)
        centroids = jnp.where(votes[..., -1:] > 0, majority, centroids)
        clusters = assign(centroids)
    return clusters


@pytest.mark.parametrize("bits", [8, 32, 33, 63])
def test_packed_hamming_distances_equal_the_float_ones(bits):
    rng = np.random.default_rng(bits)
    h = np.where(rng.random((2, 3, 40, bits)) < 0.5, 1.0, -1.0).astype(np.float32)

    @jax.jit
    def packed(bits_):
        words = cl.pack_bits(bits_)
        return words, cl.unpack_bits(words, bits), cl.hamming_distance(words[:, :, :, None], words[:, :, None, :])

    words, unpacked, got = packed(jnp.asarray(h > 0))
    assert words.dtype == jnp.uint32 and words.shape == (2, 3, 40, -(-bits // 32))
    np.testing.assert_array_equal(np.asarray(unpacked), h > 0)
    got = np.asarray(got)
    expected = (bits - np.einsum("bhnr,bhmr->bhnm", h, h)) / 2
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("bits", [8, 63])  # 8 bits: many equally near centroids (ties)
def test_packed_assignment_equals_float_argmax(bits):
    rng = np.random.default_rng(bits)
    h = np.where(rng.random((2, 3, 200, bits)) < 0.5, 1.0, -1.0).astype(np.float32)
    c = np.where(rng.random((2, 3, 37, bits)) < 0.5, 1.0, -1.0).astype(np.float32)
    expected = np.argmax(np.einsum("bhnr,bhcr->bhnc", h, c), axis=-1)

    @jax.jit
    def assign(h_bits, c_bits):
        return cl.nearest_centroids(*(jnp.moveaxis(cl.pack_bits(x), -1, 0) for x in (h_bits, c_bits)))

    np.testing.assert_array_equal(np.asarray(assign(jnp.asarray(h > 0), jnp.asarray(c > 0))), expected)
    assert (
        bits > 8 or (np.sort(np.einsum("bhnr,bhcr->bhnc", h, c), -1)[..., -2:].std(-1) == 0).mean() > 0.2
    )  # ties really occur at 8 bits


def test_packed_kmeans_equals_the_float_kmeans(bits=8):  # 8 bits: ties in every step
    rng = np.random.default_rng(bits)
    q = jnp.asarray(rng.normal(size=(2, 3, 90, 8)), jnp.float32)
    mask = jnp.asarray(np.arange(90)[None, :] < np.array([[90], [57]]))
    h = jax.jit(lambda key, q: cl.hash_queries(q, *cl.lsh_planes(key, bits, 8)))(jax.random.key(bits), q)
    float_kmeans = jax.jit(float_hamming_kmeans, static_argnums=(2, 3, 4))
    for init in cl.INITS:
        args = (h, mask, 7, 3, init, jax.random.key(3))
        expected = np.asarray(float_kmeans(*args))
        got = np.asarray(hamming_kmeans(*args))
        np.testing.assert_array_equal(got, expected, err_msg=init)


@pytest.mark.parametrize("kmeans_init", cl.INITS)
@pytest.mark.parametrize("name", NAMES)
def test_padding_invariance(name, kmeans_init):
    assert_padding_invariant(make(name, num_clusters=3, topk=4, kmeans_init=kmeans_init))


def random_seeds(mask: np.ndarray, count: int, key: int) -> np.ndarray:
    return np.asarray(jax.jit(cl._random_real_indices, static_argnums=1)(jnp.asarray(mask), count, jax.random.key(key)))


def test_random_init_draws_distinct_real_positions_deterministically():
    mask = np.arange(40)[None, :] < np.array([[9], [40], [25]])
    seeds = random_seeds(mask, 6, key=0)
    for b, length in enumerate((9, 40, 25)):
        assert len(set(seeds[b])) == 6 and seeds[b].max() < length, seeds[b]  # distinct, real
    np.testing.assert_array_equal(random_seeds(mask, 6, key=0), seeds)  # same key, same seeds
    draws = {tuple(random_seeds(mask, 6, key=k)[1]) for k in range(5)}
    assert len(draws) == 5  # other keys, other seeds
    assert not all(tuple(s) == tuple(range(6)) for s in draws)  # not the "first" seeding
    # Extra padding leaves the seeds of real positions unchanged (padding invariance).
    longer = np.concatenate([mask, np.zeros((3, 7), bool)], axis=1)
    np.testing.assert_array_equal(random_seeds(longer, 6, key=0), seeds)
    # Fewer real tokens than clusters: every real position is a seed, then one repeats.
    short = random_seeds(np.arange(12)[None, :] < 4, 6, key=0)[0]
    assert set(short) == {0, 1, 2, 3} and len(set(short[4:])) == 1


def test_random_init_seeds_come_from_the_attention_rng_under_jit():
    x, mask = random_inputs(5)
    variables = init(x, mask)
    module = make("clustered", num_clusters=3, kmeans_init="random")
    apply = jax.jit(lambda key: module.apply(variables, x, mask, rngs={"attention": key})[0])
    y = np.asarray(apply(jax.random.key(2)))
    np.testing.assert_array_equal(np.asarray(apply(jax.random.key(2))), y)
    np.testing.assert_allclose(
        np.asarray(module.apply(variables, x, mask, rngs={"attention": jax.random.key(2)})[0]), y, atol=1e-5
    )  # eager == jit
    # Other keys, other clusterings (with no Lloyd step: the seeds' Voronoi cells).
    q = jnp.asarray(np.random.default_rng(0).normal(size=(2, N, 2, 8)), jnp.float32)
    clusters = [
        np.asarray(cl.cluster_queries(q, mask, jax.random.key(k), 3, iterations=0, init="random")) for k in range(3)
    ]
    assert not np.array_equal(clusters[0], clusters[1])
    assert not np.array_equal(clusters[0], clusters[2])
    with pytest.raises(ValueError, match="rng"):
        cl.hamming_kmeans(jnp.ones((1, 1, 4, 8)), jnp.ones((1, 4), bool), 2, init="random")


@pytest.mark.parametrize("name", NAMES)
def test_jit_dropout_and_finite_gradients(name):
    x, mask = random_inputs(1)
    module = make(name, num_clusters=3, topk=4, dropout_rate=0.5)
    variables = init(x, mask)
    rngs = {"attention": jax.random.key(3), "dropout": jax.random.key(4)}

    def loss(params):
        y, _ = module.apply(params, x, mask, rngs=rngs, deterministic=False)
        return jnp.sum(jnp.where(mask[..., None], y, 0.0) ** 2), y

    (_, train_y), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(variables)
    eval_y, _ = module.apply(variables, x, mask, rngs=rngs)
    assert np.abs(np.asarray(train_y) - np.asarray(eval_y))[mask].max() > 1e-4  # attention dropout
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.all(np.isfinite(np.asarray(g))), path
    # Gradients reach the queries through the centroids (the assignment is not differentiated).
    assert np.abs(np.asarray(grads["params"]["query"]["kernel"])).max() > 1e-6


@pytest.mark.parametrize("name", NAMES)
def test_hashing_planes_come_from_the_attention_rng(name):
    x, mask = random_inputs(4)
    module = make(name, num_clusters=3, topk=4)
    variables = init(x, mask)

    def run(key=None):
        rngs = {} if key is None else {"attention": jax.random.key(key)}
        return np.asarray(module.apply(variables, x, mask, rngs=rngs)[0])

    np.testing.assert_array_equal(run(), run())  # no rng given: a fixed key
    np.testing.assert_array_equal(run(11), run(11))
    assert np.abs(run(11) - run(12))[mask].max() > 1e-4
    created = jax.eval_shape(module.init, jax.random.key(0), x, mask)
    assert jax.tree.structure(created) == jax.tree.structure(variables)  # planes are no parameters


@pytest.mark.parametrize("name", NAMES)
def test_no_quadratic_memory_with_random_init(name):  # the registered default: tests/test_attention_contract.py
    assert_no_quadratic(make(name, kmeans_init="random"), n=4096)


def test_invalid_options_fail_clearly():
    x, mask = token_inputs()
    with pytest.raises(ValueError, match="kmeans_init"):
        jax.eval_shape(make("clustered", kmeans_init="kmeans++").init, jax.random.key(0), x, mask)
    with pytest.raises(ValueError, match="topk"):
        jax.eval_shape(make("improved_clustered", topk=0).init, jax.random.key(0), x, mask)


@pytest.mark.parametrize("task", ["listops", "text", "matching", "image"])
@pytest.mark.parametrize("family", ["clustered", "improved_clustered"])
def test_configs_load(task, family):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "configs" / f"{task}_{family}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    config_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config_module)
    c = config_module.get_config("smoke,clusters=7")
    assert c.model.attention == family and c.model.attention_kwargs.num_clusters == 7
    assert c.variant.endswith("Clustered-7") and c.preset == "smoke"
    assert config_module.get_config("cpu").preset == "cpu"
    assert (c.model.norm, c.model.pooling) == ("pre", "cls")


def test_masked_copy_task_definition():
    from lra_lab.experiments import masked_copy as mc

    settings = mc.Settings(seq_len=31, batch_size=256)
    inputs, targets, masked = mc.make_batch(settings, np.random.default_rng(0))
    assert inputs.shape == targets.shape == masked.shape == (256, 64)
    first, second = targets[:, 1:32], targets[:, 33:]
    np.testing.assert_array_equal(first, second)  # target 0 w 0 w
    assert np.all(targets[:, [0, 32]] == mc.SEPARATOR) and first.min() >= 1 and first.max() <= 10
    np.testing.assert_array_equal(inputs == mc.MASK_TOKEN, masked)
    np.testing.assert_array_equal(np.where(masked, targets, inputs), targets)
    assert not np.any(masked[:, 1:32] & masked[:, 33:])  # recoverable: never both copies
    assert abs(masked.sum() / first.size / 2 - settings.mask_fraction) < 0.02


@pytest.mark.slow  # kills and resumes a masked-copy training
def test_masked_copy_resumes_a_killed_call_exactly(tmp_path, monkeypatch):
    """A call killed after its first variant keeps that variant; the same call again trains only the
    rest and writes what an uninterrupted call writes; a torn last line is dropped, other settings
    are refused by name."""
    import json

    from lra_lab.experiments import masked_copy as mc

    settings = mc.Settings(
        seq_len=5,
        num_layers=1,
        num_heads=2,
        head_dim=4,
        mlp_dim=8,
        batch_size=4,
        steps=2,
        eval_batches=1,
        log_every=1,
        variants=("softmax", "clustered:2"),
    )
    whole = mc.run_resumable(settings, tmp_path / "whole", "cmd", log=lambda line: None)

    trained, real = [], mc.train_variant

    def killed_on_second(s, spec, log):
        if spec == "clustered:2":
            raise KeyboardInterrupt  # the kill, after the first variant's line was appended
        trained.append(spec)
        return real(s, spec, log)

    out = tmp_path / "cut"
    monkeypatch.setattr(mc, "train_variant", killed_on_second)
    with pytest.raises(KeyboardInterrupt):
        mc.run_resumable(settings, out, "cmd", log=lambda line: None)
    assert not (out / "results.json").exists() and len((out / mc.PARTIAL).read_text().splitlines()) == 1
    with open(out / mc.PARTIAL, "a") as f:
        f.write('{"spec": "clustered:2", "sett')  # torn by a kill mid-append

    def counting(s, spec, log):
        trained.append(spec)
        return real(s, spec, log)

    monkeypatch.setattr(mc, "train_variant", counting)
    with pytest.raises(ValueError, match=r"other settings \(steps: 2 there, 3 now"):
        mc.run_resumable(dataclasses.replace(settings, steps=3), out, "cmd", log=lambda line: None)
    resumed = mc.run_resumable(settings, out, "cmd", log=lambda line: None)
    assert trained == ["softmax", "clustered:2"]  # softmax once, before the kill; then only the rest
    strip = lambda r: [{k: v for k, v in run.items() if k != "train_seconds"} for run in r["runs"]]
    assert strip(resumed) == strip(whole)
    assert (
        json.loads((out / "results.json").read_text())["runs"][0]["masked_accuracy"]
        == whole["runs"][0]["masked_accuracy"]
    )
    assert not (out / mc.PARTIAL).exists()


def test_masked_copy_swap_evaluates_the_softmax_weights_with_another_attention(tmp_path):
    """Table 1's "train with one, evaluate with another": with top-k covering every key improved clustered
    is softmax, so evaluating the softmax weights with it gives the softmax numbers (other weights would
    not); a record without the option keeps its old settings (no swap_eval key)."""
    from lra_lab.experiments import masked_copy as mc

    settings = mc.Settings(
        seq_len=5,
        num_layers=1,
        num_heads=2,
        head_dim=4,
        mlp_dim=8,
        batch_size=4,
        steps=2,
        eval_batches=1,
        log_every=1,
        topk=12,
        variants=("softmax",),
        swap_eval=("clustered:12", "improved_clustered:12"),
    )
    result = mc.run_resumable(settings, tmp_path / "swap", "cmd", log=lambda line: None)
    (full,) = result["runs"]
    assert [s["variant"] for s in full["swap_eval"]] == ["clustered-12", "i-clustered-12"]
    clustered_run, improved = full["swap_eval"]
    assert improved["masked_accuracy"] == full["masked_accuracy"]
    assert improved["eval_loss"] == pytest.approx(full["eval_loss"], abs=1e-5)
    assert 0.0 <= clustered_run["masked_accuracy"] <= 1.0
    assert result["settings"]["swap_eval"] == ["clustered:12", "improved_clustered:12"]
    assert "swap_eval" not in mc.settings_record(dataclasses.replace(settings, swap_eval=()))
    assert "--swap-eval" in mc.settings_problem(dataclasses.replace(settings, variants=("clustered:2",)))
