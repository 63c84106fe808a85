"""Checks shared by every attention family's tests (test-only code)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core


def _subjaxprs(eqn: Any) -> Iterator[Any]:
    for value in eqn.params.values():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, jex_core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jex_core.Jaxpr):
                yield item


def all_shapes(jaxpr: Any) -> list[tuple[int, ...]]:
    """Shapes of every variable in a jaxpr, sub-jaxprs (scan, cond, remat, pjit, ...) included."""
    shapes = []
    for var in list(jaxpr.invars) + list(jaxpr.constvars):
        shapes.append(tuple(var.aval.shape))
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            shapes.append(tuple(getattr(var.aval, "shape", ())))
        for sub in _subjaxprs(eqn):
            shapes.extend(all_shapes(sub))
    return shapes


def largest_intermediate(module: Any, n: int, dim: int = 16, batch: int = 1, with_memory: bool = False) -> int:
    """Elements of the largest array in forward+backward of ``module`` at length ``n``.

    The loss sums the output, so the backward pass (with dropout off) is traced too. Use it with
    ``n`` much larger than every other dimension: an N x N-sized array shows as >= n * n elements.
    """
    x = jnp.ones((batch, n, dim), jnp.float32)
    mask = jnp.arange(n)[None, :] < (n - 3)
    mask = jnp.broadcast_to(mask, (batch, n))
    memory = jnp.ones((batch, 4, dim), jnp.float32) if with_memory else None
    variables = jax.eval_shape(lambda: module.init(jax.random.key(0), x, mask, memory=memory))

    def loss(params: Any, x: jax.Array) -> jax.Array:
        y, mem = module.apply(params, x, mask, memory=memory, rngs={"attention": jax.random.key(1)})
        total = jnp.sum(y)
        if mem is not None:
            total = total + jnp.sum(mem)
        return total

    params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), variables)
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(params, x).jaxpr
    return max(int(np.prod(s)) for s in all_shapes(jaxpr))


def assert_no_quadratic(module: Any, n: int = 4096, dim: int = 16, with_memory: bool = False) -> None:
    biggest = largest_intermediate(module, n, dim=dim, with_memory=with_memory)
    assert biggest < n * n // 4, f"an intermediate has {biggest} elements >= N^2/4 = {n * n // 4} (N={n})"


def padding_invariance_outputs(
    module: Any,
    *,
    batch: int = 2,
    n: int = 12,
    dim: int = 16,
    lengths: tuple[int, ...] = (7, 12),
    extra_padding: int = 5,
    memory_cells: int = 0,
    seed: int = 0,
    variables: Any = None,
    apply: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``module`` on (a) the input, (b) the input with padded tokens replaced by noise and
    (c) the input with ``extra_padding`` more padded positions; return the three outputs at the
    real positions' slots so a test can compare them. Also compares memories when present.
    ``variables``/``apply``: the module's parameters and a (compiled) ``module.apply`` to reuse.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, n, dim)).astype(np.float32)
    mask = np.arange(n)[None, :] < np.asarray(lengths)[:, None]
    x = np.where(mask[..., None], x, 0.0).astype(np.float32)
    noisy = np.where(mask[..., None], x, rng.normal(size=x.shape) * 10).astype(np.float32)
    longer = np.concatenate([x, rng.normal(size=(batch, extra_padding, dim)).astype(np.float32)], axis=1)
    longer_mask = np.concatenate([mask, np.zeros((batch, extra_padding), bool)], axis=1)
    memory = rng.normal(size=(batch, memory_cells, dim)).astype(np.float32) if memory_cells else None
    if variables is None:
        variables = module.init(jax.random.key(seed), jnp.asarray(longer), jnp.asarray(longer_mask), memory=memory)
    apply = apply or module.apply

    def run(inp: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        y, mem = apply(
            variables, jnp.asarray(inp), jnp.asarray(m), memory=memory, rngs={"attention": jax.random.key(7)}
        )
        return np.asarray(y)[:, :n] * mask[..., None], (None if mem is None else np.asarray(mem))

    outs = [run(x, mask), run(noisy, mask), run(longer, longer_mask)]
    return outs  # type: ignore[return-value]


def assert_padding_invariant(module: Any, atol: float = 1e-5, **kwargs: Any) -> None:
    """Changing padded tokens or adding padding never changes outputs (or memory) at real positions."""
    (y0, m0), (y1, m1), (y2, m2) = padding_invariance_outputs(module, **kwargs)
    np.testing.assert_allclose(y1, y0, atol=atol, err_msg="changing padded tokens changed real outputs")
    np.testing.assert_allclose(y2, y0, atol=atol, err_msg="adding padding changed real outputs")
    if m0 is not None:
        np.testing.assert_allclose(m1, m0, atol=atol, err_msg="changing padded tokens changed the memory")
        np.testing.assert_allclose(m2, m0, atol=atol, err_msg="adding padding changed the memory")


def reference_softmax_attention(params: dict, x: np.ndarray, mask: np.ndarray, num_heads: int) -> np.ndarray:
    """Plain numpy multi-head attention with softmax's parameter tree (query/key/value/out)."""
    p = params["params"]
    x = np.asarray(x, np.float64)

    def proj(name: str) -> np.ndarray:
        return np.einsum("bnd,dhk->bnhk", x, np.asarray(p[name]["kernel"])) + np.asarray(p[name]["bias"])

    q, k, v = proj("query"), proj("key"), proj("value")
    logits = np.einsum("bnhk,bmhk->bhnm", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask[:, None, None, :], logits, -np.inf)
    logits = logits - logits.max(-1, keepdims=True)
    w = np.exp(logits)
    w = w / w.sum(-1, keepdims=True)
    y = np.einsum("bhnm,bmhk->bnhk", w, v)
    y = np.where(mask[:, :, None, None], y, 0.0)
    return np.einsum("bnhk,hkd->bnd", y, np.asarray(p["out"]["kernel"])) + np.asarray(p["out"]["bias"])


def random_inputs(batch: int, n: int, dim: int, lengths: tuple[int, ...], seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """Gaussian inputs B x N x D and the mask of the given real lengths."""
    x = jnp.asarray(np.random.default_rng(seed).normal(size=(batch, n, dim)), jnp.float32)
    mask = jnp.arange(n)[None, :] < jnp.asarray(lengths)[:, None]
    return x, mask


def perturb_params(variables: Any, seed: int = 3, scale: float = 0.3) -> Any:
    """Add noise to every parameter: zero-initialised ones (gates, biases) take part in reference checks."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda a: a + scale * rng.normal(size=a.shape).astype(np.float32), variables)


def assert_jit_matches_and_gradients_finite(
    module: Any, x: jax.Array, mask: jax.Array, every_weight_used: bool = False
) -> None:
    """jit == eager, and the gradients wrt parameters and input are finite (and non-zero: for every
    parameter with ``every_weight_used``, else for some)."""
    variables = module.init(jax.random.key(1), x, mask)
    y_eager, _ = module.apply(variables, x, mask)
    y_jit, _ = jax.jit(module.apply)(variables, x, mask)
    np.testing.assert_allclose(y_jit, y_eager, rtol=1e-5, atol=1e-5)
    assert_gradients_finite(module, variables, x, mask, every_weight_used=every_weight_used)


def assert_gradients_finite(
    module: Any, variables: Any, x: jax.Array, mask: jax.Array, memory: Any = None, every_weight_used: bool = False
) -> None:
    """Under jit, the gradients wrt parameters and input (of the outputs and the memory) are finite,
    and non-zero for every parameter with ``every_weight_used``, else for some."""

    def loss(params: Any, x: jax.Array) -> jax.Array:
        y, mem = module.apply(params, x, mask, memory=memory, rngs={"attention": jax.random.key(1)})
        return jnp.sum(y**2) + (0.0 if mem is None else jnp.sum(mem**2))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(variables, x)
    leaves = jax.tree.leaves(grads)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    if every_weight_used:
        assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads[0])), "a weight gets no gradient"
    else:
        assert any(float(jnp.abs(g).max()) > 0 for g in leaves)
