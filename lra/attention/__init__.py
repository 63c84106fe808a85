"""Registry of attention families: name -> flax module class (docs/design.md).

Every registered module has the call signature
``y_BxNxD, memory = attn(x_BxNxD, mask_BxN, memory=None, deterministic=True)``.

Read in this order:

- ``base``: the ``Attention`` base class (common fields), the q/k/v/out projections, masks and the
  masked dot-product attention the families build on.
- ``softmax``: the Transformer baseline.
- ``luna``: Luna and ConvLuna (attention through a shared memory; the filter).
- ``clustered``: clustered and improved clustered attention (LSH + Hamming K-means).
- ``agglomerative``, ``dispersed``, ``linear`` (cheap and gated linear): the other families.

The families import nothing of lra outside this package (tests/test_layering.py).
"""

from __future__ import annotations

import dataclasses

from lra.errors import InputError
from lra.attention.agglomerative import AgglomerativeAttention
from lra.attention.base import Attention
from lra.attention.clustered import ClusteredAttention, ImprovedClusteredAttention
from lra.attention.dispersed import DispersedAttention
from lra.attention.linear import GatedLinearAttention, LinearAttention
from lra.attention.luna import ConvLunaAttention, LunaAttention
from lra.attention.softmax import SoftmaxAttention

ATTENTIONS: dict[str, type[Attention]] = {
    "softmax": SoftmaxAttention,
    "luna": LunaAttention,
    "convluna": ConvLunaAttention,
    "clustered": ClusteredAttention,
    "improved_clustered": ImprovedClusteredAttention,
    "agglomerative": AgglomerativeAttention,
    "dispersed": DispersedAttention,
    "linear": LinearAttention,
    "gated_linear": GatedLinearAttention,
}


def get(name: str) -> type[Attention]:
    """Return the attention class registered as ``name``; a clear ValueError otherwise."""
    try:
        return ATTENTIONS[name]
    except KeyError:
        raise InputError(
            f"unknown attention {name!r}; valid names: {', '.join(sorted(ATTENTIONS))}"
        ) from None


def option_names(name: str) -> list[str]:
    """The family options (dataclass fields beyond the common ones) that ``name`` accepts."""
    common = {f.name for f in dataclasses.fields(Attention)}
    return [
        f.name
        for f in dataclasses.fields(get(name))
        if f.init and f.name not in common and f.name not in ("parent", "name")
    ]


def option_defaults(name: str) -> dict[str, object]:
    """Each family option of ``name`` with its paper default: what a config that leaves an option out
    trains with (``memory_size`` absent is ``memory_size=16`` for Luna and ConvLuna)."""
    fields = {f.name: f for f in dataclasses.fields(get(name))}
    return {k: fields[k].default for k in option_names(name) if fields[k].default is not dataclasses.MISSING}
