"""Cheap linear and gated linear attention: reference sums, padding, causality, fast lookups, memory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_checks import (
    assert_jit_matches_and_gradients_finite,
    assert_no_quadratic,
    assert_padding_invariant,
    perturb_params,
    random_inputs,
)
from lra import attention
from lra.attention.linear import GatedLinearAttention, LinearAttention

B, N, D, H, QKV = 2, 10, 6, 2, 8
LENGTHS = (7, 10)

VARIANTS = {
    "linear": dict(cls=LinearAttention),
    "linear_sum": dict(cls=LinearAttention, normalize=False),
    "linear_chunked": dict(cls=LinearAttention, chunk_size=4),  # N = 10: the last chunk is padded
    "linear_causal": dict(cls=LinearAttention, causal=True, chunk_size=4),
    "gated": dict(cls=GatedLinearAttention),
    "gated_causal": dict(cls=GatedLinearAttention, causal=True, chunk_size=3),
    "gated_key": dict(cls=GatedLinearAttention, gate_on="key"),
    "linear_tied": dict(cls=LinearAttention, tie_kv=True),
    "gated_tied_causal": dict(cls=GatedLinearAttention, tie_kv=True, causal=True, chunk_size=3),
}


def make(variant: str, **overrides) -> LinearAttention:
    kwargs = {**VARIANTS[variant], **overrides}
    cls = kwargs.pop("cls")
    return cls(num_heads=H, qkv_dim=QKV, **kwargs)


def inputs(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    return random_inputs(B, N, D, LENGTHS, seed)


def reference(module: LinearAttention, variables, x, mask) -> np.ndarray:
    """The explicit sum over tokens: out_i = sum_{t real (t <= i)} (g q_i . g k_t) g v_t / count."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
    x, mask = np.asarray(x, np.float64), np.asarray(mask)

    def proj(name: str) -> np.ndarray:
        return np.einsum("bnd,dhk->bnhk", x, p[name]["kernel"]) + p[name]["bias"]

    q, k = proj("query"), proj("key")
    v = k if module.tie_kv else proj("value")
    if isinstance(module, GatedLinearAttention):
        g = 1.0 / (1.0 + np.exp(-proj("gate")))
        k = k * g if module.gate_on in ("both", "key") else k
        v = v * g if module.gate_on in ("both", "value") else v
    out = np.zeros_like(q)
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            ts = [t for t in range(x.shape[1]) if mask[b, t] and (t <= i or not module.causal)]
            for t in ts:
                out[b, i] += np.einsum("hk,hk->h", q[b, i], k[b, t])[:, None] * v[b, t]
            if module.normalize:
                out[b, i] /= max(len(ts), 1)
    y = np.einsum("bnhk,hkd->bnd", out, p["out"]["kernel"]) + p["out"]["bias"]
    return y * mask[..., None]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_explicit_sum_over_tokens(variant):
    module = make(variant)
    x, mask = inputs()
    variables = perturb_params(module.init(jax.random.key(1), x, mask))
    y, memory = module.apply(variables, x, mask)
    assert memory is None and y.shape == (B, N, D)
    np.testing.assert_allclose(
        np.asarray(y) * np.asarray(mask)[..., None],
        reference(module, variables, x, mask),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("variant", ["linear", "linear_chunked", "gated_causal", "linear_tied", "gated_tied_causal"])
def test_padding_invariant(variant):
    assert_padding_invariant(make(variant), atol=1e-4)


@pytest.mark.parametrize("variant", ["linear", "gated_causal"])
def test_jit_matches_no_jit_and_gradients_finite(variant):
    module = make(variant)
    x, mask = inputs()
    assert_jit_matches_and_gradients_finite(module, x, mask)


@pytest.mark.parametrize("variant", ["linear_causal", "gated_causal"])
def test_causal_outputs_ignore_the_future(variant):
    module = make(variant)
    x, mask = inputs()
    mask = jnp.ones_like(mask)
    variables = module.init(jax.random.key(1), x, mask)
    y = np.asarray(module.apply(variables, x, mask)[0])
    for i in (1, 4, 7):
        changed = np.array(x)  # numpy edits and indexing: no eager XLA program per slice
        changed[:, i:] = np.random.default_rng(i).normal(size=changed[:, i:].shape).astype(np.float32)
        y2 = np.asarray(module.apply(variables, changed, mask)[0])
        np.testing.assert_allclose(y2[:, :i], y[:, :i], atol=1e-5)
        assert not np.allclose(y2[:, i], y[:, i], atol=1e-3)  # position i does see itself


@pytest.mark.parametrize("variant", ["linear", "gated", "linear_sum", "linear_chunked", "linear_tied"])
def test_lookup_of_encoded_document_equals_forward(variant):
    module = make(variant)
    x, mask = inputs()
    variables = perturb_params(module.init(jax.random.key(1), x, mask))
    summary = module.apply(variables, x, mask, method="encode")
    assert summary.shape == (B, H, QKV // H, QKV // H)  # fixed size, whatever the length
    y_lookup = module.apply(variables, summary, x, method=LinearAttention.lookup)
    y, _ = module.apply(variables, x, mask)
    real = np.asarray(mask)[..., None]
    np.testing.assert_allclose(np.asarray(y_lookup) * real, np.asarray(y) * real, rtol=1e-5, atol=1e-5)
    # Many queries against one summary: a lookup is independent of the document length.
    queries = jnp.asarray(np.random.default_rng(5).normal(size=(B, 3, D)), jnp.float32)
    assert module.apply(variables, summary, queries, method="lookup").shape == (B, 3, D)


def test_causal_encode_is_the_final_running_summary():
    module = make("linear_causal")
    x, mask = inputs()
    variables = module.init(jax.random.key(1), x, mask)
    full = make("linear")
    np.testing.assert_allclose(
        module.apply(variables, x, mask, method="encode"),
        full.apply(variables, x, mask, method="encode"),
        rtol=1e-5,
        atol=1e-7,  # summation order
    )
    # The last real position of a causal pass reads exactly that final summary.
    y = np.asarray(module.apply(variables, x, mask)[0])
    y_full = np.asarray(full.apply(variables, x, mask)[0])
    np.testing.assert_allclose(y[0, LENGTHS[0] - 1], y_full[0, LENGTHS[0] - 1], rtol=1e-5, atol=1e-5)


def test_normalize_makes_output_scale_length_independent():
    module, summed = make("linear"), make("linear_sum")
    x = np.tile(np.random.default_rng(0).normal(size=(1, 4, D)).astype(np.float32), (1, 8, 1))
    short, long_ = x[:, :4], x
    variables = module.init(jax.random.key(1), *inputs())
    s = module.apply(variables, short, np.ones((1, 4), bool), method="encode")
    lo = module.apply(variables, long_, np.ones((1, 32), bool), method="encode")
    np.testing.assert_allclose(s, lo, rtol=1e-5, atol=1e-6)  # same mean
    s = summed.apply(variables, short, np.ones((1, 4), bool), method="encode")
    lo = summed.apply(variables, long_, np.ones((1, 32), bool), method="encode")
    np.testing.assert_allclose(lo, 8 * s, rtol=1e-5, atol=1e-5)  # the plain sum grows


@pytest.mark.parametrize("cls", [LinearAttention, GatedLinearAttention])
def test_tie_kv_creates_no_value_projection(cls):
    x, mask = inputs()
    tied = jax.eval_shape(cls(num_heads=H, qkv_dim=QKV, tie_kv=True).init, jax.random.key(1), x, mask)["params"]
    untied = jax.eval_shape(cls(num_heads=H, qkv_dim=QKV).init, jax.random.key(1), x, mask)["params"]
    assert "value" not in tied and set(untied) - set(tied) == {"value"}


def test_tie_kv_without_normalize_is_the_papers_symmetric_summary():
    """One head, tie_kv, plain sum: C = sum_t h_t h_t^T over real tokens (h = key projection),
    out_i = C q_i, then the out projection -- the paper's R = C q written with numpy matrices."""
    module = LinearAttention(num_heads=1, qkv_dim=QKV, tie_kv=True, normalize=False)
    x, mask = inputs()
    variables = perturb_params(module.init(jax.random.key(1), x, mask))
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
    xs, m = np.asarray(x, np.float64), np.asarray(mask)
    y = np.asarray(module.apply(variables, x, mask)[0])
    summary = np.asarray(module.apply(variables, x, mask, method="encode"))
    for b in range(B):
        h = xs[b] @ p["key"]["kernel"][:, 0] + p["key"]["bias"][0]  # N x Dh
        q = xs[b] @ p["query"]["kernel"][:, 0] + p["query"]["bias"][0]
        c = sum(np.outer(h[t], h[t]) for t in range(N) if m[b, t])
        np.testing.assert_allclose(summary[b, 0], c, rtol=1e-5, atol=1e-5)
        expected = (q @ c) @ p["out"]["kernel"][0] + p["out"]["bias"]  # C symmetric: q^T C = (C q)^T
        np.testing.assert_allclose(np.asarray(y[b])[m[b]], expected[m[b]], rtol=1e-4, atol=1e-4)
    # The option string the docs name selects exactly this module.
    from lra.defaults import make_config

    kwargs = make_config("listops", "linear", "smoke,tie_kv=true,normalize=false").model.attention_kwargs
    assert (kwargs["tie_kv"], kwargs["normalize"]) == (True, False)


def test_gate_starts_open_and_validates_its_side():
    module = make("gated")
    x, mask = inputs()
    params = module.init(jax.random.key(1), x, mask)["params"]
    np.testing.assert_array_equal(params["gate"]["kernel"], 0.0)
    np.testing.assert_array_equal(params["gate"]["bias"], 1.0)
    with pytest.raises(ValueError, match="gate_on"):  # at construction, before anything compiles
        make("gated", gate_on="query")


def test_dropout_drops_token_contributions_only_when_training():
    module = make("gated", dropout_rate=0.5)
    x, mask = inputs()
    assert_jit_matches_and_gradients_finite(module, x, mask)


@pytest.mark.parametrize(
    "module",
    [
        LinearAttention(num_heads=2, qkv_dim=16, causal=True),
        GatedLinearAttention(num_heads=2, qkv_dim=16, causal=True),
        LinearAttention(num_heads=2, qkv_dim=16, tie_kv=True),
        GatedLinearAttention(num_heads=2, qkv_dim=16, causal=True, tie_kv=True),
    ],  # the registered defaults: tests/test_attention_contract.py
    ids=["linear_causal", "gated_causal", "linear_tied", "gated_tied_causal"],
)
def test_no_quadratic_intermediate(module):
    assert_no_quadratic(module, n=4096)  # the Dh x Dh summaries are fine, N x N is not


@pytest.mark.parametrize("name", ["linear", "gated_linear"])
def test_registry_and_configs(name):
    module = attention.get(name)(num_heads=4, qkv_dim=64)
    x, mask = jnp.ones((1, 5, D)), jnp.ones((1, 5), bool)
    y, _ = module.apply(module.init(jax.random.key(0), x, mask), x, mask)
    assert y.shape == (1, 5, D)
    label = {"linear": "Linear", "gated_linear": "Gated Linear"}[name]
    for task in ("listops", "text", "matching", "image"):
        path = Path(__file__).parent.parent / "configs" / f"{task}_{name}.py"
        spec = importlib.util.spec_from_file_location(f"cfg_{task}_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for preset in ("smoke", "cpu"):
            config = mod.get_config(preset)
            assert (config.task, config.model.attention, config.variant) == (task, name, label)
            assert config.model.norm == "pre" and config.model.pooling == "cls"
