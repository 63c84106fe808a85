"""Batches as pure functions of (seed, step), bucketed by length.

A resumed run sees exactly an uninterrupted one's batches, each padded to its bucket's boundary (one compiled shape
per boundary), not to the task's maximum."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from lra.data.types import Split
from lra.errors import InputError

Batch = dict[str, np.ndarray]


def bucket_boundaries(buckets: Sequence[int], max_len: int) -> np.ndarray:
    """Sorted boundaries, capped and completed by ``max_len``."""
    bounds = sorted({int(b) for b in buckets if 0 < int(b) < max_len} | {int(max_len)})
    return np.asarray(bounds)


def assign_buckets(lengths: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Index of the smallest boundary >= each length."""
    return np.searchsorted(bounds, lengths, side="left")


def _make_batch(split: Split, idx: np.ndarray, length: int, weights: np.ndarray) -> Batch:
    return {
        "inputs": np.ascontiguousarray(split.inputs[idx][..., :length]).astype(np.int32),
        "labels": split.labels[idx].astype(np.int32),
        "weights": weights.astype(np.float32),
    }


class TrainBatches:
    """Endless shuffled training batches: per epoch a seeded permutation cut by bucket into full batches (wrapping
    around), in shuffled order, so every epoch has the same steps and lengths. ``order_seed`` (default ``seed``)
    shuffles the order: seeds sharing it (one vmapped program's) draw the same bucket lengths, stacking unpadded."""

    def __init__(
        self,
        split: Split,
        batch_size: int,
        seed: int,
        buckets: Sequence[int],
        max_len: int,
        order_seed: int | None = None,
    ):
        if len(split) == 0:
            raise InputError(f"split {split.name!r} is empty")
        self.split = split
        self.batch_size = batch_size
        self.seed = seed
        self.order_seed = seed if order_seed is None or order_seed < 0 else order_seed
        self.bounds = bucket_boundaries(buckets, max_len)
        self.bucket_of = assign_buckets(split.max_lengths, self.bounds)
        counts = np.bincount(self.bucket_of, minlength=len(self.bounds))
        self.steps_per_epoch = int(sum(-(-c // batch_size) for c in counts if c))
        self._epoch = -1
        self._plan: list[tuple[np.ndarray, int]] = []

    def _plan_epoch(self, epoch: int) -> list[tuple[np.ndarray, int]]:
        rng = np.random.default_rng([self.seed, epoch])
        perm = rng.permutation(len(self.split))
        plan: list[tuple[np.ndarray, int]] = []
        for b, bound in enumerate(self.bounds):
            members = perm[self.bucket_of[perm] == b]
            if len(members) == 0:
                continue
            n_batches = -(-len(members) // self.batch_size)
            filled = np.resize(members, n_batches * self.batch_size)  # wraps around the bucket
            plan.extend((chunk, int(bound)) for chunk in filled.reshape(n_batches, self.batch_size))
        if self.order_seed != self.seed:  # the order seed's stream, advanced as its own run's is
            rng = np.random.default_rng([self.order_seed, epoch])
            rng.permutation(len(self.split))
        order = rng.permutation(len(plan))
        return [plan[i] for i in order]

    def plan(self, step: int) -> tuple[np.ndarray, int]:
        """The example indices of batch ``step`` and the bucket length it is padded to."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._plan, self._epoch = self._plan_epoch(epoch), epoch
        return self._plan[index]

    def batch(self, step: int, length: int | None = None) -> Batch:
        """Batch ``step``, padded to its bucket (or to ``length`` if that is longer)."""
        idx, bucket = self.plan(step)
        return _make_batch(self.split, idx, max(bucket, length or 0), np.ones(len(idx)))


def seed_batch(batches: Sequence[TrainBatches], step: int) -> Batch:
    """Batch ``step`` of every seed, stacked (S, B, ...), padded to the longest bucket drawn: without a
    shared ``order_seed`` a seed's dropout masks (they depend on that length) differ from its single-seed run."""
    length = max(b.plan(step)[1] for b in batches)
    parts = [b.batch(step, length) for b in batches]
    return {k: np.stack([p[k] for p in parts]) for k in parts[0]}


def eval_batches(
    split: Split, batch_size: int, buckets: Sequence[int], max_len: int, max_batches: int = 0
) -> Iterator[Batch]:
    """Every example once, in length order, padding rows weighted 0; ``max_batches`` > 0: a biased subset."""
    bounds = bucket_boundaries(buckets, max_len)
    bucket_of = assign_buckets(split.max_lengths, bounds)
    emitted = 0
    for b, bound in enumerate(bounds):
        members = np.flatnonzero(bucket_of == b)
        for start in range(0, len(members), batch_size):
            idx = members[start : start + batch_size]
            weights = np.zeros(batch_size)
            weights[: len(idx)] = 1.0
            idx = np.concatenate([idx, np.full(batch_size - len(idx), idx[0])])
            yield _make_batch(split, idx, int(bound), weights)
            emitted += 1
            if max_batches and emitted >= max_batches:
                return
