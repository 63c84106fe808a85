"""The softmax baseline: equals a plain reference, jit == no jit; implementation="cudnn" builds the
arguments that give the same attention. Shapes, padding, jit and bf16: tests/test_attention_contract.py."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_checks import reference_softmax_attention
from lra import attention
from lra.attention import softmax as softmax_module
from lra.attention.base import dot_product_attention
from lra.defaults import make_config
from lra.training.checks import ConfigError, validate_config


def _inputs(b=2, n=9, d=16, lengths=(5, 9), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, n, d)).astype(np.float32)
    mask = np.arange(n)[None, :] < np.asarray(lengths)[:, None]
    return x, mask


def test_softmax_equals_reference():
    m = attention.get("softmax")(num_heads=2, qkv_dim=16)
    x, mask = _inputs()
    v = m.init(jax.random.key(0), x, mask)
    y, mem = m.apply(v, x, mask)
    assert mem is None
    ref = reference_softmax_attention(v, x, mask, num_heads=2)
    np.testing.assert_allclose(np.asarray(y) * mask[..., None], ref * mask[..., None], atol=1e-5)


def test_softmax_jit_matches_eager():
    m = attention.get("softmax")(num_heads=4, qkv_dim=32)
    x, mask = _inputs()
    v = m.init(jax.random.key(1), x, mask)
    eager = m.apply(v, x, mask)[0]
    jitted = jax.jit(lambda v, x, mask: m.apply(v, x, mask)[0])(v, x, mask)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), atol=1e-5)


def test_softmax_dropout_needs_rng_and_changes_output():
    m = attention.get("softmax")(num_heads=2, qkv_dim=16, dropout_rate=0.5)
    x, mask = _inputs()
    v = m.init(jax.random.key(0), x, mask)
    y_det = m.apply(v, x, mask, deterministic=True)[0]
    y_drop = m.apply(v, x, mask, deterministic=False, rngs={"dropout": jax.random.key(3)})[0]
    assert not np.allclose(np.asarray(y_det), np.asarray(y_drop))


def test_registry_rejects_unknown_name_and_lists_valid():
    with pytest.raises(ValueError, match="softmax"):
        attention.get("no_such_attention")


def test_heads_must_divide_qkv_dim():
    m = attention.get("softmax")(num_heads=3, qkv_dim=16)
    x, mask = _inputs()
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        m.init(jax.random.key(0), x, mask)


# --- implementation="cudnn" (cuDNN fused attention). No GPU in CI: the CPU tests run the exact
# arguments the cudnn path builds (softmax.cudnn_args) through jax's "xla" implementation.


def _qkv_mask(dtype, b=5, n=11, h=2, dh=8, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(b, n, h, dh)), dtype) for _ in range(3))
    lengths = np.array([n, 7, 3, 1, 0])[:b]  # full, partial, one key, none (a padding-only row)
    mask = np.arange(n)[None, :] < lengths[:, None]
    return q, k, v, jnp.asarray(mask)


@pytest.mark.parametrize("dtype, atol", [(jnp.float32, 1e-5), (jnp.bfloat16, 3e-2)])
@pytest.mark.parametrize("prefix", [True, False])
def test_cudnn_args_equal_ours_at_real_queries(dtype, atol, prefix):
    # bf16 tolerance: outputs are convex combinations of N(0,1) values (|y| <~ 3); both paths
    # form logits and softmax in float32 but round q, k, v, the weights and the weighted sum to
    # bf16 (8-bit mantissa, relative step 2^-8 ~ 0.004), differently ordered: a few ulps of 3.
    q, k, v, mask = _qkv_mask(dtype)
    if not prefix:  # real keys scattered: row 1 keeps every other key, row 2 a middle block
        mask = np.array(mask)
        mask[1] = np.arange(mask.shape[1]) % 2 == 0
        mask[2] = (np.arange(mask.shape[1]) >= 4) & (np.arange(mask.shape[1]) < 8)
        mask = jnp.asarray(mask)

    @jax.jit
    def both(q, k, v, mask):
        args = softmax_module.cudnn_args(q, k, v, mask, assume_prefix_mask=prefix)
        theirs = jax.nn.dot_product_attention(**args, implementation="xla")[:, : q.shape[1]]
        return dot_product_attention(q, k, v, mask), theirs

    ours, theirs = both(q, k, v, mask)
    ours = np.asarray(ours, np.float32)
    assert theirs.dtype == dtype and theirs.shape == ours.shape
    theirs = np.asarray(theirs, np.float32)
    assert np.isfinite(theirs).all()  # padded queries and the row without real keys included
    # Every query row attends to the real keys of its row, so padded queries agree too; only the
    # row without real keys differs (ours: uniform over all keys; cudnn_args: its first key).
    has_keys = np.asarray(mask).any(-1)
    np.testing.assert_allclose(theirs[has_keys], ours[has_keys], atol=atol, rtol=0)


def test_cudnn_args_keep_a_prefix_mask_in_place():
    q, k, v, mask = _qkv_mask(jnp.float32)
    args = softmax_module.cudnn_args(q, k, v, mask, assume_prefix_mask=False)
    assert args["key"].shape[1] == 12  # 11 padded to an even length
    np.testing.assert_array_equal(np.asarray(args["key"][:, :11]), np.asarray(k))
    np.testing.assert_array_equal(np.asarray(args["key"][:, 11:]), 0.0)
    np.testing.assert_array_equal(np.asarray(args["key_value_seq_lengths"]), [11, 7, 3, 1, 1])
    assert args["key_value_seq_lengths"].dtype == jnp.int32
    assert args["scale"] == pytest.approx(8**-0.5)


def test_cudnn_module_wiring_equals_xla_module(monkeypatch):
    # The module's cudnn branch (dtype check, zeroed padding, output projection), with the fused
    # call redirected to jax's xla implementation so that it runs on CPU.
    real = softmax_module.fused_attention
    monkeypatch.setattr(softmax_module, "fused_attention", lambda *a, **kw: real(*a, **kw, implementation="xla"))
    x, mask = _inputs(lengths=(5, 9))
    xla = attention.get("softmax")(num_heads=2, qkv_dim=16, dtype=jnp.bfloat16)
    cudnn = attention.get("softmax")(num_heads=2, qkv_dim=16, dtype=jnp.bfloat16, implementation="cudnn")
    v = xla.init(jax.random.key(0), x, mask)
    y_xla = np.asarray(xla.apply(v, x, mask)[0], np.float32)
    y_cudnn = np.asarray(jax.jit(partial(cudnn.apply, deterministic=False))(v, x, mask)[0], np.float32)
    np.testing.assert_allclose(y_cudnn, y_xla, atol=3e-2)
    pad = ~mask  # padded positions: the out-projection bias only (zero-initialised)
    np.testing.assert_array_equal(y_cudnn[pad], 0.0)


def test_cudnn_refuses_dropout_float32_and_unknown_names():
    with pytest.raises(ValueError, match="attention_dropout_rate=0"):
        attention.get("softmax")(num_heads=2, qkv_dim=16, dropout_rate=0.1, implementation="cudnn")
    with pytest.raises(ValueError, match="implementation='flash'.*valid: auto, xla, cudnn"):
        attention.get("softmax")(num_heads=2, qkv_dim=16, implementation="flash")
    m = attention.get("softmax")(num_heads=2, qkv_dim=16, implementation="cudnn")  # float32
    x, mask = _inputs()
    with pytest.raises(ValueError, match="config.model.dtype=bfloat16"):
        m.init(jax.random.key(0), x, mask)


def test_implementation_is_a_config_option():
    c = make_config("listops", "softmax", "smoke,implementation=cudnn")
    assert c.model.attention_kwargs.implementation == "cudnn"
    c.model.update(attention_dropout_rate=0.0, dtype="bfloat16")  # what cuDNN needs (test_reference)
    validate_config(c)
    with pytest.raises(ConfigError, match="implementation"):
        validate_config(make_config("listops", "softmax", "smoke,implementation=flash"))


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN fused attention needs a GPU")
def test_cudnn_on_gpu_equals_xla_at_real_positions():
    x, mask = _inputs(b=4, n=128, d=64, lengths=(128, 100, 17, 1))
    xla = attention.get("softmax")(num_heads=2, qkv_dim=64, dtype=jnp.bfloat16)
    cudnn = attention.get("softmax")(num_heads=2, qkv_dim=64, dtype=jnp.bfloat16, implementation="cudnn")
    v = xla.init(jax.random.key(0), x, mask)
    y_xla = np.asarray(jax.jit(xla.apply)(v, x, mask)[0], np.float32)
    y_cudnn = np.asarray(jax.jit(cudnn.apply)(v, x, mask)[0], np.float32)
    np.testing.assert_allclose(y_cudnn[mask], y_xla[mask], atol=3e-2)
    assert np.isfinite(y_cudnn).all()


# --- the cuDNN path at the suite's lengths: N + 1 with the [CLS] token is odd (2,001 text and
# matching, 4,001, 4,097 ListOps at 4K), and cuDNN's training path needs even lengths; the padded
# arguments must compute the same attention, outputs and gradients, as our XLA path.


def _suite_case(n, prefix, dtype=jnp.float32, b=2, h=1, dh=8):
    rng = np.random.default_rng(n)
    q, k, v = (jnp.asarray(rng.normal(size=(b, n, h, dh)), dtype) for _ in range(3))
    lengths = np.array([n, max(1, (2 * n) // 3)])[:b]
    mask = np.arange(n)[None, :] < lengths[:, None]
    if not prefix:  # real keys scattered through row 1
        mask[1] = rng.random(n) < 0.6
        mask[1, 0] = True
    return q, k, v, jnp.asarray(mask)


@pytest.mark.parametrize("n", [9, 65, 257, *(pytest.param(n, marks=pytest.mark.slow) for n in (2001, 4001, 4097))])
@pytest.mark.parametrize("prefix", [True, False])
def test_cudnn_args_at_suite_lengths_equal_xla_outputs_and_gradients(n, prefix):
    q, k, v, mask = _suite_case(n, prefix)
    args = jax.eval_shape(partial(softmax_module.cudnn_args, assume_prefix_mask=prefix), q, k, v, mask)
    for name in ("query", "key", "value"):  # what cuDNN's training path accepts
        assert args[name].shape[1] % softmax_module.CUDNN_LENGTH_MULTIPLE == 0
        assert args[name].shape[1] - n < softmax_module.CUDNN_LENGTH_MULTIPLE
    assert args["key_value_seq_lengths"].dtype == jnp.int32 and args["key_value_seq_lengths"].shape == (2,)
    cot = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)
    keep = np.asarray(mask)[:, :, None, None]  # the module zeroes padded queries' outputs

    def loss(fn):
        return lambda q, k, v: jnp.sum(jnp.where(keep, fn(q, k, v) * cot, 0.0))

    ours = loss(lambda q, k, v: dot_product_attention(q, k, v, mask))
    theirs = loss(
        lambda q, k, v: softmax_module.fused_attention(q, k, v, mask, implementation="xla", assume_prefix_mask=prefix)
    )

    @jax.jit  # one program: both forwards and both gradients
    def run(q, k, v):
        y_ours = dot_product_attention(q, k, v, mask)
        y_theirs = softmax_module.fused_attention(q, k, v, mask, implementation="xla", assume_prefix_mask=prefix)
        grad = partial(jax.grad, argnums=(0, 1, 2))
        return y_ours, y_theirs, grad(ours)(q, k, v), grad(theirs)(q, k, v)

    y_ours, y_theirs, g_ours, g_theirs = run(q, k, v)
    assert y_theirs.shape == y_ours.shape
    np.testing.assert_allclose(np.asarray(y_theirs), np.asarray(y_ours), atol=2e-5, rtol=0)
    for a, b in zip(g_theirs, g_ours, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=0)
    # padded and masked keys get no gradient
    for g in g_theirs[1:]:
        np.testing.assert_array_equal(np.asarray(g)[~np.asarray(mask)], 0.0)


def test_cudnn_args_bf16_at_an_odd_suite_length():
    q, k, v, mask = _suite_case(2001, True, jnp.bfloat16)

    @jax.jit
    def both(q, k, v, mask):
        return dot_product_attention(q, k, v, mask), softmax_module.fused_attention(q, k, v, mask, implementation="xla")

    ours, theirs = both(q, k, v, mask)
    ours = np.asarray(ours, np.float32)
    assert theirs.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(theirs, np.float32), ours, atol=3e-2, rtol=0)


def test_assumed_prefix_mask_is_checked_not_trusted():
    # A mask that is not a prefix under assume_prefix_mask=True: that row's outputs are NaN (the
    # run's non-finite check stops it), the prefix rows are exact.
    q, k, v, mask = _suite_case(33, prefix=False)
    # every prefix form: full, partial, a lone [CLS], none at all (count 0 counted as 1)
    masks = jnp.asarray(np.arange(6)[None, :] < np.array([6, 3, 1, 0])[:, None])

    @jax.jit
    def run(q, k, v, mask, masks):
        fused = partial(softmax_module.fused_attention, q, k, v, mask, implementation="xla")
        return (
            softmax_module.is_prefix_mask(mask),
            fused(),
            dot_product_attention(q, k, v, mask),
            fused(assume_prefix_mask=False),
            jnp.all(softmax_module.is_prefix_mask(masks)),
        )

    is_prefix, y, ours, exact, all_prefix = run(q, k, v, mask, masks)
    np.testing.assert_array_equal(np.asarray(is_prefix), [True, False])
    y = np.asarray(y)
    assert np.isnan(y[1]).all()
    np.testing.assert_allclose(y[0], np.asarray(ours)[0], atol=2e-5)
    assert np.isfinite(np.asarray(exact)).all()
    assert bool(all_prefix)


def test_auto_chooses_cudnn_only_where_it_applies():
    choose = softmax_module.choose_implementation
    assert choose("auto", jnp.bfloat16, 0.0, 32, on_gpu=True) == "cudnn"
    assert choose("auto", jnp.float16, 0.0, 8, on_gpu=True) == "cudnn"
    assert choose("auto", jnp.float32, 0.0, 32, on_gpu=True) == "xla"  # no float32 kernel
    assert choose("auto", jnp.bfloat16, 0.1, 32, on_gpu=True) == "xla"  # the paper's rows: attention dropout
    assert choose("auto", jnp.bfloat16, 0.0, 12, on_gpu=True) == "xla"  # head size not a multiple of 8
    assert choose("auto", jnp.bfloat16, 0.0, 256, on_gpu=True) == "xla"
    assert choose("auto", jnp.bfloat16, 0.0, 32, on_gpu=False) == "xla"
    assert choose("xla", jnp.bfloat16, 0.0, 32, on_gpu=True) == "xla"
    assert choose("cudnn", jnp.float32, 0.1, 12, on_gpu=False) == "cudnn"  # explicit: the module refuses it
    if jax.default_backend() == "cpu":
        assert choose("auto", jnp.bfloat16, 0.0, 32) == "xla"


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_auto_on_cpu_is_the_xla_path_bit_for_bit(dtype):
    # The default ("auto") must not move a CPU number: identical to implementation="xla".
    x, mask = _inputs(lengths=(5, 9))
    auto = attention.get("softmax")(num_heads=2, qkv_dim=16, dtype=dtype)
    assert auto.implementation == "auto"
    xla = attention.get("softmax")(num_heads=2, qkv_dim=16, dtype=dtype, implementation="xla")
    v = xla.init(jax.random.key(0), x, mask)
    np.testing.assert_array_equal(np.asarray(auto.apply(v, x, mask)[0]), np.asarray(xla.apply(v, x, mask)[0]))
