"""The cheap linear attention paper's lookups, timed: the jitted encoders and lookups of one-head linear
attention and of softmax over the same projected document, and the median of a few calls.

Shared by Table 1's measurement (``cheap_linear``) and the lookup speed-up (``cheap_linear_speedup``);
apart from both so that neither imports the other (moved here unchanged from ``cheap_linear``, issue 55).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

BATCH, WIDTH, QUERIES, CALLS = 8, 64, 256, 7


def _median_seconds(fn, *args) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def lookups(n: int, width: int = WIDTH, batch: int = BATCH, queries: int = QUERIES) -> dict[str, Any]:
    """Jitted encoders and lookups of one-head linear attention (C = sum h h^T) and of softmax over the
    same projected document (H = x W_k, n x k), with their inputs: the pieces every timing here uses."""
    import jax
    import jax.numpy as jnp

    from lra.attention.linear import LinearAttention

    attn = LinearAttention(num_heads=1, qkv_dim=width, tie_kv=True, normalize=False)
    x = jax.random.normal(jax.random.PRNGKey(0), (batch, n, width))
    xq = jax.random.normal(jax.random.PRNGKey(1), (batch, queries, width))
    mask = jnp.ones((batch, n), bool)
    params = attn.init(jax.random.PRNGKey(2), x, mask)
    p = params["params"]

    encode_linear = jax.jit(lambda x, m: attn.apply(params, x, m, method="encode"))
    lookup_linear = jax.jit(lambda c, xq: attn.apply(params, c, xq, method="lookup"))
    # softmax over the same projections: the document is kept as H = x W_k (n x k)
    encode_softmax = jax.jit(lambda x: jnp.einsum("bnd,dhk->bnhk", x, p["key"]["kernel"]) + p["key"]["bias"])

    def lookup_softmax(h, xq):
        q = jnp.einsum("bmd,dhk->bmhk", xq, p["query"]["kernel"]) + p["query"]["bias"]
        w = jax.nn.softmax(jnp.einsum("bmhk,bnhk->bhmn", q, h), axis=-1)
        r = jnp.einsum("bhmn,bnhk->bmhk", w, h)
        return jnp.einsum("bmhk,hkd->bmd", r, p["out"]["kernel"]) + p["out"]["bias"]

    return dict(x=x, xq=xq, mask=mask, encode_linear=encode_linear, lookup_linear=lookup_linear,
                encode_softmax=encode_softmax, lookup_softmax=jax.jit(lookup_softmax),
                c=encode_linear(x, mask), h=encode_softmax(x))
