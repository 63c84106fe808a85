"""The named sweep grids: rows (task x attention variant) and seeds that ``scripts/sweep.py GRID`` expands.

``lra_families`` is every registered family at its defaults (read from the registry when used, so a
family registered later is a row too); ``convluna_listops`` and its kin are the ConvLuna paper's
rows (Tables 1 and 3, Figure 2, the published code's choices one by one), defined in
``lra.papers.convluna`` and made Grids here. A grid is data: :func:`lra_lab.experiments.sweep.expand`
turns it into runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from lra.papers import convluna

TASKS = ("text", "matching", "listops", "image")  # the papers' column order


@dataclasses.dataclass(frozen=True)
class Variant:
    """One table row: ``configs/<task>_<config>.py`` with ``options`` after the colon."""

    label: str  # the row name; must equal the config's ``variant`` (followed by `` [settings]`` if any)
    config: str  # "transformer", "luna", "convluna", ...; "" = configs/<task>.py (options name family=NAME)
    options: str = ""  # e.g. "mem=16,only_scaling"
    # Config fields this row alone sets (passed as --config.K=V; the sweep's own --set ones win on a
    # clash), e.g. (("model.mask_padding", "True"),): one ``reference`` choice reverted. Unlike --set
    # overrides they are not part of the sweep's scale (tables split such rows by config instead).
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def config_variant(self) -> str:
        """The ``variant`` the config builds: the label without its `` [settings]`` suffix."""
        return self.label.rsplit(" [", 1)[0] if self.settings else self.label


@dataclasses.dataclass(frozen=True)
class Grid:
    rows: tuple[Variant, ...] | Callable[[tuple[str, ...]], tuple[Variant, ...]]  # or rows(tasks), read when used
    tasks: tuple[str, ...] = TASKS
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    description: str = ""

    @property
    def variants(self) -> tuple[Variant, ...]:
        """The grid's rows; a grid built from the attention registry reads it now, so a family
        registered after this module was imported is a row too."""
        return self.rows(self.tasks) if callable(self.rows) else self.rows


def registry_rows(tasks: Sequence[str]) -> tuple[Variant, ...]:
    """Every registered family at its defaults, in registration order (lra.attention.FAMILIES): its
    own ``configs/<task>_<family>.py`` where it has one for every task, else ``configs/<task>.py``
    with ``family=NAME`` (lra.family_configs.config_spec)."""
    from lra import attention
    from lra.family_configs import config_spec

    rows = []
    for name, family in attention.FAMILIES.items():
        firsts = {config_spec(task, name)[1] for task in tasks}
        own = firsts == {""}
        rows.append(Variant(family.default_label(), family.stem if own else "", "" if own else f"family={name}"))
    return tuple(rows)


def paper_grids(grids: dict[str, dict[str, Any]]) -> dict[str, Grid]:
    """A paper's grids (lra.papers: plain rows and Grid's other fields) as Grids of Variants."""
    return {name: Grid(**{**spec, "rows": tuple(Variant(*r) for r in spec["rows"])}) for name, spec in grids.items()}


# The papers' grids (the ConvLuna paper's rows: lra.papers.convluna), then the generic ones.
GRIDS: dict[str, Grid] = {
    **paper_grids(convluna.SWEEP_GRIDS),
    "lra_families": Grid(
        registry_rows,  # Transformer, Luna-16, ConvLuna-16, Clustered-100, i-Clustered-100, ..., Gated Linear
        tasks=("listops",),
        description="Every attention family at its paper defaults, side by side on ListOps",
    ),
}
