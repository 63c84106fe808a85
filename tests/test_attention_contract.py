"""The attention contract (docs/design.md, "The attention contract"), one test per registered family.

Parametrized over ``lra.attention.FAMILIES``, so a family registered later is checked with no edit
here: each family, built as its configs build it (``Family.kwargs``) at tiny sizes, must

* return B x N x D outputs (and a memory of the memory's own shape, or None);
* leave the outputs (and the memory) at real positions unchanged when padded tokens change or
  padding is added (``attention_checks.assert_padding_invariant``);
* build no N x N array, forward or backward (``attention_checks.assert_no_quadratic``; the
  Transformer baseline is registered ``quadratic`` and must build one);
* compile under ``jax.jit``, forward (the checks above) and backward: finite, non-zero gradients;
* run in bfloat16 (``dtype=bfloat16``: bfloat16 outputs, finite, close to float32 on the same weights).

What is specific to a family (its paper's equations, its options' variants, its dropout) stays in
that family's own tests/test_<family>.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_checks import (
    assert_gradients_finite,
    assert_no_quadratic,
    assert_padding_invariant,
    largest_intermediate,
    random_inputs,
)
from lra import attention

HEADS, QKV, DIM = 2, 16, 16
MEMORY_CELLS = 3
NO_QUADRATIC_N = 2048  # much larger than every other dimension: an N x N array shows as >= N^2/4 elements


def _families() -> list[str]:
    return list(attention.FAMILIES)


def build(name: str, **fields) -> attention.Attention:
    """Family ``name`` as its configs build it (registered kwargs), at the contract's tiny sizes."""
    family = attention.family(name)
    return family.module(num_heads=HEADS, qkv_dim=QKV, **{**family.kwargs, **fields})


def _memory(name: str) -> jax.Array | None:
    return jnp.ones((2, MEMORY_CELLS, DIM)) if attention.family(name).uses_memory else None


_INPUTS = random_inputs(2, 10, DIM, (6, 10), seed=1)


@functools.lru_cache(maxsize=1)
def _setup(name: str) -> tuple[attention.Attention, object, object]:
    """The float32 module, its parameters and its compiled apply, shared by the checks of one family
    (pytest runs them one after another): each compilation of a family's program is done once."""
    module = build(name)
    x, mask = _INPUTS
    return module, jax.jit(module.init)(jax.random.key(0), x, mask, memory=_memory(name)), jax.jit(module.apply)


def _apply(apply, variables, x, mask, memory=None):
    return apply(variables, x, mask, memory=memory, rngs={"attention": jax.random.key(5)})


def check_shapes(name: str) -> None:
    (_, variables, apply), (x, mask), memory = _setup(name), _INPUTS, _memory(name)
    y, mem = _apply(apply, variables, x, mask, memory)
    assert y.shape == x.shape and y.dtype == jnp.float32, f"{name}: output {y.shape} {y.dtype} for input {x.shape}"
    if memory is None:
        assert mem is None, f"{name} is no memory family (uses_memory False) but returned a memory"
    else:
        assert mem is not None and mem.shape == memory.shape, f"{name}: memory {getattr(mem, 'shape', None)}"
    assert np.isfinite(np.asarray(y)).all()


def check_padding(name: str) -> None:
    module, variables, apply = _setup(name)
    memory_cells = MEMORY_CELLS if attention.family(name).uses_memory else 0
    assert_padding_invariant(
        module,
        atol=1e-4,
        batch=2,
        n=10,
        dim=DIM,
        lengths=(6, 10),
        extra_padding=5,
        memory_cells=memory_cells,
        variables=variables,
        apply=apply,
    )


CPU_BRANCH = {"dispersed": "chunks", "clustered": "cpu", "improved_clustered": "cpu"}  # "auto" on a CPU


def check_no_quadratic(name: str) -> None:
    module, memory = build(name), attention.family(name).uses_memory
    if name in CPU_BRANCH and getattr(module, "implementation", None) == "auto":
        # The jaxpr of "auto" holds every platform's branch; this checks the CPU one. The accelerator
        # branches hold arrays linear in N but large in other sizes (dispersed's N^1.5 gathered rows,
        # improved clustered's N x topk x D per-query keys), which this check's premise (N much larger
        # than every other size) does not cover: tests/test_dispersed.py and
        # tests/test_clustered_accelerator.py check them at sizes where it holds.
        module = build(name, implementation=CPU_BRANCH[name])
    if attention.family(name).quadratic:  # the baseline: the check must see its N x N scores
        assert largest_intermediate(module, NO_QUADRATIC_N, dim=DIM) >= NO_QUADRATIC_N**2
    else:
        assert_no_quadratic(module, n=NO_QUADRATIC_N, dim=DIM, with_memory=memory)


def check_jit(name: str) -> None:
    module, variables, _ = _setup(name)  # the forward is compiled by check_shapes; here the backward
    assert_gradients_finite(module, variables, *_INPUTS, memory=_memory(name))


def check_bfloat16(name: str) -> None:
    (_, variables, apply), (x, mask) = _setup(name), _INPUTS
    y32, _ = _apply(apply, variables, x, mask, _memory(name))
    y16, _ = _apply(jax.jit(build(name, dtype=jnp.bfloat16).apply), variables, x, mask, _memory(name))
    assert y16.dtype == jnp.bfloat16, f"{name}: dtype=bfloat16 gave {y16.dtype} outputs"
    real = np.asarray(mask)[..., None]
    y16 = np.asarray(y16, np.float32) * real
    assert np.isfinite(y16).all()
    np.testing.assert_allclose(y16, np.asarray(y32) * real, atol=0.1, err_msg=f"{name}: bfloat16 far from float32")


CHECKS = {
    "shapes": check_shapes,
    "padding": check_padding,
    "no_quadratic": check_no_quadratic,
    "jit": check_jit,
    "bfloat16": check_bfloat16,
}


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("name", _families())
def test_family_keeps_the_attention_contract(name, check):
    CHECKS[check](name)


class _Leaky(attention.Attention):
    """Mean over every position, padding included: breaks the padding contract (test-only)."""

    def __call__(self, x, mask, memory=None, deterministic=True):
        del mask, memory, deterministic
        return jnp.broadcast_to(x.mean(axis=1, keepdims=True), x.shape), None


class _Quadratic(attention.Attention):
    """Masked full attention with no projections: an N x N array (test-only)."""

    def __call__(self, x, mask, memory=None, deterministic=True):
        del memory, deterministic
        scores = jnp.where(mask[:, None, :], jnp.einsum("bnd,bmd->bnm", x, x), -1e9)
        return jnp.einsum("bnm,bmd->bnd", jax.nn.softmax(scores, axis=-1), x), None


@pytest.mark.parametrize("cls, check", [(_Leaky, "padding"), (_Quadratic, "no_quadratic")])
def test_the_contract_fails_a_family_that_breaks_it(cls, check):
    attention.register(attention.Family("contract_breaker", cls, "Breaker"))
    try:
        with pytest.raises(AssertionError):
            CHECKS[check]("contract_breaker")
    finally:
        attention.unregister("contract_breaker")
