"""Dropout's random bits on the CPU in one pass, bit-identical to jax's default lowering.

jax lowers the threefry2x32 hash on CPU as a rolled 5-iteration ``fori_loop`` (4 rounds each):
every iteration is a pass over the whole array, and the loop cannot be fused. jax's unrolled
lowering (the one it uses on GPU/TPU) computes the same integers in one fused pass, but it is then
fused *into* the float computations that consume the bits (the dropout masks inside the attention
and residual fusions), XLA groups those float operations differently, and logged numbers move in the
last float32 place (a 30-step smoke run: different parameters after the first step, the same bits).
An ``optimization_barrier`` does not stop that on CPU (XLA removes barriers before fusion).

Here all 20 rounds run in one pass inside a ``while`` loop that XLA cannot count: it runs once,
but its condition starts from a value XLA cannot prove (``any(d == d + 1)``, always False). The loop
is a fusion boundary exactly where jax's rolled loop is one, so the float program around it is
compiled as before and every number stays the same, while the hash is computed in one pass instead
of five. jax has no public API for this: :func:`register` touches ``jax._src`` and returns False
(jax's default stays) when a jax upgrade moves what it needs; ``tests/test_cpu_speed.py`` then fails
loudly, and compares 20 logged losses with and without it.
"""

from __future__ import annotations

import sys
from typing import Any

from lra.errors import InputError

MODES = ("one-pass", "rolled", "fused")
_registered: str | None = None


def _one_pass(k1: Any, k2: Any, x1: Any, x2: Any) -> list[Any]:
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax._src.random import threefry2x32 as tf

    key_mix = lax.bitwise_xor(k1, k2)
    done = jnp.any(key_mix == key_mix + np.uint32(1))  # always False; XLA cannot tell, so the loop stays

    def body(carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        a, b = tf._threefry2x32_lowering(k1, k2, carry[0], carry[1], use_rolled_loops=False)
        return a, b, jnp.bool_(True)

    shape = jnp.broadcast_shapes(*(np.shape(v) for v in (k1, k2, x1, x2)))  # the output's (jax broadcasts them)
    start = (jnp.broadcast_to(x1, shape), jnp.broadcast_to(x2, shape), done)
    a, b, _ = lax.while_loop(lambda carry: ~carry[2], body, start)
    return [a, b]


def register(mode: str) -> bool:
    """Register ``mode``'s threefry2x32 lowering for the CPU (``rolled``: leave jax's). Returns whether
    it is in force; False, with one note, when this jax has moved its internals."""
    global _registered
    if mode not in MODES:
        raise InputError(f"threefry lowering {mode!r}: one of {', '.join(MODES)}")
    if mode == "rolled" or _registered is not None:  # once per process: the first compile uses it
        return _registered == (None if mode == "rolled" else mode)
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as tf

        if mode == "fused":
            rule = tf._threefry2x32_lowering_rule
        else:
            tf._threefry2x32_lowering  # noqa: B018 (fails here, not at the first compile, when jax moved it)
            rule = mlir.lower_fun(_one_pass, multiple_results=True)
        mlir.register_lowering(tf.threefry2x32_p, rule, platform="cpu")
    except (ImportError, AttributeError) as e:  # a jax that reorganised these modules: keep its default
        import jax

        print(
            f"note: jax {jax.__version__} has no threefry lowering where lra looks for it ({e}); "
            "dropout uses jax's default CPU lowering (slower, same numbers)",
            file=sys.stderr,
            flush=True,
        )
        return False
    _registered = mode
    return True


def registered() -> str:
    """The CPU lowering in force in this process."""
    return _registered or "rolled"
