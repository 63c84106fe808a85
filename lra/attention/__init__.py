"""Registry of attention families, name -> ``Family`` (docs/design.md, "The attention contract"; adding_a_family.md).

Read in this order:

- ``base``: the ``Attention`` base class, the q/k/v/out projections, masks, masked dot-product attention.
- ``softmax``: the Transformer baseline.
- ``luna``: Luna and ConvLuna (attention through a shared memory; the filter).
- ``clustered`` (+ ``clustered_shared``, ``clustered_accelerator``): clustered and improved clustered attention.
- ``agglomerative``, ``dispersed`` (+ ``dispersed_gather``), ``linear`` (cheap and gated linear): the other families.
- ``trees``: which families can evaluate each other's weights.

The families import nothing of lra outside this package (tests/test_layering.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lra.attention.agglomerative import AgglomerativeAttention
from lra.attention.base import Attention
from lra.attention.clustered import ClusteredAttention, ImprovedClusteredAttention
from lra.attention.dispersed import DispersedAttention
from lra.attention.linear import GatedLinearAttention, LinearAttention
from lra.attention.luna import ConvLunaAttention, LunaAttention
from lra.attention.softmax import SoftmaxAttention
from lra.errors import InputError
from lra.papers.convluna import (
    CONVLUNA_FLAGS,
    CONVLUNA_KWARGS,
    CONVLUNA_TASK_KWARGS,
    CONVLUNA_TASK_MODEL,
    MEMORY_FAMILY_MODEL,
)


@dataclasses.dataclass(frozen=True)
class Family:
    """One attention family: the single source of its configs (``lra.family_configs``), benchmark cases
    (``lra_lab.bench.steps``) and sweep row (``lra_lab.experiments.sweep``); fields: docs/adding_a_family.md."""

    name: str
    module: type[Attention]
    label: str  # the table row; ``{field}`` is filled from the options, e.g. "Luna-{memory_size}"
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    model: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    task_kwargs: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    task_model: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    flags: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    file_stem: str = ""  # "" = the name; the Transformer's files are configs/<task>_transformer.py
    quadratic: bool = False  # builds the N x N scores (the Transformer baseline); no efficient family may

    @property
    def uses_memory(self) -> bool:
        """A memory family (Luna, ConvLuna): the encoder passes a memory from block to block."""
        return self.module.uses_memory

    @property
    def stem(self) -> str:
        return self.file_stem or self.name

    def task_settings(self, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(attention_kwargs, model fields) of the family's config for ``task``."""
        kwargs = {**self.kwargs, **self.task_kwargs.get(task, {})}
        return kwargs, {**self.model, **self.task_model.get(task, {})}

    def default_label(self) -> str:
        """The row name at the family's defaults (``Luna-16``): :func:`option_defaults` under its ``kwargs``."""
        return format_label(self.label, {**option_defaults(self.name), **self.kwargs})


def format_label(label: str, options: dict[str, Any]) -> str:
    """``label`` filled from ``options``, a whole float as an integer (``scale=1.0`` and ``1`` give ``MeanPool-x1``):
    one label and run folder (lra.training.run_files.slug) per value, however it was typed."""
    return label.format(**{k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in options.items()})


FAMILIES: dict[str, Family] = {}  # name -> Family, in registration order (the tables' and benchmarks' order)
ATTENTIONS: dict[str, type[Attention]] = {}  # name -> module class, kept equal to FAMILIES by register


def register(family: Family) -> Family:
    """Add ``family`` to the registry (a name registered twice is a bug: ValueError)."""
    if family.name in FAMILIES:
        raise ValueError(f"attention family {family.name!r} is already registered")
    if not (isinstance(family.module, type) and issubclass(family.module, Attention)):
        raise ValueError(f"family {family.name!r}: module must be a subclass of lra.attention.base.Attention")
    FAMILIES[family.name] = family
    ATTENTIONS[family.name] = family.module
    return family


def unregister(name: str) -> None:
    """Remove a family registered by ``register`` (tests that add a toy family clean up with it)."""
    del FAMILIES[name], ATTENTIONS[name]


_CLUSTERS = dict(num_clusters=100, bits=63, iterations=10)  # Vyas et al.'s LRA settings: C = 100, 63-bit LSH
_LRA_TASKS_CLS = ("listops", "text", "matching", "image")  # dispersed pools CLS there; Pathfinder keeps the mean

register(Family("softmax", SoftmaxAttention, "Transformer", file_stem="transformer", quadratic=True))
register(Family("luna", LunaAttention, "Luna-{memory_size}", model=MEMORY_FAMILY_MODEL))
register(
    Family(
        "convluna",
        ConvLunaAttention,
        "ConvLuna-{memory_size}",
        kwargs=CONVLUNA_KWARGS,  # Table 2, as the next two: lra.papers.convluna
        model=MEMORY_FAMILY_MODEL,
        task_kwargs=CONVLUNA_TASK_KWARGS,
        task_model=CONVLUNA_TASK_MODEL,
        flags=CONVLUNA_FLAGS,
    )
)
register(Family("clustered", ClusteredAttention, "Clustered-{num_clusters}", kwargs=_CLUSTERS))
register(
    Family(
        "improved_clustered",
        ImprovedClusteredAttention,
        "i-Clustered-{num_clusters}",
        kwargs=dict(num_clusters=100, topk=32, bits=63, iterations=10),
    )
)
register(Family("agglomerative", AgglomerativeAttention, "Agglomerative"))
register(
    Family(
        "dispersed",
        DispersedAttention,
        "Dispersed",
        kwargs=dict(window=4, max_gap=180),
        model=dict(norm="pre"),
        task_model={t: dict(pooling="cls") for t in _LRA_TASKS_CLS},
    )
)
register(Family("linear", LinearAttention, "Linear"))
register(Family("gated_linear", GatedLinearAttention, "Gated Linear"))


def family(name: str) -> Family:
    """The family registered as ``name``; an InputError naming the registered ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise InputError(f"unknown attention {name!r}; valid names: {', '.join(sorted(FAMILIES))}") from None


def get(name: str) -> type[Attention]:
    """Return the attention class registered as ``name``; an InputError naming the valid ones otherwise."""
    return family(name).module


def option_names(name: str) -> list[str]:
    """The family options (dataclass fields beyond the common ones) that ``name`` accepts."""
    common = {f.name for f in dataclasses.fields(Attention)}
    return [
        f.name
        for f in dataclasses.fields(get(name))
        if f.init and f.name not in common and f.name not in ("parent", "name")
    ]


def option_defaults(name: str) -> dict[str, object]:
    """Each family option of ``name`` with its paper default: what a config that leaves it out trains with."""
    fields = {f.name: f for f in dataclasses.fields(get(name))}
    return {k: fields[k].default for k in option_names(name) if fields[k].default is not dataclasses.MISSING}
