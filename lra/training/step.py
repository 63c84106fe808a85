"""The step: the compiled train/eval steps over the seed axis, the optimizer and its schedule, microbatches.

The state has a leading seed axis S (S = 1 for one seed: one code path); the per-seed step is ``jax.vmap``-ed, so seed
k of a bundle computes what its single-seed run does, up to XLA's batched summation order (tolerance:
tests/test_seeds.py). Randomness is a pure function of (seed, step): step t's keys come from ``fold_in(key(seed), t)``,
parameters from ``fold_in(key(seed), INIT_SALT)``. Table 2's schedule: base_lr * min(1, step/warmup) / sqrt(max(step,
warmup)). Microbatches (M > 1; docs/design.md, A run): a scan over M strided microbatches sums float32 gradients of
``loss_sum / real examples of the batch`` (the one-batch gradient up to summation order; M = 1: the one-batch step).
Each example keeps its full-batch dropout bits (partitionable threefry: bits of its flat index) through a
:func:`row_keyed_impl` key: threefry's split and fold_in, bits at the full-batch tensor's 64-bit counters of the
microbatch's rows. A dropout draw whose leading axis is not those rows (dispersed attention's chunks) fails at trace
time, never other bits; ``rngs["attention"]`` has no batch axis and keeps plain keys.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax import lax

from lra.errors import InputError
from lra.model import init_params
from lra.training import hosts


# -- the seed axis -------------------------------------------------------------------------------------------
def take(tree: Any, index: int) -> Any:
    """Seed ``index`` of a stacked tree."""
    return jax.tree.map(lambda x: x[index], tree)


def stack(trees: Sequence[Any]) -> Any:
    """Trees of single seeds, stacked on a leading seed axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


# -- the optimizer: AdamW and Table 2's learning-rate schedule -----------------------------------------------
def lra_schedule(base_lr: float, warmup_steps: int) -> optax.Schedule:
    """Linear warm-up then inverse-square-root decay (the LRA/ConvLuna schedule).

    Evaluated at optax's ``count + 1``, so the first update uses step 1 (a zero rate would waste the first batch).
    Not ``optax.join_schedules`` of ``linear_schedule`` and a decay: in float32 it differs from this expression at
    up to 2.8% of the steps, by up to 2.5e-4 relative (5 settings, 200,000 steps each), which would move every
    golden run and committed record; a join of this very expression would only wrap it (its pieces still differ
    in the last bit: the operations group otherwise).
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


# -- the compiled steps --------------------------------------------------------------------------------------
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


def seed_keys(seeds: Sequence[int]) -> np.ndarray:
    """The base key of each seed, as key data (S, 2) uint32 (``jax.random.wrap_key_data`` makes them keys)."""
    return np.asarray(jax.random.key_data(jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.int32))))


class Seeded:
    """A jitted function whose last argument, the seeds' key data, is bound: called and lowered without it.

    The keys are an argument, not constants of the program, so one compiled program serves every seed list
    of the same length: a run with another seed loads the first one's from the persistent compilation cache.
    They are integers, so the bits are those of keys compiled in as constants. Host data (NumPy) until the
    first call places them (``sharding``), so a deviceless lowering passes them as they are."""

    def __init__(self, fn: jax.stages.Wrapped, keys_Sx2: np.ndarray, sharding: Any):
        self.fn, self.keys_Sx2, self.sharding = fn, keys_Sx2, sharding
        self._placed: jax.Array | None = None

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args, self._keys())

    def lower(self, *args: Any) -> jax.stages.Lowered:
        return self.fn.lower(*args, self.keys_Sx2)

    def bind(self, compiled: Callable[..., Any]) -> Callable[..., Any]:
        """``compiled`` (this function lowered and compiled) called without the keys, as this one is."""
        return lambda *args: compiled(*args, self._keys())

    def _keys(self) -> jax.Array:
        """The keys on ``sharding``, placed once; never kept while traced (``jax.eval_shape`` of this function)."""
        if self._placed is not None:
            return self._placed
        keys = jax.device_put(self.keys_Sx2, self.sharding)
        if not isinstance(keys, jax.core.Tracer):
            self._placed = keys
        return keys


def _keyed(fn: Callable[..., Any], in_axes: Any = 0) -> Callable[..., Any]:
    """``fn`` vmapped over the seed axis, its last argument given as key data."""
    return lambda *args: jax.vmap(fn, in_axes=in_axes)(*args[:-1], jax.random.wrap_key_data(args[-1]))


def make_init(
    model: Any, tx: optax.GradientTransformation, seeds: Sequence[int], sample: jax.Array, sharding: Any
) -> Seeded:
    """``() -> state_S``: every seed's fresh state, stacked on the seed axis."""

    def one(key: jax.Array) -> State:
        return init_state(init_params(model, jax.random.fold_in(key, INIT_SALT), sample), tx)

    return Seeded(jax.jit(_keyed(one), in_shardings=sharding, out_shardings=sharding), seed_keys(seeds), sharding)


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
    seeds: Sequence[int],
) -> tuple[Seeded, Seeded]:
    """``train(state_S, batch_SxB) -> (state_S, metrics_S)`` and ``evaluate(params_S, batch_B) -> metrics_S``
    (one eval batch for every seed)."""
    keys_S = seed_keys(seeds)
    repl = hosts.replicated(mesh)
    schedule = lra_schedule(config.learning_rate, config.warmup_steps)
    microbatches = int(config.get("microbatches", 1))
    if microbatches > 1:
        check_partitionable()
    parts = 2 if getattr(model, "dual", False) else 1  # matching: the encoder's rows are both documents

    def accumulated_grads(
        params: Any, batch: Batch, dropout_key: jax.Array, attention_key: jax.Array
    ) -> tuple[Any, dict[str, jax.Array]]:
        """The gradient of the whole batch's mean loss, one microbatch at a time (module docstring)."""
        full = batch["labels"].shape[0]
        rows = full // microbatches

        def loss_sum(params: Any, micro: Batch, index: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
            logits = model.apply(
                {"params": params},
                micro["inputs"],
                deterministic=False,
                rngs={
                    "dropout": row_keyed(dropout_key, index, microbatches, rows, full, parts),
                    "attention": attention_key,
                },
            )
            m = weighted_metrics(logits, micro["labels"], micro["weights"])
            return m["loss_sum"], m

        denominator = jnp.maximum(jnp.sum(batch["weights"]), 1.0)
        return accumulate(loss_sum, params, batch, microbatches, denominator)

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

        if microbatches == 1:  # the one-batch step, unchanged
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
        _keyed(train_one),
        in_shardings=(repl, hosts.seed_batch_sharded(mesh), repl),
        out_shardings=(repl, repl),
        donate_argnums=0,
    )
    evaluate = jax.jit(
        _keyed(eval_one, in_axes=(0, None, 0)),
        in_shardings=(repl, hosts.batch_sharded(mesh), repl),
        out_shardings=repl,
    )
    return Seeded(train, keys_S, repl), Seeded(evaluate, keys_S, repl)


# -- microbatches: gradient accumulation with the full batch's dropout bits ----------------------------------
_THREEFRY = jex_random.threefry_prng_impl
_K = 2  # key data: threefry's (k1, k2), then the microbatch's index m


def _split(key_data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    keys = _THREEFRY.split(key_data[:_K], shape)
    return jnp.concatenate([keys, jnp.broadcast_to(key_data[_K:], (*shape, 1))], axis=-1)


def _fold_in(key_data: jax.Array, data: Any) -> jax.Array:
    return jnp.concatenate([_THREEFRY.fold_in(key_data[:_K], data), key_data[_K:]])


def _seed(seed: jax.Array) -> jax.Array:
    return jnp.concatenate([_THREEFRY.seed(seed), jnp.zeros((1,), jnp.uint32)])


def mul_2x32(a: jax.Array, c: int) -> tuple[jax.Array, jax.Array]:
    """``a * c`` (uint32 array times a constant below 2^32) as the (hi, lo) words of a uint64."""
    assert 0 <= c < 2**32
    mask16 = jnp.uint32(0xFFFF)
    a0, a1 = a & mask16, a >> 16
    c0, c1 = jnp.uint32(c & 0xFFFF), jnp.uint32(c >> 16)
    p00, p01, p10, p11 = a0 * c0, a0 * c1, a1 * c0, a1 * c1
    mid = (p00 >> 16) + (p01 & mask16) + (p10 & mask16)
    lo = (p00 & mask16) | (mid << 16)
    hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
    return hi, lo


@functools.cache
def row_keyed_impl(count: int, rows: int, batch: int, parts: int) -> Any:
    """The PRNG of ``count`` strided microbatches of ``rows`` in ``batch``, rows ``parts`` times (module docstring)."""

    def random_bits(key_data: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
        if bit_width not in (8, 16, 32):
            raise NotImplementedError(f"microbatched random bits of width {bit_width}")
        if not shape or shape[0] != parts * rows:
            raise InputError(
                f"a dropout draw of shape {tuple(shape)} does not have the microbatch's {parts * rows} rows as "
                f"its leading axis, so config.microbatches > 1 cannot give it the full batch's bits: use "
                f"config.microbatches=1 for this family (or no dropout)"
            )
        per_row = math.prod(shape[1:])
        if per_row >= 2**32:
            raise InputError(f"a microbatched dropout draw of shape {tuple(shape)} has rows of >= 2^32 elements")
        r = jnp.arange(shape[0], dtype=jnp.uint32)
        global_row = (r // rows) * jnp.uint32(batch) + key_data[_K] + (r % rows) * jnp.uint32(count)
        hi_row, lo_row = (w.reshape((shape[0],) + (1,) * (len(shape) - 1)) for w in mul_2x32(global_row, per_row))
        within = jnp.arange(per_row, dtype=jnp.uint32).reshape((1, *shape[1:]))
        lo = lo_row + within
        hi = hi_row + (lo < within).astype(jnp.uint32)  # the carry of the 64-bit add
        bits1, bits2 = jex_random.threefry2x32_p.bind(
            key_data[0], key_data[1], jnp.broadcast_to(hi, shape), jnp.broadcast_to(lo, shape)
        )
        bits = bits1 ^ bits2  # jax's partitionable threefry, 32 bits and narrower
        return bits if bit_width == 32 else bits.astype({8: jnp.uint8, 16: jnp.uint16}[bit_width])

    return jex_random.define_prng_impl(
        key_shape=(_K + 1,),
        seed=_seed,
        split=_split,
        random_bits=random_bits,
        fold_in=_fold_in,
        name=f"threefry2x32_rows_{count}x{rows}_of_{batch}x{parts}",
        tag="mbr",
    )


def row_keyed(key: jax.Array, index: jax.Array, count: int, rows: int, batch: int, parts: int) -> jax.Array:
    """``key`` as a :func:`row_keyed_impl` key of microbatch ``index`` (examples ``index + count * j``)."""
    data = jnp.concatenate([jax.random.key_data(key), jnp.asarray(index, jnp.uint32)[None]])
    return jax.random.wrap_key_data(data, impl=row_keyed_impl(count, rows, batch, parts))


def check_partitionable() -> None:
    """The row map reproduces jax's partitionable threefry only (jax's default since 0.5)."""
    if not jax.config.jax_threefry_partitionable:  # type: ignore[attr-defined]
        raise InputError(
            "config.microbatches > 1 needs jax_threefry_partitionable=True (jax's default): each example's "
            "dropout bits then depend on its index alone, which the microbatched step reproduces"
        )


def split_rows(batch_BxX: Any, index: jax.Array, count: int) -> Any:
    """Microbatch ``index`` of ``count`` (strided: rows index, index + count, ...) of every array."""

    def take(x: jax.Array) -> jax.Array:
        b = x.shape[0] // count
        return lax.dynamic_index_in_dim(x.reshape((b, count, *x.shape[1:])), index, axis=1, keepdims=False)

    return jax.tree.map(take, batch_BxX)


def accumulate(
    loss_sum_fn: Callable[[Any, Any, jax.Array], tuple[jax.Array, dict[str, jax.Array]]],
    params: Any,
    batch: dict[str, jax.Array],
    count: int,
    denominator: jax.Array,
) -> tuple[Any, dict[str, jax.Array]]:
    """The gradient of ``loss_sum / denominator`` summed over ``count`` microbatches, and the whole batch's
    metric sums. ``loss_sum_fn(params, microbatch, index) -> (loss_sum, metric sums)`` is scaled by
    ``1 / denominator`` inside each microbatch, so partial sums stay at the full batch's magnitude (float32)."""

    def one(carry: tuple[Any, dict[str, jax.Array]], index: jax.Array) -> tuple[Any, None]:
        grads, sums = carry
        micro = split_rows(batch, index, count)
        scaled = lambda p: (lambda out: (out[0] / denominator, out[1]))(loss_sum_fn(p, micro, index))  # noqa: E731
        (_, m), g = jax.value_and_grad(scaled, has_aux=True)(params)
        grads = jax.tree.map(jnp.add, grads, g)
        sums = {k: sums[k] + m[k] for k in sums}
        return (grads, sums), None

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.result_type(p.dtype, jnp.float32)), params)
    sums0 = {k: jnp.zeros((), jnp.float32) for k in ("loss_sum", "correct", "count")}
    (grads, sums), _ = lax.scan(one, (zeros, sums0), jnp.arange(count))
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
    return grads, sums


def check_split(batch_size: int, microbatches: int, num_devices: int = 1) -> None:
    """Refuse a split that is not exact: every microbatch the same size, a multiple of the devices."""
    if not isinstance(microbatches, (int, np.integer)) or isinstance(microbatches, bool) or microbatches < 1:
        raise InputError(f"config.microbatches must be an integer >= 1, got {microbatches!r}")
    if batch_size % microbatches:
        raise InputError(
            f"config.microbatches={microbatches} does not divide config.batch_size={batch_size}: "
            f"choose a divisor of {batch_size}"
        )
    if (batch_size // microbatches) % num_devices:
        raise InputError(
            f"config.batch_size / config.microbatches = {batch_size // microbatches} is not divisible by the "
            f"{num_devices} devices: each microbatch is split over them"
        )
