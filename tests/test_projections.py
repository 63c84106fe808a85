"""The q/k/v projections (lra.attention.base.project_heads): one GEMM each on a CPU, one for all on a GPU or TPU.

The CPU's program must stay the one ``nn.DenseGeneral`` builds (every record was computed by it); the
accelerators' merged GEMM must compute the same function; the parameter tree is the same either way.
"""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.attention import base
from lra.attention.linear import GatedLinearAttention
from lra.attention.softmax import SoftmaxAttention

HEADS, QKV, DIM, N = 2, 16, 12, 9


class _ThreeModules(base.Attention):
    """The projections as they were before the merge: three DenseGeneral modules (test-only)."""

    @nn.compact
    def __call__(self, x):
        return tuple(base.dense_heads(self.num_heads, self.head_dim, n, self.dtype)(x) for n in base.QKV)


class _Projected(base.Attention):
    """project_qkv's self-attention path, as the families call it (test-only)."""

    @nn.compact
    def __call__(self, x):
        return base.project_qkv(self, x)


def _x():
    return jax.random.normal(jax.random.key(0), (2, N, DIM))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cpu_projections_are_densegeneral_op_for_op(dtype):
    # Same parameters, the same program on this CPU: outputs and gradients equal to the bit.
    old, new = _ThreeModules(HEADS, QKV, dtype=dtype), _Projected(HEADS, QKV, dtype=dtype)
    x = _x()
    params = old.init(jax.random.key(1), x)
    new_params = new.init(jax.random.key(1), x)
    assert jax.tree.structure(params) == jax.tree.structure(new_params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(new_params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same initial values: the modules make them

    def loss(module):
        def f(p, x):
            return sum(jnp.sum(jnp.sin(y.astype(jnp.float32) * (i + 1))) for i, y in enumerate(module.apply(p, x)))

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    for a, b in zip(jax.tree.leaves(loss(old)(params, x)), jax.tree.leaves(loss(new)(params, x)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("projections", [3, 4])  # q, k, v (and a gate: gated linear attention)
@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_merged_gemm_equals_one_each(projections, dtype, tol):
    # The accelerators' branch, run here: the same values and gradients as the CPU's.
    keys = jax.random.split(jax.random.key(2), 2 * projections)
    args = [
        jax.random.normal(key, (DIM, HEADS, QKV // HEADS) if i % 2 == 0 else (HEADS, QKV // HEADS))
        for i, key in enumerate(keys)
    ]
    x = _x()

    r = jax.random.normal(jax.random.key(3), (projections, 2, N, HEADS, QKV // HEADS))

    def loss(fn):
        def f(x, *args):
            ys = fn(x, *args, dtype=dtype)
            assert len(ys) == projections
            return sum(jnp.sum(y.astype(jnp.float32) * r[i]) for i, y in enumerate(ys))

        return jax.jit(jax.value_and_grad(f, argnums=tuple(range(1 + len(args)))))

    merged, separate = loss(base._merged)(x, *args), loss(base._separate)(x, *args)
    for a, b in zip(jax.tree.leaves(merged), jax.tree.leaves(separate), strict=True):
        scale = max(1.0, float(np.max(np.abs(np.asarray(b, np.float32)))))
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=tol * scale, rtol=tol)


def _projection_dots(cls: type[base.Attention], platform: str) -> int:
    """dot_generals in ``cls``'s forward + backward lowered for ``platform`` (no device needed)."""
    module = cls(num_heads=HEADS, qkv_dim=QKV)
    x, mask = _x(), jnp.ones((2, N), bool)
    params = jax.eval_shape(module.init, jax.random.key(1), x, mask)  # the program needs shapes only

    def loss(p, x):
        return jnp.sum(module.apply(p, x, mask)[0] ** 2)

    traced = jax.jit(jax.grad(loss, argnums=(0, 1))).trace(params, x)
    return len(re.findall(r"stablehlo\.dot_general", traced.lower(lowering_platforms=(platform,)).as_text()))


@pytest.mark.parametrize("cls, projections", [(SoftmaxAttention, 3), (GatedLinearAttention, 4)])
def test_accelerators_get_one_gemm_where_the_cpu_gets_one_each(cls, projections):
    # Forward: the P projections as one product (P - 1 fewer); backward: the input's gradient and the
    # kernels' as one product each (2 (P - 1) fewer). The attention's own products are the same.
    cpu = _projection_dots(cls, "cpu")
    assert _projection_dots(cls, "cuda") == _projection_dots(cls, "tpu") == cpu - 3 * (projections - 1)
