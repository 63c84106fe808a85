"""The data contract between task loaders, batching and the training loop."""

from __future__ import annotations

import dataclasses

import numpy as np

from lra.errors import InputError

PAD_ID = 0  # token id 0 is padding in every task; real tokens are >= 1


class DataError(InputError):
    """A missing, unreadable or malformed data file; the message names the path and the fix."""


@dataclasses.dataclass(frozen=True)
class Split:
    """One split as dense arrays: inputs N x L (or N x 2 x L for matching; 0 = padding), labels N, lengths
    (real tokens, for bucketing) N (or N x 2)."""

    name: str
    inputs: np.ndarray
    labels: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.labels)
        if len(self.inputs) != n or len(self.lengths) != n:
            raise ValueError(
                f"split {self.name!r}: inputs ({len(self.inputs)}), labels ({n}) and lengths "
                f"({len(self.lengths)}) disagree in size"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def max_lengths(self) -> np.ndarray:
        """Per-example length to pad to (the longer document for two inputs)."""
        return self.lengths if self.lengths.ndim == 1 else self.lengths.max(axis=1)


@dataclasses.dataclass(frozen=True)
class TaskData:
    """A loaded task: three splits and what the model needs to know about them."""

    train: Split
    validation: Split
    test: Split
    vocab_size: int  # number of token ids, padding included
    num_classes: int
    max_len: int  # padded length of every input
    dual: bool  # two inputs per example (matching)

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "validation": self.validation, "test": self.test}
