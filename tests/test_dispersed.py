"""Dispersed hierarchical attention: the pattern against the paper's Table 1, the module against a
dense masked-softmax reference, softmax equivalence, padding, jit, gradients, linear memory."""

from __future__ import annotations

import collections
import importlib.util
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lra.attention
from attention_checks import (
    assert_padding_invariant,
    reference_softmax_attention,
)
from lra.attention import dispersed
from lra.attention.dispersed import DispersedAttention, num_scores, offsets, pattern
from lra.attention.softmax import SoftmaxAttention

# Table 1 of the paper (window 4): N -> number of attention scores, and the sliding-window column.
TABLE1 = {
    10: 62,
    50: 700,
    100: 1962,
    500: 21524,
    1000: 60550,
    5000: 671500,
    10000: 1895358,
    15000: 3478806,
    16384: 3970510,
}
TABLE1_WINDOW = {10: 44, 50: 244, 100: 494, 500: 2494, 1000: 4994, 16384: 81914}


def test_offsets_follow_algorithm_2():
    offs = offsets(4)
    positive = offs[offs > 2]
    # j = i + w/2, then j += 2, 3, 4, ...: 2+2, 4+3, 7+4, 11+5, ...
    np.testing.assert_array_equal(positive[:5], [4, 7, 11, 16, 22])
    assert positive.size == 179 and positive.max() == 2 + sum(range(2, 181)) == 16291
    np.testing.assert_array_equal(offs[np.abs(offs) <= 2], [-2, -1, 0, 1, 2])
    np.testing.assert_array_equal(offs, np.sort(offs))
    np.testing.assert_array_equal(offs, -offs[::-1])  # symmetric
    np.testing.assert_array_equal(offsets(5), offs)  # odd windows round down, as in Algorithm 2
    np.testing.assert_array_equal(offsets(8, max_gap=3), [-9, -6, -4, -3, -2, -1, 0, 1, 2, 3, 4, 6, 9])
    with pytest.raises(ValueError):
        offsets(-2)


@pytest.mark.parametrize("n", [10, 50, 100, 500, 1000])
def test_pattern_reproduces_table1(n):
    assert pattern(n, 4).sum() == TABLE1[n]
    assert num_scores(n, 4) == TABLE1[n]


@pytest.mark.parametrize("n", [5000, 10000, 15000, 16384])
def test_num_scores_reproduces_table1_long(n):
    assert num_scores(n, 4) == TABLE1[n]


@pytest.mark.parametrize("n", sorted(TABLE1_WINDOW))
def test_window_alone_reproduces_table1_sliding_column(n):
    # max_gap=1: an empty gap sequence, i.e. the plain sliding window of Eq. (3).
    assert num_scores(n, 4, max_gap=1) == TABLE1_WINDOW[n]


def test_pattern_structure():
    n, w = 80, 6
    p = pattern(n, w)
    np.testing.assert_array_equal(p, p.T)
    assert p.diagonal().all()
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]
    np.testing.assert_array_equal(p[np.abs(rel) <= w // 2], True)  # the window is dense
    assert not p[np.abs(rel) == w // 2 + 1].any()  # then a gap of one token
    np.testing.assert_array_equal(
        np.flatnonzero(p[40]) - 40, dispersed.live_offsets(n, w)[np.abs(dispersed.live_offsets(n, w)) <= 39]
    )
    assert p[0].sum() == (dispersed.live_offsets(n, w) >= 0).sum()  # first row: right side only
    assert num_scores(n, w) == p.sum()


def _dense_pattern_reference(params, x, mask, num_heads, allowed_NxN, scale=None):
    """Numpy multi-head attention masked by ``allowed & real key`` (test-only reference)."""
    p = params["params"]
    x = np.asarray(x, np.float64)

    def proj(name):
        return np.einsum("bnd,dhk->bnhk", x, np.asarray(p[name]["kernel"])) + np.asarray(p[name]["bias"])

    q, k, v = proj("query"), proj("key"), proj("value")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = np.einsum("bnhk,bmhk->bhnm", q, k) * scale
    keep = allowed_NxN[None, None] & mask[:, None, None, :]
    logits = np.where(keep, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    y = np.einsum("bhnm,bmhk->bnhk", w, v)
    y = np.where(mask[:, :, None, None], y, 0.0)
    return np.einsum("bnhk,hkd->bnd", y, np.asarray(p["out"]["kernel"])) + np.asarray(p["out"]["bias"])


def _init(module, x, mask, seed=0):
    """``module.init`` as one compiled program (its forward pass is dropped: only the parameters come out)."""
    return jax.jit(module.init)(jax.random.key(seed), x, mask)


def _inputs(n=64, dim=16, lengths=(51, 64), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(lengths), n, dim)).astype(np.float32)
    mask = np.arange(n)[None, :] < np.asarray(lengths)[:, None]
    return jnp.asarray(x), jnp.asarray(mask)


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(block_size=7), dict(block_size=1000), dict(window=6, max_gap=5), dict(scale_scores=False)],
)
def test_matches_dense_pattern_reference(kwargs):
    module = DispersedAttention(num_heads=2, qkv_dim=16, **kwargs)
    x, mask = _inputs()
    params = _init(module, x, mask)
    y, memory = jax.jit(module.apply)(params, x, mask)
    assert memory is None and y.shape == x.shape
    allowed = pattern(x.shape[1], module.window, module.max_gap)
    assert not allowed.all()  # the pattern really drops keys at this length
    scale = None if module.scale_scores else 1.0
    ref = _dense_pattern_reference(params, x, np.asarray(mask), 2, allowed, scale)
    m = np.asarray(mask)[..., None]
    np.testing.assert_allclose(np.asarray(y) * m, ref * m, atol=2e-5)
    # ... and it is not full attention at this length.
    full = reference_softmax_attention(params, np.asarray(x), np.asarray(mask), 2)
    assert np.abs((np.asarray(y) - full) * m).max() > 1e-3


def test_window_covering_sequence_equals_softmax():
    x, mask = _inputs(n=24, lengths=(17, 24))
    module = DispersedAttention(num_heads=2, qkv_dim=16, window=2 * 24, block_size=5)
    softmax = SoftmaxAttention(num_heads=2, qkv_dim=16)
    params = _init(softmax, x, mask, seed=1)  # softmax-trained weights, same tree
    assert jax.tree.structure(jax.eval_shape(module.init, jax.random.key(1), x, mask)) == jax.tree.structure(params)
    y, y_soft = jax.jit(lambda p: (module.apply(p, x, mask)[0], softmax.apply(p, x, mask)[0]))(params)
    m = np.asarray(mask)[..., None]
    np.testing.assert_allclose(np.asarray(y) * m, np.asarray(y_soft) * m, atol=1e-5)


def test_padding_invariance():
    # Blocks of 5 queries over 24 (then 33) positions: partial last blocks are exercised too.
    module = DispersedAttention(num_heads=2, qkv_dim=16, window=2, max_gap=5, block_size=5)
    # The helper's own init (seed 0, the 24 + 9 positions): parameters depend on the shapes only.
    variables = _init(module, jnp.zeros((2, 33, 16)), jnp.ones((2, 33), bool))
    assert_padding_invariant(
        module, n=24, lengths=(13, 24), extra_padding=9, variables=variables, apply=jax.jit(module.apply)
    )


def test_jit_matches_eager():
    module = DispersedAttention(num_heads=2, qkv_dim=16, block_size=16)
    x, mask = _inputs()
    params = module.init(jax.random.key(0), x, mask)
    eager, _ = module.apply(params, x, mask)
    jitted, _ = jax.jit(module.apply)(params, x, mask)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), atol=1e-6)


def test_gradients_finite_and_nonzero():
    module = DispersedAttention(num_heads=2, qkv_dim=16, block_size=16)
    x, mask = _inputs()
    params = _init(module, x, mask)

    def loss(params, x):
        y, _ = module.apply(params, x, mask)
        return jnp.sum(jnp.where(mask[..., None], y, 0.0) ** 2)

    g_params, g_x = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)
    for leaf in jax.tree.leaves(g_params) + [g_x]:
        assert np.isfinite(np.asarray(leaf)).all()
    assert all(np.abs(np.asarray(leaf)).max() > 0 for leaf in jax.tree.leaves(g_params))
    # Padded tokens get no gradient: they never reach a real output.
    np.testing.assert_array_equal(np.asarray(g_x)[0, 51:], 0.0)


def test_dropout_on_pattern_weights():
    module = DispersedAttention(num_heads=2, qkv_dim=16, dropout_rate=0.5, block_size=16)
    x, mask = _inputs()
    params = _init(module, x, mask)
    det, _ = jax.jit(module.apply)(params, x, mask)
    no_drop, _ = jax.jit(DispersedAttention(num_heads=2, qkv_dim=16, block_size=16).apply)(params, x, mask)
    np.testing.assert_allclose(np.asarray(det), np.asarray(no_drop), atol=1e-6)
    run = jax.jit(
        lambda seed: module.apply(params, x, mask, deterministic=False, rngs={"dropout": jax.random.key(seed)})[0]
    )
    m = np.asarray(mask)[..., None]
    y3 = np.asarray(run(3)) * m
    np.testing.assert_array_equal(np.asarray(run(3)) * m, y3)
    assert np.abs(y3 - np.asarray(det) * m).max() > 1e-3
    assert np.abs(y3 - np.asarray(run(4)) * m).max() > 1e-3


def test_registry_builds_working_module():
    module = lra.attention.get("dispersed")(num_heads=4, qkv_dim=64)
    assert isinstance(module, DispersedAttention) and module.window == 4 and module.max_gap == 180
    assert set(lra.attention.option_names("dispersed")) >= {"window", "max_gap"}
    x, mask = _inputs(dim=32)
    y, _ = jax.jit(module.apply)(_init(module, x, mask), x, mask)
    assert y.shape == x.shape and np.isfinite(np.asarray(y)).all()


@pytest.mark.parametrize("task", ["listops", "text", "matching", "image"])
def test_configs_load(task):
    path = Path(__file__).resolve().parents[1] / "configs" / f"{task}_dispersed.py"
    spec = importlib.util.spec_from_file_location(f"{task}_dispersed", path)
    config_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config_module)
    for preset in ("smoke", "cpu", None):
        c = config_module.get_config(preset)
        got = (c.model.attention, c.variant, c.model.norm, c.model.pooling)
        assert got == ("dispersed", "Dispersed", "pre", "cls")
        assert c.model.attention_kwargs.window == 4
    assert config_module.get_config("smoke,window=8").model.attention_kwargs.window == 8


def _core_inputs(n, lengths, seed=0, b_h_d=(2, 2, 8)):
    b, h, d = b_h_d
    rng = np.random.default_rng(seed)
    q, k, v, r = (jnp.asarray(rng.normal(size=(b, n, h, d)).astype(np.float32)) for _ in range(4))
    mask = jnp.asarray(np.arange(n)[None, :] < np.asarray(lengths)[:, None])
    return q, k, v, r, mask


def _output_and_grads(f, r=None, loss=None):
    """One program: ``f(q, k, v)`` and the gradients wrt q, k and v of ``loss`` (default ``sum(f(q, k, v) * r)``)."""
    loss = loss or (lambda q, k, v: jnp.sum(f(q, k, v) * r))
    return jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)))


def _grads(*losses):
    """One program: the gradients wrt q, k and v of each loss."""
    return jax.jit(lambda q, k, v: tuple(jax.grad(f, argnums=(0, 1, 2))(q, k, v) for f in losses))


def _dense_core(q, k, v, mask, allowed_NxN):
    """Masked softmax over the pattern, differentiated by JAX (test-only, N x N)."""
    logits = jnp.einsum("bnhd,bmhd->bhnm", q * q.shape[-1] ** -0.5, k)
    logits = jnp.where(jnp.asarray(allowed_NxN)[None, None] & mask[:, None, None, :], logits, -1e9)
    return jnp.einsum("bhnm,bmhd->bnhd", jax.nn.softmax(logits, axis=-1), v)


@pytest.mark.parametrize("n,chunk,block", [(64, 256, 16), (64, 16, 5), (70, 24, 7), (200, 32, 16), (33, 8, 3)])
def test_core_and_gradients_match_dense_reference(n, chunk, block):
    # Chunks that divide N, that do not (padded last chunk), single and many chunks, small groups.
    q, k, v, r, mask = _core_inputs(n, (n - 13, n))
    offs = offsets(4, 12)
    core = lambda q, k, v: dispersed.dispersed_attention(q, k, v, mask, offs, chunk_size=chunk, block_size=block)
    dense = lambda q, k, v: _dense_core(q, k, v, mask, pattern(n, 4, 12))
    y, got = _output_and_grads(core, r)(q, k, v)
    y_dense, want = _output_and_grads(dense, r)(q, k, v)
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_dense), atol=2e-5)
    for g, w in zip(got, want, strict=False):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-5)


def test_hand_written_backward_matches_autodiff_with_dropout():
    # The custom VJP against JAX's own differentiation of the same forward pass, dropout on.
    n, chunk, block = 70, 16, 4
    q, k, v, r, mask = _core_inputs(n, (57, 70), seed=1)
    live = tuple(int(d) for d in dispersed.live_offsets(n, 4, 12))
    key = (live, n, chunk, block)
    t = dispersed._tiling(*key)
    mask2 = dispersed._padded(jnp.pad(mask, [(0, 0), (0, t.n_pad - n)]), t.chunk)
    kept = jax.random.bernoulli(jax.random.key(3), 0.7, (t.n_pad // t.chunk, t.rows_q, 2, 2, t.chunk))
    keep = jnp.where(kept, 1 / 0.7, 0.0)
    custom = lambda q, k, v: jnp.sum(dispersed._pattern_attention(q, k, v, mask2, keep, key) * r)
    plain = lambda q, k, v: jnp.sum(dispersed._pattern_attention_fwd(q, k, v, mask2, keep, key)[0] * r)
    got, want = _grads(custom, plain)(q, k, v)
    for g, w in zip(got, want, strict=False):
        assert np.abs(np.asarray(w)).max() > 1e-3
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-5)


@pytest.mark.parametrize("n,chunk", [(1000, 248), (4096, 216), (70, 24), (33, 33), (200, 8)])
def test_each_chunk_window_holds_every_offset_its_queries_need(n, chunk):
    live = dispersed.live_offsets(n)
    t = dispersed._tiling(tuple(int(d) for d in live), n, chunk, 16)
    assert t.n_pad % t.chunk == 0 and t.n <= t.n_pad < t.n + t.chunk and t.rows_q % t.group == 0
    offs_CxR, _ = t.starts()
    for c, row in enumerate(offs_CxR):
        queries = np.arange(c * t.chunk, min((c + 1) * t.chunk, n))
        keys = queries[:, None] + live[None, :]
        needed = live[((keys >= 0) & (keys < n)).any(axis=0)]
        assert set(needed) <= set(row.tolist())
        extra = set(row.tolist()) - set(needed)  # the rest of the window: never a key inside [0, n)
        assert all(not ((queries + d >= 0) & (queries + d < n)).any() for d in extra)
    if n >= 1000:
        assert t.rows_q < len(live)  # the windows really skip offsets at this length
    assert dispersed.num_scores(n) <= t.rows_q * t.n_pad


def test_chunk_length_avoids_4k_aligned_planes():
    # 256 positions x 4 heads of float32 put the 32 feature planes exactly 4 KiB apart.
    c = dispersed._chunk_length(256, 4096, 4, 32)
    assert 128 <= c <= 256 and c % 8 == 0 and (4 * 4 * c) % 4096 != 0
    assert len({(p * 16 * c % 4096) // 64 for p in range(32)}) == 32  # 32 distinct L1 sets
    assert dispersed._chunk_length(256, 100, 4, 32) == 100  # one chunk: the whole sequence


# --- the accelerator implementation ("gather") against the CPU-tuned one ("chunks") ---------------


def _impl_core(impl, mask, offs, **kwargs):
    return lambda q, k, v: dispersed.dispersed_attention(q, k, v, mask, offs, implementation=impl, **kwargs)


@pytest.mark.parametrize(
    "n,lengths,window,max_gap",
    [
        (64, (51, 64), 4, 12),
        (33, (20, 33), 4, 12),
        (127, (1, 90), 6, 20),
        (200, (187, 200), 4, 180),
        (600, (599, 371), 4, 180),
    ],
)
def test_gather_equals_chunks_outputs_and_gradients(n, lengths, window, max_gap):
    # Odd and even lengths, padded rows (one with a single real token), the paper's pattern at 1K.
    q, k, v, r, mask = _core_inputs(n, lengths, seed=n)
    offs = offsets(window, max_gap)
    real = mask[..., None, None]
    results = {}
    for impl in ("chunks", "gather"):
        core = _impl_core(impl, mask, offs, chunk_size=48)
        loss = lambda q, k, v, core=core: jnp.sum(jnp.where(real, core(q, k, v), 0.0) * r)  # noqa: E731
        results[impl] = _output_and_grads(core, loss=loss)(q, k, v)
    (y_c, g_c), (y_g, g_g) = results["chunks"], results["gather"]
    np.testing.assert_allclose(np.asarray(y_g * real), np.asarray(y_c * real), atol=2e-5)
    for got, want in zip(g_g, g_c, strict=True):
        assert np.abs(np.asarray(want)).max() > 1e-3
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=5e-5)


@pytest.mark.parametrize("slot_parts", [1, 2, 5, 1000])
def test_gather_slot_parts_change_nothing(slot_parts):
    # The offsets read in one run, a few, or one run per offset (1000 > K) give the same result.
    from lra.attention.dispersed_gather import gather_attention

    n = 40
    q, k, v, r, mask = _core_inputs(n, (29, 40), seed=2)
    live = tuple(int(d) for d in dispersed.live_offsets(n, 4, 12))
    rng = jax.random.key(5)
    # Eager on purpose: jitted, each case compiles its own whole program, which measured slower than the
    # eager primitives the cases share.
    core = lambda q, k, v, p: gather_attention(q, k, v, mask, rng, live=live, dropout_rate=0.3, slot_parts=p)  # noqa: E731
    loss = lambda p: (lambda q, k, v: jnp.sum(core(q, k, v, p) * r))  # noqa: E731
    np.testing.assert_allclose(np.asarray(core(q, k, v, slot_parts)), np.asarray(core(q, k, v, None)), atol=1e-5)
    for got, want in zip(
        jax.grad(loss(slot_parts), argnums=(0, 1, 2))(q, k, v),
        jax.grad(loss(None), argnums=(0, 1, 2))(q, k, v),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_gather_backward_matches_autodiff_with_dropout():
    # The hand-written VJP (key/value gradients from the negated offsets) against JAX's own
    # differentiation of the same forward pass, dropout on, padded keys and out-of-sequence slots.
    from lra.attention import dispersed_gather as dg

    n = 70
    q, k, v, r, mask = _core_inputs(n, (57, 70), seed=1)
    live = tuple(int(d) for d in dispersed.live_offsets(n, 4, 12))
    kept = jax.random.bernoulli(jax.random.key(3), 0.7, (2, len(live), n, 2))
    custom = lambda q, k, v: jnp.sum(dg._core(q, k, v, mask, kept, live, 0.3, 3) * r)  # noqa: E731
    plain = lambda q, k, v: jnp.sum(dg._core_fwd(q, k, v, mask, kept, live, 0.3, 3)[0] * r)  # noqa: E731
    got, want = _grads(custom, plain)(q, k, v)
    for g, w in zip(got, want, strict=True):
        assert np.abs(np.asarray(w)).max() > 1e-3
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-5)


def test_gather_matches_dense_reference_and_bf16():
    n = 70
    q, k, v, r, mask = _core_inputs(n, (57, 70), seed=4)
    offs = offsets(4, 12)
    dense = jax.jit(lambda q, k, v: _dense_core(q, k, v, mask, pattern(n, 4, 12)))(q, k, v)
    real = np.asarray(mask)[..., None, None]
    gather = jax.jit(_impl_core("gather", mask, offs))
    got = gather(q, k, v)
    np.testing.assert_allclose(np.asarray(got) * real, np.asarray(dense) * real, atol=2e-5)
    bf = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    got16 = gather(*bf)
    assert got16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got16, np.float32) * real, np.asarray(dense) * real, atol=5e-2)


def test_auto_is_chunks_on_cpu_to_the_bit():
    # CPU numbers must not change: "auto" lowers to exactly today's CPU implementation here.
    n = 64
    q, k, v, r, mask = _core_inputs(n, (51, 64))
    offs = offsets(4, 12)
    rng = jax.random.key(7)
    kw = dict(dropout_rate=0.2, dropout_rng=rng, deterministic=False, chunk_size=16)
    out = {}
    for impl in ("auto", "chunks"):
        core = _impl_core(impl, mask, offs, **kw)
        loss = lambda q, k, v, core=core: jnp.sum(core(q, k, v) * r)  # noqa: E731
        out[impl] = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(jax.tree.leaves(out["auto"]), jax.tree.leaves(out["chunks"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _grad_program(n, impl, platform=None):
    x = jax.ShapeDtypeStruct((2, n, 2, 8), jnp.float32)
    mask = jax.ShapeDtypeStruct((2, n), jnp.bool_)
    offs = offsets()

    def loss(q, k, v, mask):
        return jnp.sum(dispersed.dispersed_attention(q, k, v, mask, offs, implementation=impl) ** 2)

    traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(x, x, x, mask)
    if platform is not None:
        return traced.lower(lowering_platforms=(platform,)).as_text()
    return traced.lower().compile().as_text()


def _while_trip_counts(hlo_text):
    """Trip counts of the compiled program's while loops (None where XLA does not know one)."""
    loops = [line for line in hlo_text.splitlines() if " while(" in line]
    counts = []
    for line in loops:
        found = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
        counts.append(int(found.group(1)) if found else None)
    return sorted(counts, key=str)


def test_gather_program_has_no_loop_growing_with_n():
    # The forward + backward of "gather" at two lengths (K = 45 and 91 live offsets): no while loop
    # at either (the chunks path has loops whose trip counts grow with N), no scatter, the same
    # gathers (the mask's and the backward's slot shifts, of arrays without a head dimension) and
    # the same arithmetic at both: only the data movement of the static slices (one per offset,
    # stacked) grows with K; XLA's GPU compiler fuses it into the reductions that read it (the
    # kernel count on a GPU target: scripts/bench_launches.py, results/bench/launches_*).
    small, large = _grad_program(256, "gather"), _grad_program(1024, "gather")
    assert _while_trip_counts(small) == _while_trip_counts(large) == []
    lowered = {n: _grad_program(n, "gather", platform="cuda") for n in (256, 1024)}
    ops = {n: collections.Counter(re.findall(r"= \"?(stablehlo\.\w+)", text)) for n, text in lowered.items()}
    for counts in ops.values():
        assert counts["stablehlo.slice"] > 0 and counts["stablehlo.gather"] > 0 and "stablehlo.scatter" not in counts
        for movement in ("slice", "reshape", "broadcast_in_dim", "concatenate"):
            del counts[f"stablehlo.{movement}"]
    assert ops[256] == ops[1024]
    chunks_small, chunks_large = _grad_program(256, "chunks"), _grad_program(1024, "chunks")
    assert _while_trip_counts(chunks_small) and _while_trip_counts(chunks_small) != _while_trip_counts(chunks_large)


def test_auto_lowers_gather_for_accelerators():
    # "auto" is resolved when lowering: scans for a CPU, static slices per offset for a GPU or TPU
    # (no device needed).
    cpu, cuda, tpu = (_grad_program(512, "auto", p) for p in ("cpu", "cuda", "tpu"))
    k = len(dispersed.live_offsets(512))
    assert "stablehlo.while" in cpu
    for text in (cuda, tpu):
        assert "stablehlo.while" not in text and "stablehlo.scatter" not in text
        assert text.count("stablehlo.slice") >= 5 * k  # k, v forward; v, k, q, dy backward


def test_implementation_option():
    assert "implementation" in lra.attention.option_names("dispersed")
    assert DispersedAttention(num_heads=2, qkv_dim=16).implementation == "auto"
    with pytest.raises(ValueError, match="implementation"):
        DispersedAttention(num_heads=2, qkv_dim=16, implementation="cuda")
    x, mask = _inputs()
    ys = {}
    for impl in ("chunks", "gather"):
        module = DispersedAttention(num_heads=2, qkv_dim=16, implementation=impl)
        ys[impl], _ = jax.jit(module.apply)(_init(module, x, mask), x, mask)
    np.testing.assert_allclose(np.asarray(ys["gather"]), np.asarray(ys["chunks"]), atol=2e-5)
    path = Path(__file__).resolve().parents[1] / "configs" / "listops_dispersed.py"
    spec = importlib.util.spec_from_file_location("listops_dispersed", path)
    config_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config_module)
    assert config_module.get_config("smoke,implementation=gather").model.attention_kwargs.implementation == "gather"


def test_gather_arrays_are_sub_quadratic():
    # The largest array of "gather" (forward + backward) is one run of shifted rows, about K/3 x N x
    # H x Dh with K ~ 2 sqrt(2N) live offsets (fused into reductions on a GPU), never N x N: it
    # grows as N^1.5.
    from attention_checks import largest_intermediate
    from lra.attention import dispersed_gather as dg

    sizes = {}
    for n in (1024, 4096):
        module = DispersedAttention(num_heads=2, qkv_dim=16, implementation="gather")
        sizes[n] = largest_intermediate(module, n, dim=16)
        live = tuple(int(d) for d in dispersed.live_offsets(n))
        longest_run = max(len(r) for r in dg._parts(live, dg.slot_parts_for(len(live))))
        assert sizes[n] == longest_run * n * 16
    assert sizes[4096] / sizes[1024] < (4096 / 1024) ** 2 / 1.9  # 7.96, against 16 for an N x N array
