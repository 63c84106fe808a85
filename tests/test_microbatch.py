"""config.microbatches: the accumulated step equals the one-batch step (gradient, loss, accuracy)
up to float summation order, with every example's dropout bits unchanged (lra.training.step)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import FAST_COMPILE, fast_jit
from lra.data import task_shapes
from lra.defaults import make_config
from lra.errors import InputError
from lra.model import build_model
from lra.training import hosts, step
from lra.training.checks import ConfigError, validate_config
from lra.training.step import make_init, make_steps

# --- the row-keyed PRNG: a microbatch's bits are the full batch's bits of its rows


@functools.partial(fast_jit, static_argnums=(2, 3, 4, 5))  # one program per shape, shared by the cases
def _draws(key, m, count, rows, batch, parts):
    """Bits and (as flax folds module paths into keys) derived-key dropout of the full batch (count
    None) or of microbatch m's rows."""
    if count is not None:
        key, batch = step.row_keyed(key, m, count, rows, batch, parts), rows
    n = parts * batch
    return jax.random.bits(key, (n, 3, 5)), jax.random.bernoulli(
        jax.random.fold_in(jax.random.split(key)[1], 3), 0.3, (n, 7)
    )


@pytest.mark.parametrize("count, parts", [(1, 1), (2, 1), (4, 1), (4, 2), (8, 2)])
def test_row_keyed_bits_are_the_full_batch_bits_of_each_row(count, parts):
    key = jax.random.key(7)
    batch = 8
    rows = batch // count
    # both sides jitted (an exact comparison); one program serves every microbatch m
    full, full_drop = map(np.asarray, _draws(key, jnp.asarray(0), None, None, batch, parts))
    for m in range(count):
        bits, drop = _draws(key, jnp.asarray(m), count, rows, batch, parts)
        mine = [p * batch + m + j * count for p in range(parts) for j in range(rows)]
        np.testing.assert_array_equal(np.asarray(bits), full[mine])
        # derived keys (flax folds module paths into them) keep the map
        np.testing.assert_array_equal(np.asarray(drop), full_drop[mine])


def test_row_keyed_counter_crosses_2_to_the_32():
    # A full-batch tensor beyond 2^32 elements (matching at 4K: 64 x 4 x 4001 x 4001) cannot be drawn
    # here; the counters are checked against uint64 arithmetic and threefry's own primitive instead.
    count, per_row = 70_000, 98_304
    m = 43_690  # the row holds indices 4,294,901,760 .. 4,294,999,... : it crosses 2^32 (the carry)
    key = jax.random.key(3)
    draw = fast_jit(lambda key, m: jax.random.bits(step.row_keyed(key, m, count, 1, count, 1), (1, per_row)))
    got = np.asarray(draw(key, jnp.asarray(m)))
    index = np.uint64(m) * np.uint64(per_row) + np.arange(per_row, dtype=np.uint64)
    assert index[0] < 2**32 < index[-1]
    hi, lo = (index >> np.uint64(32)).astype(np.uint32), (index & np.uint64(0xFFFFFFFF)).astype(np.uint32)

    @fast_jit  # jitted as the draw above (an exact comparison)
    def threefry(key, hi, lo):
        kd = jax.random.key_data(key)
        b1, b2 = jax.extend.random.threefry2x32_p.bind(kd[0], kd[1], hi, lo)
        return b1 ^ b2

    np.testing.assert_array_equal(got[0], np.asarray(threefry(key, hi, lo)))


def test_mul_2x32_is_exact():
    a = jnp.asarray([0, 1, 2**32 - 1, 123_456_789, 65_535, 65_536], jnp.uint32)
    for c in (0, 1, 2**32 - 1, 64_032_016, 65_537):
        hi, lo = step.mul_2x32(a, c)
        got = [(int(h) << 32) | int(w) for h, w in zip(np.asarray(hi), np.asarray(lo), strict=True)]
        assert got == [int(x) * c for x in np.asarray(a)]


def test_a_draw_without_the_rows_axis_is_refused():
    k = step.row_keyed(jax.random.key(0), jnp.asarray(1), 4, 2, 8, 1)
    with pytest.raises(InputError, match="leading axis"):
        jax.random.bits(k, (3, 2))


def test_split_must_be_exact():
    c = make_config("listops", "softmax", "smoke")
    c.microbatches = 3  # batch 8
    with pytest.raises(ConfigError, match="does not divide config.batch_size=8"):
        validate_config(c)
    c.microbatches = 4
    validate_config(c)
    with pytest.raises(ConfigError, match="not divisible by the 4 devices"):
        validate_config(c, num_devices=4)
    c.microbatches = 0
    with pytest.raises(ConfigError, match=">= 1"):
        validate_config(c)


# --- the step


@functools.cache  # the one-batch listops step is three tests' reference: built, compiled and run once
def _step(task, microbatches, seeds=(0,), dropout=0.1, remat=False, dtype="float32"):
    c = make_config(task, "softmax", "smoke")
    c.model.update(dropout_rate=dropout, attention_dropout_rate=dropout, remat=remat, dtype=dtype)
    c.microbatches = microbatches
    validate_config(c)
    vocab, classes, dual = task_shapes(task)
    model = build_model(c.model, vocab, classes, dual)
    tx = optax.sgd(1.0)  # the update is minus the gradient (Adam would amplify float noise in zero gradients)
    mesh = hosts.data_mesh()
    example = (2, 24) if dual else (24,)
    init = make_init(model, tx, list(seeds), jnp.zeros((1, *example), jnp.int32), hosts.replicated(mesh))
    train, _ = make_steps(model, tx, c, mesh, list(seeds))
    rng = np.random.default_rng(0)
    s, b = len(seeds), c.batch_size
    inputs = rng.integers(1, vocab, (s, b, *example)).astype(np.int32)
    lengths = rng.integers(3, 25, (s, b, *example[:-1]))
    inputs = np.where(np.arange(24) < lengths[..., None], inputs, 0)  # padded tails (prefix masks)
    weights = np.ones((s, b), np.float32)
    weights[:, -3:] = 0.0  # padding rows of a last partial batch
    batch = {"inputs": inputs, "labels": rng.integers(0, classes, (s, b)).astype(np.int32), "weights": weights}
    state = init.bind(init.lower().compile(compiler_options=FAST_COMPILE))()  # the library's programs, compiled fast
    before = jax.tree.map(np.asarray, state["params"])
    batch = hosts.shard_batch(batch, hosts.seed_batch_sharded(mesh))
    new_state, metrics = train.bind(train.lower(state, batch).compile(compiler_options=FAST_COMPILE))(state, batch)
    delta = jax.tree.map(lambda a, b: np.asarray(a) - b, new_state["params"], before)
    return delta, jax.tree.map(np.asarray, metrics)


def _assert_close(a, b, rtol=1e-4):
    """Equal within float summation order, relative to the largest gradient entry (a gradient that is
    zero in exact arithmetic, as the key projection's bias, is float noise at ~1e-8)."""
    scale = max(float(np.max(np.abs(y))) for y in jax.tree.leaves(b))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize(
    "task, microbatches, seeds",
    [
        ("listops", 4, (0,)),
        pytest.param("listops", 2, (0, 1), marks=pytest.mark.slow),  # the vmapped seed axis
        pytest.param("matching", 4, (0,), marks=pytest.mark.slow),  # two documents per example (parts=2)
    ],
)
def test_microbatched_step_equals_the_one_batch_step(task, microbatches, seeds):
    # Dropout on everywhere (embedding, attention weights, residuals, MLP), three padding rows: the
    # gradient (an SGD step's update) and the metrics agree to float summation order.
    delta1, m1 = _step(task, 1, seeds)
    delta_m, m_m = _step(task, microbatches, seeds)
    _assert_close(delta_m, delta1)
    for k in ("loss", "accuracy", "learning_rate"):
        np.testing.assert_allclose(m_m[k], m1[k], rtol=1e-5)


def test_the_comparison_can_fail():
    # Another dropout draw moves the update far beyond the tolerance used above.
    delta_a, _ = _step("listops", 1, (0,))
    delta_b, _ = _step("listops", 1, (5,))
    with pytest.raises(AssertionError):
        _assert_close(delta_a, delta_b)


def test_remat_is_the_same_step():
    delta1, m1 = _step("listops", 1, remat=False)
    delta2, m2 = _step("listops", 2, remat=True)
    _assert_close(delta2, delta1)
    np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=1e-5)


# --- the bf16 option: bfloat16 compute, float32 parameters, optimizer state and statistics


def test_bf16_option_computes_in_bfloat16_and_keeps_float32_state():
    from lra.attention.base import dot_product_attention
    from lra.training.step import make_optimizer

    c = make_config("listops", "softmax", "smoke,bf16")
    assert c.model.dtype == "bfloat16" and c.preset == "smoke"
    assert make_config("listops", "softmax", "bf16").preset == "paper"
    validate_config(c)
    vocab, classes, dual = task_shapes("listops")
    model = build_model(c.model, vocab, classes, dual)
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, vocab, (2, 24)), jnp.int32)
    params = fast_jit(model.init)(jax.random.key(0), tokens)["params"]
    assert {p.dtype for p in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    tx = make_optimizer(c.learning_rate, c.warmup_steps, c.weight_decay, c.grad_clip_norm)
    state = fast_jit(tx.init)(params)
    assert {x.dtype for x in jax.tree.leaves(state) if jnp.issubdtype(x.dtype, jnp.floating)} == {
        jnp.dtype(jnp.float32)
    }
    logits = fast_jit(model.apply)({"params": params}, tokens)
    assert logits.dtype == jnp.float32  # the head and the loss
    # the encoder computes in bfloat16: its matmuls take bfloat16 operands
    jaxpr = str(jax.make_jaxpr(lambda p: model.apply({"params": p}, tokens))(params))
    assert "bf16[2,25,32]" in jaxpr
    # softmax statistics: logits, max and normaliser in float32 from bfloat16 q, k, v
    q = jnp.ones((1, 5, 2, 8), jnp.bfloat16)
    attn_jaxpr = str(jax.make_jaxpr(lambda q: dot_product_attention(q, q, q, None))(q))
    assert "reduce_max" in attn_jaxpr and "f32[1,2,5,5]" in attn_jaxpr
    with pytest.raises(InputError, match="bf16"):
        make_config("listops", "softmax", "smoke,bf15")
