"""The compiled steps: one train step and one eval step for a bundle of seeds.

Every array of the training state carries a leading seed axis S (S = 1 for a single-seed run:
one code path). The per-seed step is written for one seed and ``jax.vmap``-ed, so seed k of a
bundle computes what a single-seed run of seed k computes; only XLA's batched kernels may sum in
another order (tests/test_seeds.py states the tolerance).

Randomness is a pure function of (seed, step): dropout and the attention key of step t are
``fold_in(key(seed), t)``; parameters come from ``fold_in(key(seed), INIT_SALT)``.

``config.microbatches`` = M > 1 accumulates the gradient over M microbatches of the batch
(lra.training.microbatch): the same gradient up to float summation order, each example with the
same dropout bits as in the one-batch step; M = 1 (the default) is the one-batch step unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from lra.data.batching import eval_batches
from lra.model import init_params
from lra.training import distributed, microbatch
from lra.training.schedules import lra_schedule
from lra.training.seeds import run_seeds

INIT_SALT = 1_000_003  # the parameter key of seed k: fold_in(key(k), INIT_SALT)

Batch = dict[str, jax.Array]
State = dict[str, Any]


def init_state(params: Any, tx: optax.GradientTransformation | None) -> State:
    """One seed's training state (the checkpoint format of ``checkpoints/latest``)."""
    return {
        "params": params,
        "opt_state": tx.init(params) if tx is not None else {},
        "step": jnp.zeros((), jnp.int32),
        "best_val_accuracy": jnp.asarray(-1.0, jnp.float32),
        "best_step": jnp.zeros((), jnp.int32),
        "train_seconds": jnp.zeros((), jnp.float32),  # step time without compilation, all sessions
        "timed_steps": jnp.zeros((), jnp.int32),
    }


def seed_keys(seeds: Sequence[int]) -> jax.Array:
    """The base key of each seed, stacked (S,)."""
    return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.int32))


def make_init(
    model: Any, tx: optax.GradientTransformation, seeds: Sequence[int], sample: jax.Array, sharding: Any
) -> jax.stages.Wrapped:
    """``() -> state_S``: every seed's fresh state, stacked on the seed axis."""
    keys_S = seed_keys(seeds)

    def one(key: jax.Array) -> State:
        return init_state(init_params(model, jax.random.fold_in(key, INIT_SALT), sample), tx)

    return jax.jit(lambda: jax.vmap(one)(keys_S), out_shardings=sharding)


def weighted_metrics(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> dict[str, jax.Array]:
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss_sum": jnp.sum(losses * weights), "correct": jnp.sum(correct * weights), "count": jnp.sum(weights)}


def all_finite(tree: Any) -> jax.Array:
    """1.0 if every floating-point value in ``tree`` is finite, else 0.0 (on device, fused)."""
    checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(checks)).astype(jnp.float32) if checks else jnp.ones((), jnp.float32)


def make_steps(
    model: Any,
    tx: optax.GradientTransformation | None,
    config: ml_collections.ConfigDict,
    mesh: Any,
    seeds: Sequence[int] | None = None,
) -> tuple[jax.stages.Wrapped, jax.stages.Wrapped]:
    """``train(state_S, batch_SxB) -> (state_S, metrics_S)`` and ``evaluate(params_S, batch_B) -> metrics_S``.

    The train batch holds one batch per seed (seed axis first, rows sharded over the mesh);
    the eval batch is shared by all seeds. ``seeds`` defaults to the config's (lra.training.seeds).
    """
    keys_S = seed_keys(run_seeds(config) if seeds is None else seeds)
    repl = distributed.replicated(mesh)
    schedule = lra_schedule(config.learning_rate, config.warmup_steps)
    microbatches = int(config.get("microbatches", 1))
    if microbatches > 1:
        microbatch.check_partitionable()
    parts = 2 if getattr(model, "dual", False) else 1  # matching: the encoder's rows are both documents

    def accumulated_grads(
        params: Any, batch: Batch, dropout_key: jax.Array, attention_key: jax.Array
    ) -> tuple[Any, dict[str, jax.Array]]:
        """The gradient of the whole batch's mean loss, one microbatch at a time (lra.training.microbatch)."""
        full = batch["labels"].shape[0]
        rows = full // microbatches

        def loss_sum(params: Any, micro: Batch, index: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
            logits = model.apply(
                {"params": params},
                micro["inputs"],
                deterministic=False,
                rngs={
                    "dropout": microbatch.row_keyed(dropout_key, index, microbatches, rows, full, parts),
                    "attention": attention_key,
                },
            )
            m = weighted_metrics(logits, micro["labels"], micro["weights"])
            return m["loss_sum"], m

        denominator = jnp.maximum(jnp.sum(batch["weights"]), 1.0)
        return microbatch.accumulate(loss_sum, params, batch, microbatches, denominator)

    def train_one(state: State, batch: Batch, key: jax.Array) -> tuple[State, dict[str, jax.Array]]:
        assert tx is not None, "make_steps(tx=None) serves evaluation only: its train step has no optimizer"
        dropout_key, attention_key = jax.random.split(jax.random.fold_in(key, state["step"]))

        def loss_fn(params: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
            logits = model.apply(
                {"params": params},
                batch["inputs"],
                deterministic=False,
                rngs={"dropout": dropout_key, "attention": attention_key},
            )
            m = weighted_metrics(logits, batch["labels"], batch["weights"])
            return m["loss_sum"] / jnp.maximum(m["count"], 1.0), m

        if microbatches == 1:  # the one-batch step, exactly as before microbatches existed
            (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        else:
            grads, m = accumulated_grads(state["params"], batch, dropout_key, attention_key)
            loss = m["loss_sum"] / jnp.maximum(m["count"], 1.0)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new_state = dict(
            state, params=optax.apply_updates(state["params"], updates), opt_state=opt_state, step=state["step"] + 1
        )
        metrics = {
            "loss": loss,
            "accuracy": m["correct"] / jnp.maximum(m["count"], 1.0),
            "learning_rate": schedule(state["step"]),
            # the loss is of the weights before the update: check the weights after it too
            "state_finite": all_finite((new_state["params"], new_state["opt_state"])),
        }
        return new_state, metrics

    def eval_one(params: Any, batch: Batch, key: jax.Array) -> dict[str, jax.Array]:
        logits = model.apply({"params": params}, batch["inputs"], deterministic=True, rngs={"attention": key})
        return weighted_metrics(logits, batch["labels"], batch["weights"])

    train = jax.jit(
        lambda state, batch: jax.vmap(train_one)(state, batch, keys_S),
        in_shardings=(repl, distributed.seed_batch_sharded(mesh)),
        out_shardings=(repl, repl),
        donate_argnums=0,
    )
    evaluate = jax.jit(
        lambda params, batch: jax.vmap(eval_one, in_axes=(0, None, 0))(params, batch, keys_S),
        in_shardings=(repl, distributed.batch_sharded(mesh)),
        out_shardings=repl,
    )
    return train, evaluate


def evaluate_split(
    eval_step: Callable,
    params_S: Any,
    split: Any,
    config: ml_collections.ConfigDict,
    sharding: Any,
    examples: bool = False,
) -> list[dict[str, float]]:
    """Each seed's accuracy and loss over a whole split (or its first ``max_eval_batches`` batches);
    ``examples``: also how many examples were scored (lra.evaluate records it: issue 52 EV1)."""
    pending = [
        eval_step(params_S, distributed.shard_batch(batch, sharding))
        for batch in eval_batches(
            split, config.eval_batch_size, config.data.buckets, config.data.max_len, config.max_eval_batches
        )
    ]
    return summed_metrics(jax.device_get(pending), examples)


def summed_metrics(per_batch: Iterable[dict[str, np.ndarray]], examples: bool = False) -> list[dict[str, float]]:
    """Per-seed accuracy and loss from the per-batch sums (each value of shape (S,)); ``examples``:
    with the number of examples counted."""
    totals: dict[str, np.ndarray] = {}
    for m in per_batch:
        for k in ("loss_sum", "correct", "count"):
            totals[k] = totals.get(k, 0.0) + np.asarray(m[k], np.float64)
    if not totals:
        return []
    count = np.maximum(totals["count"], 1.0)
    return [
        {"accuracy": float(c / n), "loss": float(s / n), **({"examples": int(t)} if examples else {})}
        for c, s, n, t in zip(totals["correct"], totals["loss_sum"], count, totals["count"], strict=False)
    ]
