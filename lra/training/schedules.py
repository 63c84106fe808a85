"""Table 2's learning-rate schedule: base_lr * min(1, step/warmup) / sqrt(max(step, warmup))."""

from __future__ import annotations

import jax.numpy as jnp
import optax


def lra_schedule(base_lr: float, warmup_steps: int) -> optax.Schedule:
    """Linear warm-up then inverse-square-root decay (the LRA/ConvLuna schedule).

    optax counts updates from 0; the schedule is evaluated at ``count + 1`` so the first update
    uses step 1 (a zero learning rate at step 0 would waste the first batch).
    """
    warmup = max(int(warmup_steps), 1)

    def schedule(count: jnp.ndarray) -> jnp.ndarray:
        step = jnp.asarray(count, jnp.float32) + 1.0
        return base_lr * jnp.minimum(1.0, step / warmup) / jnp.sqrt(jnp.maximum(step, warmup))

    return schedule


def make_optimizer(
    learning_rate: float, warmup_steps: int, weight_decay: float, grad_clip_norm: float = 0.0
) -> optax.GradientTransformation:
    """AdamW (b1 0.9, b2 0.999) with the LRA schedule; optional global-norm clipping."""
    adamw = optax.adamw(lra_schedule(learning_rate, warmup_steps), b1=0.9, b2=0.999, weight_decay=weight_decay)
    if grad_clip_norm > 0:
        return optax.chain(optax.clip_by_global_norm(grad_clip_norm), adamw)
    return adamw
