"""Agglomerative attention: the paper's formula, padding, causality, empty classes, memory."""

from __future__ import annotations

import functools
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
from lra.attention.agglomerative import AgglomerativeAttention

B, N, D, H, QKV = 2, 9, 6, 2, 8
LENGTHS = (6, 9)


def inputs(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    return random_inputs(B, N, D, LENGTHS, seed)


# One program per module and shapes (eager Flax compiles every primitive on its own); modules are hashable.
@functools.partial(jax.jit, static_argnums=0)
def init(module: AgglomerativeAttention, key: jax.Array, x: jax.Array, mask: jax.Array):
    return module.init(key, x, mask)


@functools.partial(jax.jit, static_argnums=0)
def apply(module: AgglomerativeAttention, variables, x: jax.Array, mask: jax.Array, **kwargs):
    return module.apply(variables, x, mask, **kwargs)


@functools.partial(jax.jit, static_argnums=0)
def grad_of_sum(module: AgglomerativeAttention, params, x: jax.Array, mask: jax.Array):
    return jax.grad(lambda p: jnp.sum(module.apply({"params": p}, x, mask)[0]))(params)


def reference(module: AgglomerativeAttention, variables, x, mask) -> np.ndarray:
    """The paper's equations, element by element (float64 loops)."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
    x, mask = np.asarray(x, np.float64), np.asarray(mask)
    m = module.num_classes or module.num_heads

    def softmax_classes(name: str) -> np.ndarray:
        logits = x @ p[name]["kernel"] + p[name]["bias"]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    c_r, c_q = softmax_classes("key_classes"), softmax_classes("query_classes")
    y = np.zeros((x.shape[0], x.shape[1], x.shape[2]))
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            if not mask[b, i]:
                continue
            parts = []
            for k in range(m):
                taus = [t for t in range(x.shape[1]) if mask[b, t] and (t <= i or not module.causal)]
                n_ik = sum(c_r[b, t, k] for t in taus)
                xp = [x[b, t] @ p["value"]["kernel"][:, k] + p["value"]["bias"][k] for t in taus]
                a_ik = sum(c_r[b, t, k] * xp_t for t, xp_t in zip(taus, xp, strict=False)) / n_ik
                parts.append(c_q[b, i, k] * a_ik)
            p_i = np.stack(parts)  # classes x (qkv_dim / m): the concatenation
            y[b, i] = np.einsum("kc,kcd->d", p_i, p["out"]["kernel"]) + p["out"]["bias"]
    return y


@pytest.mark.parametrize("chunk_size", [64, 4])  # 4: N = 9 splits into 3 chunks, the last padded
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("num_classes", [None, 4])
def test_matches_the_papers_equations(causal, num_classes, chunk_size):
    module = AgglomerativeAttention(
        num_heads=H, qkv_dim=QKV, num_classes=num_classes, causal=causal, chunk_size=chunk_size
    )
    x, mask = inputs()
    variables = perturb_params(jax.tree.map(np.asarray, init(module, jax.random.key(1), x, mask)))
    m = num_classes or H
    assert variables["params"]["value"]["kernel"].shape == (D, m, QKV // m)
    assert variables["params"]["key_classes"]["kernel"].shape == (D, m)
    y, memory = apply(module, variables, x, mask)
    assert memory is None and y.shape == (B, N, D)
    np.testing.assert_allclose(
        np.asarray(y) * np.asarray(mask)[..., None],
        reference(module, variables, x, mask),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("chunk_size", [64, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_padding_invariant(causal, chunk_size):
    module = AgglomerativeAttention(num_heads=H, qkv_dim=QKV, causal=causal, chunk_size=chunk_size)
    # padding_invariance_outputs' defaults: parameters drawn at its longer shape (2 x 17 x 16; the values do not
    # enter the parameters), under jit
    longer_mask = np.arange(17)[None, :] < np.array([[7], [12]])
    variables = init(module, jax.random.key(0), np.zeros((2, 17, 16), np.float32), longer_mask)
    assert_padding_invariant(module, atol=1e-4, variables=variables, apply=functools.partial(apply, module))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_jit_matches_no_jit_and_gradients_finite(causal):
    module = AgglomerativeAttention(num_heads=H, qkv_dim=QKV, causal=causal)
    x, mask = inputs()
    assert_jit_matches_and_gradients_finite(module, x, mask, every_weight_used=True)


def test_causal_outputs_ignore_the_future():
    module = AgglomerativeAttention(num_heads=H, qkv_dim=QKV, causal=True)
    x, _ = inputs()
    mask = jnp.ones((B, N), bool)
    variables = init(module, jax.random.key(1), x, mask)
    y = np.asarray(apply(module, variables, x, mask)[0])
    for i in (1, 4, 7):
        x2 = np.array(x)
        x2[:, i:] = np.random.default_rng(i).normal(size=x2[:, i:].shape).astype(np.float32)
        y2 = np.asarray(apply(module, variables, x2, mask)[0])
        np.testing.assert_allclose(y2[:, :i], y[:, :i], atol=1e-5)
        assert not np.allclose(y2[:, i], y[:, i], atol=1e-3)  # position i does see itself


def test_full_mode_sees_the_whole_sequence():
    module = AgglomerativeAttention(num_heads=H, qkv_dim=QKV)
    x, _ = inputs()
    mask = jnp.ones((B, N), bool)
    variables = init(module, jax.random.key(1), x, mask)
    y = np.asarray(apply(module, variables, x, mask)[0])
    x2 = np.array(x)
    x2[:, -1] += 1.0
    y2 = np.asarray(apply(module, variables, x2, mask)[0])
    assert not np.allclose(y2[:, 0], y[:, 0], atol=1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_empty_class_and_empty_sequence_stay_finite(causal):
    module = AgglomerativeAttention(num_heads=H, qkv_dim=QKV, causal=causal)
    x, mask = inputs()
    variables = init(module, jax.random.key(1), x, mask)
    # Class 0 gets (numerically) no reference mass at all: exp(-200) underflows to 0 in float32.
    params = jax.tree.map(lambda a: a, variables["params"])
    params["key_classes"]["bias"] = np.array([-200.0, 0.0], np.float32)
    params["key_classes"]["kernel"] = np.zeros_like(params["key_classes"]["kernel"])
    empty = np.zeros((B, N), bool)
    empty[0, 0] = True  # row 1: no real token at all
    for m in (mask, empty):
        y, _ = apply(module, {"params": params}, x, m)
        grads = grad_of_sum(module, params, x, m)
        assert bool(np.all(np.isfinite(y)))
        assert all(bool(np.all(np.isfinite(g))) for g in jax.tree.leaves(grads))


def test_invalid_number_of_classes_is_a_clear_error():
    x, mask = inputs()
    with pytest.raises(ValueError, match="num_classes"):
        AgglomerativeAttention(num_heads=H, qkv_dim=QKV, num_classes=3).init(jax.random.key(0), x, mask)


def test_dropout_only_when_training():
    module = AgglomerativeAttention(num_heads=H, qkv_dim=QKV, dropout_rate=0.5)
    x, mask = inputs()
    assert_jit_matches_and_gradients_finite(module, x, mask, every_weight_used=True)


def test_no_quadratic_intermediate_causal():  # the registered default (full): tests/test_attention_contract.py
    assert_no_quadratic(AgglomerativeAttention(num_heads=2, qkv_dim=16, causal=True), n=4096)


def test_registry_and_configs():
    module = attention.get("agglomerative")(num_heads=4, qkv_dim=64)
    x, mask = np.ones((1, 5, D), np.float32), np.ones((1, 5), bool)
    y, _ = jax.jit(lambda x, mask: module.apply(module.init(jax.random.key(0), x, mask), x, mask))(x, mask)
    assert y.shape == (1, 5, D)
    for task in ("listops", "text", "matching", "image"):
        path = Path(__file__).parent.parent / "configs" / f"{task}_agglomerative.py"
        spec = importlib.util.spec_from_file_location(f"cfg_{task}_agglomerative", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for preset in ("smoke", "cpu"):
            config = mod.get_config(preset)
            expected = (task, "agglomerative", "Agglomerative")
            assert (config.task, config.model.attention, config.variant) == expected
            assert config.model.norm == "pre" and config.model.pooling == "cls"
        assert mod.get_config("smoke,classes=4").model.attention_kwargs.num_classes == 4
