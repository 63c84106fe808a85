"""Benchmark-only rows that are not attention families: ``Projections``, the floor every family
stands on (its q/k/v/out projections alone), and ``REFERENCES``, their names."""

from __future__ import annotations

import flax.linen as nn
import jax

from lra import attention
from lra.attention.base import project_out, project_qkv


class Projections(attention.Attention):
    """The reference floor: only the q/k/v/out projections every family shares, y = out(q + k + v).

    Its time per token against N is what this machine charges for the dense layers alone: every
    family runs them too, so that part of a family's growth is not the family's doing.
    """

    @nn.compact
    def __call__(
        self, x_BxNxD: jax.Array, mask_BxN: jax.Array, memory: jax.Array | None = None, deterministic: bool = True
    ) -> tuple[jax.Array, None]:
        q, k, v = project_qkv(self, x_BxNxD)
        return project_out(self, q + k + v, x_BxNxD.shape[-1]), None


REFERENCES = {"projections": Projections}  # benchmark-only rows, not attention families
