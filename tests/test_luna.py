"""Luna / ConvLuna: a numpy reference of Appendices B-C, padding, linear memory, configs."""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_checks import assert_no_quadratic, assert_padding_invariant
from lra import attention
from lra.attention.luna import ConvLunaAttention, LunaAttention
from lra.errors import InputError

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
TASKS = ("listops", "text", "matching", "image")

# (class, options) pairs covering both families, both filters, stride 1 and 2, and a kernel
# longer than the test sequences.
VARIANTS = [
    (LunaAttention, {}),
    (LunaAttention, dict(share_projections=True, share_kv=True)),
    (ConvLunaAttention, dict(filter="maxpool", kernel_size=4, stride=1)),
    (ConvLunaAttention, dict(filter="maxpool", kernel_size=3, stride=2)),
    (ConvLunaAttention, dict(filter="conv", kernel_size=4, stride=1)),
    (ConvLunaAttention, dict(filter="conv", kernel_size=5, stride=2, share_projections=False, share_kv=False)),
    (ConvLunaAttention, dict(filter="conv", kernel_size=32, stride=1)),
    # the published code's choices (:reference): 'valid' windows, W^Q/W^K/W^O sharing, unscaled unpacking
    (
        ConvLunaAttention,
        dict(
            filter="maxpool",
            kernel_size=4,
            stride=1,
            filter_padding="valid",
            share_projections="qko",
            scale_unpacking=False,
        ),
    ),
    (ConvLunaAttention, dict(share_projections="q")),
    (ConvLunaAttention, dict(filter="conv", kernel_size=3, stride=2, filter_padding="valid")),
    (ConvLunaAttention, dict(filter="maxpool", kernel_size=12, stride=1, filter_padding="valid")),
    (LunaAttention, dict(share_projections="ko")),
]
IDS = [f"{cls.__name__}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for cls, kw in VARIANTS]


# ----------------------------------------------------------------------------- numpy reference


def _np_filter(x, mask, kind, k, s, w, padding="same"):
    """Appendix C's FilterOp with our window rules, written window by window: 'same' windows are
    centred on token j*s (real iff that token is); 'valid' windows are [j*s, j*s + k) (real iff
    all their tokens are, positions past the end counting as padding)."""
    b, n = mask.shape
    left = (k - 1) // 2 if padding == "same" else 0
    nw = -(-n // s) if padding == "same" else (max(n, k) - k) // s + 1
    y, m = np.zeros((b, nw) + x.shape[2:]), np.zeros((b, nw), bool)
    for bi in range(b):
        for j in range(nw):
            start = j * s - left
            real = lambda p, bi=bi: 0 <= p < n and mask[bi, p]  # noqa: E731
            m[bi, j] = real(j * s) if padding == "same" else all(real(start + t) for t in range(k))
            taps = [(t, start + t) for t in range(k) if real(start + t)]
            if not m[bi, j]:
                continue
            if kind == "maxpool":
                y[bi, j] = np.max([x[bi, p] for _, p in taps], axis=0)
            else:
                y[bi, j] = sum(w[t][:, None] * x[bi, p] for t, p in taps)
    return y, m


def _np_mha(layers, xq, xkv, kv_mask, scale, filt=None):
    """MultiHeadAttention(Xq, Xkv, Xkv) of Appendix B; W^V = I when ``layers`` has no value."""
    proj = lambda name, x: np.einsum("bnd,dhk->bnhk", x, layers[name]["kernel"]) + layers[name]["bias"]  # noqa: E731
    q, k = proj("query", xq), proj("key", xkv)
    v = proj("value", xkv) if "value" in layers else xkv.reshape(k.shape)
    if filt is not None:
        (k, _), (v, kv_mask) = filt(k, kv_mask), filt(v, kv_mask)
    logits = np.einsum("bqhk,bmhk->bhqm", q, k) * scale
    logits = np.where(kv_mask[:, None, None, :], logits, -np.inf)
    top = logits.max(-1, keepdims=True)
    w = np.exp(logits - np.where(np.isfinite(top), top, 0.0))
    total = w.sum(-1, keepdims=True)  # 0 when no key is real (a 'valid' kernel longer than the input):
    y = np.einsum("bhqm,bmhk->bqhk", np.where(total > 0, w / np.maximum(total, 1e-300), 0.0), v)  # nothing read
    return np.einsum("bqhk,hkd->bqd", y, layers["out"]["kernel"]) + layers["out"]["bias"]


def _np_luna(module, params, x, mask, memory):
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    shared = {True: "qkvo", False: ""}.get(module.share_projections, module.share_projections)
    names = dict(q="query", k="key", v="value", o="out")

    def layers(scope):
        return {
            name: p[name] if letter in shared else p[scope][name]
            for letter, name in names.items()
            if name in p or name in p.get(scope, {})
        }

    pack, unpack = layers("pack"), layers("unpack")
    dh = module.qkv_dim // module.num_heads
    if module.learn_temperature:
        scale = 1.0 if module.freeze_temperature else np.exp(-p["log_temperature"])
    else:
        scale = dh**-0.5
    filt = None
    if module.filter != "none":
        w = p.get("filter_kernel")
        filt = lambda a, m: _np_filter(
            a,
            m,
            module.filter,
            module.kernel_size,
            module.stride,
            w,  # noqa: E731
            module.filter_padding,
        )
    packed = _np_mha(pack, memory, x, mask, scale, filt)
    y = _np_mha(unpack, x, packed, np.ones(packed.shape[:2], bool), dh**-0.5 if module.scale_unpacking else 1.0)
    return y, packed


@pytest.mark.parametrize("cls,kw", VARIANTS, ids=IDS)
def test_matches_numpy_reference(cls, kw):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 9, 16))
    mask = np.arange(9)[None] < np.array([[5], [9]])
    memory = rng.normal(size=(2, 3, 16))
    module = cls(num_heads=2, qkv_dim=16, **kw)
    params = module.init(jax.random.key(0), jnp.asarray(x, jnp.float32), mask, memory=jnp.asarray(memory, jnp.float32))
    if module.learn_temperature and not module.freeze_temperature:  # a non-zero tau: exp(-tau)'s direction
        params["params"]["log_temperature"] = jnp.asarray(0.3)
    y, packed = module.apply(params, jnp.asarray(x, jnp.float32), mask, memory=jnp.asarray(memory, jnp.float32))
    y_ref, packed_ref = _np_luna(module, params, x, mask, memory)
    np.testing.assert_allclose(np.asarray(packed), packed_ref, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(y) * mask[..., None], y_ref * mask[..., None], atol=2e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- properties


@pytest.mark.parametrize("cls,kw", VARIANTS, ids=IDS)
def test_padding_invariant(cls, kw):
    """Padded tokens never reach the memory or the real outputs, for every filter and stride."""
    assert_padding_invariant(cls(num_heads=2, qkv_dim=16, **kw), memory_cells=3)


@pytest.mark.parametrize("share", [(False, False), (True, False), (True, True)])
def test_convluna_without_filter_and_temperature_is_luna(share):
    share_projections, share_kv = share
    opts = dict(num_heads=2, qkv_dim=16, share_projections=share_projections, share_kv=share_kv)
    luna = LunaAttention(**opts)
    conv = ConvLunaAttention(filter="none", learn_temperature=False, **opts)
    x = jax.random.normal(jax.random.key(1), (2, 10, 16))
    mask = jnp.arange(10)[None] < jnp.array([[6], [10]])
    memory = jax.random.normal(jax.random.key(2), (2, 4, 16))
    params = luna.init(jax.random.key(0), x, mask, memory=memory)
    assert jax.tree.structure(conv.init(jax.random.key(0), x, mask, memory=memory)) == jax.tree.structure(params)
    for a, b in zip(
        luna.apply(params, x, mask, memory=memory), conv.apply(params, x, mask, memory=memory), strict=False
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "module",
    [
        ConvLunaAttention(num_heads=2, qkv_dim=16, filter="conv", kernel_size=32, stride=2),
    ],  # Luna and ConvLuna as registered: tests/test_attention_contract.py
    ids=["convluna-conv32-s2"],
)
def test_linear_memory(module):
    assert_no_quadratic(module, n=4096, with_memory=True)


def test_share_kv_needs_qkv_dim_equal_to_width():
    x, mask = jnp.ones((1, 8, 16)), jnp.ones((1, 8), bool)
    with pytest.raises(ValueError, match=r"share_kv.*qkv_dim \(32\).*D \(16\)"):
        jax.eval_shape(lambda: ConvLunaAttention(num_heads=2, qkv_dim=32).init(jax.random.key(0), x, mask))
    jax.eval_shape(lambda: LunaAttention(num_heads=2, qkv_dim=32).init(jax.random.key(0), x, mask))  # W^V learned


@pytest.mark.parametrize("kw", [dict(filter="avgpool"), dict(stride=0), dict(kernel_size=0), dict(memory_size=0)])
def test_invalid_options_fail_at_construction(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        ConvLunaAttention(num_heads=2, qkv_dim=16, **kw)


def _inputs(module):
    x = jax.random.normal(jax.random.key(1), (2, 10, 16))
    mask = jnp.arange(10)[None] < jnp.array([[6], [10]])
    memory = jax.random.normal(jax.random.key(2), (2, 4, 16))
    return module.init(jax.random.key(0), x, mask, memory=memory), x, mask, memory


@pytest.mark.parametrize("cls,kw", [VARIANTS[0], VARIANTS[5]], ids=[IDS[0], IDS[5]])
def test_jit_matches_eager(cls, kw):
    module = cls(num_heads=2, qkv_dim=16, **kw)
    params, x, mask, memory = _inputs(module)
    run = lambda p: module.apply(p, x, mask, memory=memory)  # noqa: E731
    for a, b in zip(run(params), jax.jit(run)(params), strict=False):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_dropout_only_when_not_deterministic():
    module = ConvLunaAttention(num_heads=2, qkv_dim=16, dropout_rate=0.2)
    params, x, mask, memory = _inputs(module)

    @jax.jit
    def packed(p, key):
        det = module.apply(p, x, mask, memory=memory)[1]
        drop = module.apply(p, x, mask, memory=memory, deterministic=False, rngs={"dropout": key})[1]
        return det, drop

    det, drop = packed(params, jax.random.key(3))
    assert not np.allclose(np.asarray(det), np.asarray(drop))
    np.testing.assert_array_equal(np.asarray(drop), np.asarray(packed(params, jax.random.key(3))[1]))


def test_standalone_layer_has_its_own_memory():
    module = attention.get("convluna")(num_heads=4, qkv_dim=64)
    x, mask = jnp.ones((2, 8, 64)), jnp.ones((2, 8), bool)
    params = jax.eval_shape(lambda: module.init(jax.random.key(0), x, mask))
    y, packed = jax.eval_shape(module.apply, params, x, mask)
    assert params["params"]["memory"].shape == (16, 64)
    assert y.shape == (2, 8, 64) and packed.shape == (2, 16, 64)


# ----------------------------------------------------------------------------- configs


def _config(task: str, family: str, arg: str | None = None):
    spec = importlib.util.spec_from_file_location(f"{task}_{family}", CONFIGS / f"{task}_{family}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


@pytest.mark.parametrize("task", TASKS)
def test_configs(task):
    luna, conv = _config(task, "luna"), _config(task, "convluna")
    for c in (luna, conv):
        assert (c.model.norm, c.model.pooling, c.preset) == ("post", "memory", "paper")
    assert (luna.model.attention, luna.variant, dict(luna.model.attention_kwargs)) == ("luna", "Luna-16", {})
    expected = dict(filter="conv", kernel_size=32) if task == "listops" else dict(filter="maxpool", kernel_size=4)
    assert dict(conv.model.attention_kwargs) == {**expected, "stride": 1}
    assert (conv.model.attention, conv.variant) == ("convluna", "ConvLuna-16")

    assert _config(task, "luna", "mem=256").variant == "Luna-256"
    c = _config(task, "convluna", "cpu,mem=1")
    assert (c.variant, c.model.attention_kwargs.memory_size, c.preset) == ("ConvLuna-1", 1, "cpu")
    c = _config(task, "convluna", "only_scaling,mem=256")
    assert c.variant == "OnlyScaling-256"
    assert (c.model.attention_kwargs.filter, c.model.attention_kwargs.learn_temperature) == ("none", True)
    c = _config(task, "convluna", "only_filtering")
    assert c.variant == "OnlyFiltering-16"
    assert (c.model.attention_kwargs.filter, c.model.attention_kwargs.learn_temperature) == (expected["filter"], False)
    with pytest.raises(ValueError, match="only_scaling"):
        _config(task, "luna", "only_scaling")


@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_config_modules_build(preset):
    """Every preset's model width suits share_kv (W^V = I) and the module runs on it."""
    for task in TASKS:
        for family in ("luna", "convluna"):
            m = _config(task, family, preset).model
            module = attention.get(m.attention)(num_heads=m.num_heads, qkv_dim=m.qkv_dim, **m.attention_kwargs)
            x = jnp.ones((1, 40, m.emb_dim))
            jax.eval_shape(lambda module=module, x=x: module.init(jax.random.key(0), x, jnp.ones((1, 40), bool)))


def test_encoder_memory_pooling_ignores_padding():
    """End to end: the encoder's memory pooling with ConvLuna (conv, stride 2) sees no padding."""
    from lra.model import build_model

    cfg = _config("listops", "convluna", "smoke").model
    cfg.attention_kwargs.update(kernel_size=5, stride=2)
    model = build_model(cfg, vocab_size=20, num_classes=10, dual=False)
    tokens = np.array([[3, 4, 5, 6, 7, 0, 0, 0], [3, 4, 5, 6, 7, 8, 9, 10]])
    longer = np.concatenate([tokens, np.zeros((2, 5), int)], axis=1)
    params = jax.jit(model.init)(jax.random.key(0), jnp.asarray(longer))
    apply = jax.jit(model.apply)
    logits, logits_longer = apply(params, jnp.asarray(tokens)), apply(params, jnp.asarray(longer))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(logits_longer), atol=1e-5)
    assert "memory" in params["params"]["encoder"]


# ------------------------------------------------------------------ Appendix D/E ablation rows


def test_frozen_temperature_is_the_learned_one_at_its_initial_value_with_no_parameter():
    """freeze_temperature: exp(-tau) at tau = 0, i.e. unscaled packing logits, and nothing to train."""
    x = jax.random.normal(jax.random.key(1), (2, 10, 16))
    mask = jnp.arange(10)[None] < jnp.array([[6], [10]])
    memory = jax.random.normal(jax.random.key(2), (2, 4, 16))
    learned = ConvLunaAttention(num_heads=2, qkv_dim=16)
    frozen = ConvLunaAttention(num_heads=2, qkv_dim=16, freeze_temperature=True)
    params = learned.init(jax.random.key(0), x, mask, memory=memory)
    frozen_params = frozen.init(jax.random.key(0), x, mask, memory=memory)
    assert "log_temperature" in params["params"] and "log_temperature" not in frozen_params["params"]
    y, packed = learned.apply(params, x, mask, memory=memory)  # tau = 0 at initialisation
    y_frozen, packed_frozen = frozen.apply(frozen_params, x, mask, memory=memory)
    np.testing.assert_allclose(np.asarray(packed_frozen), np.asarray(packed), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(y_frozen), np.asarray(y), rtol=1e-6, atol=1e-6)
    params["params"]["log_temperature"] = jnp.asarray(0.5)  # a trained tau moves the learned one only
    assert not np.allclose(np.asarray(learned.apply(params, x, mask, memory=memory)[1]), np.asarray(packed))
    y_ref, packed_ref = _np_luna(
        frozen, frozen_params, np.asarray(x, np.float64), np.asarray(mask), np.asarray(memory, np.float64)
    )
    np.testing.assert_allclose(np.asarray(packed_frozen), packed_ref, atol=2e-4, rtol=1e-4)


def test_frozen_temperature_needs_a_temperature():
    with pytest.raises(InputError, match="needs learn_temperature=True"):
        ConvLunaAttention(num_heads=2, qkv_dim=16, learn_temperature=False, freeze_temperature=True)


@pytest.mark.parametrize(
    "flag, label, kwargs",
    [
        ("fixed_temperature", "FixedTemperature-16 (reference)", dict(freeze_temperature=True, filter="conv")),
        ("maxpool", "MaxPool-16 (reference)", dict(filter="maxpool", kernel_size=4, filter_padding="valid")),
        ("stride2", "ConvLuna-16 stride 2 (reference)", dict(stride=2, filter="conv", filter_padding="valid")),
        ("stride4", "ConvLuna-16 stride 4 (reference)", dict(stride=4, filter="conv", filter_padding="valid")),
    ],
)
def test_appendix_flags_name_one_model_each(flag, label, kwargs):
    """The Appendix D/E rows: one flag, one label; with reference, the published code's windows."""
    c = _config("listops", "convluna", f"cpu,mem=16,{flag},reference")
    assert c.variant == label
    assert {k: c.model.attention_kwargs[k] for k in kwargs} == kwargs
