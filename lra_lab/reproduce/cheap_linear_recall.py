"""Cheap linear attention, Section 6: does a fixed-size representation forget as the sequence grows?

The discussion says the k x k summary "can store more information than the k-length vector ... but
obviously less than the n x k stored hidden states of a softmax attention mechanism", and that "for
extremely long sequences ... fixed-size representations may not capture enough information"; its
experiments rank softmax above gated linear above linear. Tested here by associative recall on
synthetic data: a sequence of n (key, value) pairs with distinct keys (one token per pair, the sum of
a key and a value embedding), then a query token (one of the n keys' embedding); the model answers
the value. One attention layer of the family (one head, width k = 32: the suite's ``softmax``, and
``linear`` / ``gated_linear`` in the paper's literal form, ``tie_kv=True, normalize=False``: C = sum
h h^T), read at the query token, then a linear classifier. Trained from scratch at each n in
``LENGTHS`` (Adam, ``STEPS`` steps of fresh random batches), ``SEEDS`` seeds each; accuracy on 2,048
fresh sequences. Chance is 1/``NUM_VALUES``.

    python -m lra_lab.reproduce.cheap_linear_recall --out results/reproductions/cheap_linear/associative_recall.json

About 27 short trainings: minutes on one core.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from lra_lab.reproduce import evidence
from lra_lab.reproduce.claims import INCOMPLETE, NOT_REPRODUCED, PARTLY, REPRODUCED, Outcome

RECORD = "results/reproductions/cheap_linear/associative_recall.json"
COMMAND = f"python -m lra_lab.reproduce.cheap_linear_recall --out {RECORD}"
FAMILIES = ("softmax", "gated_linear", "linear")  # the order the discussion implies, best first
LENGTHS = (8, 32, 128)  # pairs per sequence: below, near and above the k = 32 of the summary
WIDTH, NUM_KEYS, NUM_VALUES = 32, 512, 16
SEEDS = (0, 1, 2)
STEPS, BATCH, LEARNING_RATE, EVAL_SEQUENCES = 2000, 64, 3e-3, 2048
FORGETS = 20.0  # points: a fixed-size family forgets if it loses at least this from the shortest to the longest n
KEEPS = 10.0  # points: softmax keeps its recall if it loses less than this
ORDER_GAP = 2.0  # points between neighbours at the longest n


def _batch(rng: Any, n: int, size: int) -> dict[str, Any]:
    """``size`` sequences of n pairs with distinct keys, and a query drawn from each sequence's keys."""
    import numpy as np

    keys = np.argsort(rng.random((size, NUM_KEYS)), axis=1)[:, :n]
    values = rng.integers(0, NUM_VALUES, (size, n))
    pick = rng.integers(0, n, size)
    return dict(keys=keys.astype(np.int32), values=values.astype(np.int32),
                query=keys[np.arange(size), pick].astype(np.int32), target=values[np.arange(size), pick].astype(np.int32))


def _model(family: str):
    import flax.linen as nn
    import jax.numpy as jnp

    from lra import attention

    options = {} if family == "softmax" else dict(tie_kv=True, normalize=False)

    class Recall(nn.Module):
        @nn.compact
        def __call__(self, keys, values, query):
            key_embed = nn.Embed(NUM_KEYS, WIDTH, name="key_embed")
            x = key_embed(keys) + nn.Embed(NUM_VALUES, WIDTH, name="value_embed")(values)
            x = jnp.concatenate([x, key_embed(query)[:, None]], axis=1)
            y, _ = attention.get(family)(num_heads=1, qkv_dim=WIDTH, **options)(x, jnp.ones(x.shape[:2], bool))
            return nn.Dense(NUM_VALUES)(y[:, -1])
    return Recall()


def train_and_test(family: str, n: int, seed: int, steps: int = STEPS) -> float:
    """Test accuracy (0-1) of one family trained at n pairs from ``seed``."""
    import jax
    import numpy as np
    import optax

    model = _model(family)
    rng = np.random.default_rng(seed)
    first = _batch(rng, n, BATCH)
    params = model.init(jax.random.key(seed), first["keys"], first["values"], first["query"])
    tx = optax.adam(LEARNING_RATE)
    opt = tx.init(params)

    @jax.jit
    def step(params, opt, batch):
        def loss_fn(p):
            logits = model.apply(p, batch["keys"], batch["values"], batch["query"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["target"]).mean()
        grads = jax.grad(loss_fn)(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt

    for _ in range(steps):
        params, opt = step(params, opt, _batch(rng, n, BATCH))
    test = _batch(np.random.default_rng(10_000 + seed), n, EVAL_SEQUENCES)
    logits = jax.jit(model.apply)(params, test["keys"], test["values"], test["query"])
    return float((np.asarray(logits).argmax(-1) == test["target"]).mean())


def measure(steps: int = STEPS) -> dict[str, Any]:
    rows = []
    for n in LENGTHS:
        for family in FAMILIES:
            for seed in SEEDS:
                acc = train_and_test(family, n, seed, steps)
                rows.append(dict(family=family, n=n, seed=seed, accuracy=acc))
                print(f"  {family} n={n} seed {seed}: {100 * acc:.1f}%", flush=True)
    return dict(rows=rows, width=WIDTH, num_keys=NUM_KEYS, num_values=NUM_VALUES, steps=steps, batch=BATCH,
                learning_rate=LEARNING_RATE, eval_sequences=EVAL_SEQUENCES)


def mean_accuracy(record: dict[str, Any]) -> dict[tuple[str, int], float]:
    """(family, n) -> mean test accuracy (%) over the seeds; only full cells of this design."""
    cells: dict[tuple[str, int], list[float]] = {}
    for row in record["rows"]:
        cells.setdefault((row["family"], row["n"]), []).append(100.0 * row["accuracy"])
    return {cell: statistics.fmean(accs) for cell, accs in cells.items() if len(accs) == len(SEEDS)}


def judge(root: Path) -> Outcome:
    record = evidence.read_json(root / RECORD)
    if not (record and record.get("rows")) or record.get("steps") != STEPS or record.get("width") != WIDTH:
        return Outcome(INCOMPLETE, missing=(RECORD,))
    acc = mean_accuracy(record)
    lacking = [f"{f} n={n}" for f in FAMILIES for n in LENGTHS if (f, n) not in acc]
    if lacking:
        return Outcome(INCOMPLETE, missing=(f"{RECORD}: {', '.join(lacking)}",))
    short, long = LENGTHS[0], LENGTHS[-1]
    drop = {f: acc[(f, short)] - acc[(f, long)] for f in FAMILIES}
    forgets = all(drop[f] >= FORGETS for f in FAMILIES[1:]) and drop["softmax"] < KEEPS
    ordered = all(acc[(a, long)] - acc[(b, long)] >= ORDER_GAP for a, b in zip(FAMILIES, FAMILIES[1:]))
    ours = "; ".join(f"{f}: " + ", ".join(f"n={n} {acc[(f, n)]:.1f}%" for n in LENGTHS) for f in FAMILIES)
    stat = (f"mean test accuracy over {len(SEEDS)} seeds (chance {100 / NUM_VALUES:.1f}%), width k = {WIDTH}; loss from "
            f"n = {short} to {long}: " + ", ".join(f"{f} {drop[f]:+.1f}" for f in FAMILIES) + " points")
    if forgets and ordered:
        verdict = REPRODUCED
    elif forgets or ordered:
        verdict = PARTLY
    else:
        verdict = NOT_REPRODUCED
    return Outcome(verdict, ours, stat)


def main(argv: list[str] | None = None) -> int:
    from lra_lab.experiments.records import measure_main

    return measure_main("Cheap linear attention: associative recall against the sequence length.", RECORD,
                        measure, argv)


if __name__ == "__main__":
    raise SystemExit(main())
