"""The named sweep grids: rows (task x attention variant) and seeds that ``scripts/sweep.py GRID`` expands.

``lra_families`` is every registered family at its defaults (read from the registry when used, so a
family registered later is a row too); ``convluna_listops`` and its kin are the ConvLuna paper's
rows (Tables 1 and 3, Figure 2, the published code's choices one by one). A grid is data:
:func:`lra.experiments.sweep.expand` turns it into runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

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


def _memory_variants(family: str, config: str, flag: str = "") -> tuple[Variant, ...]:
    return tuple(Variant(f"{family}-{m}", config, ",".join(filter(None, [f"mem={m}", flag]))) for m in (1, 16, 256))


# The ConvLuna reproduction's rows, cheapest and most telling first (Table 1's pair, then Table 3's
# ablations, then Figure 2's other memory sizes): a sweep cut short has the lead claims' runs.
_CONVLUNA_LISTOPS_ROWS = (
    ("Luna", "luna", "", 16),
    ("ConvLuna", "convluna", "", 16),
    ("OnlyScaling", "convluna", "only_scaling,", 16),
    ("OnlyFiltering", "convluna", "only_filtering,", 16),
    ("Luna", "luna", "", 1),
    ("ConvLuna", "convluna", "", 1),
    ("Luna", "luna", "", 256),
    ("ConvLuna", "convluna", "", 256),
)

# Which of the published code's choices make ConvLuna-16 (reference) differ from ConvLuna-16 on
# ListOps? Each row is ``:reference`` with one of its choices put back to this suite's default (the
# value the ListOps ``cpu`` preset has without ``reference``; tests/test_reproduce.py checks it), so
# a row that loses ConvLuna's accuracy names a choice the gain needs. Fields ``reference`` sets to
# the default's own value, or that ConvLuna never reads (``cls_position``: it pools the memory), are
# left out.
CONVLUNA_REFERENCE_REVERTS: tuple[tuple[str, str], ...] = (
    ("model.mask_padding", "True"),  # padding masks on
    ("data.buckets", "(64,128,256)"),  # length buckets instead of full-length padding
    ("model.zero_padding_embedding", "False"),  # padding embeds to a learned row
    ("model.param_init", "xavier"),  # this suite's initialisation instead of PyTorch's
    ("model.attention_kwargs.scale_unpacking", "True"),  # unpacking logits scaled by d^-1/2
    ("model.pre_pool_norm", "False"),  # no LayerNorm before pooling
    ("model.embedding_dropout", "True"),  # dropout on the input embedding
    ("weight_decay", "0.01"),  # the paper's ListOps weight decay instead of the code's 0.002
)

GRIDS: dict[str, Grid] = {
    "convluna_table1": Grid(
        (Variant("Transformer", "transformer"),)
        + _memory_variants("Luna", "luna")
        + _memory_variants("ConvLuna", "convluna"),
        description="ConvLuna paper, Table 1 and Figure 2: Transformer, Luna and ConvLuna with memory 1/16/256",
    ),
    "convluna_table3": Grid(
        _memory_variants("OnlyScaling", "convluna", "only_scaling")
        + _memory_variants("OnlyFiltering", "convluna", "only_filtering"),
        description="ConvLuna paper, Table 3 (ablations): OnlyScaling and OnlyFiltering with memory 1/16/256",
    ),
    "memory_degradation": Grid(
        tuple(
            Variant(f"{family}-{m}{suffix}", config, ",".join(filter(None, [f"mem={m}", option])))
            for suffix, option in (("", ""), (" (reference)", "reference"))
            for family, config in (("Luna", "luna"), ("ConvLuna", "convluna"))
            for m in (16, 256)
        ),
        description="ConvLuna paper, Figure 1 / Section 2: Luna and ConvLuna with memory 16/256, our defaults "
        "and the published code's (reference); diagnose with python -m lra.diagnose memory",
    ),
    "convluna_listops": Grid(
        tuple(
            Variant(f"{family}-{m} (reference)", config, f"mem={m},{flag}reference")
            for family, config, flag, m in _CONVLUNA_LISTOPS_ROWS[:2]
        )
        + (Variant("Transformer", "transformer"),)
        + tuple(
            Variant(f"{family}-{m} (reference)", config, f"mem={m},{flag}reference")
            for family, config, flag, m in _CONVLUNA_LISTOPS_ROWS[2:]
        )
        + (Variant("Luna-16", "luna", "mem=16"), Variant("ConvLuna-16", "convluna", "mem=16"))
        + tuple(
            Variant(f"ConvLuna-16 (reference) [{field}={value}]", "convluna", "mem=16,reference", ((field, value),))
            for field, value in CONVLUNA_REFERENCE_REVERTS
        )
        # Luna under the same revert of the initialisation: the pair that the earlier 3-seed lead
        # (before issue 25's model.param_init) ran with (lra.reproduce.convluna's init-lead claim).
        + (
            Variant(
                "Luna-16 (reference) [model.param_init=xavier]",
                "luna",
                "mem=16,reference",
                (("model.param_init", "xavier"),),
            ),
        ),
        tasks=("listops",),
        description="ConvLuna paper at laptop scale (python -m lra.reproduce convluna): Table 1's ListOps "
        "ranking, Table 3's ablations and Figure 2's memory sizes with the published code's "
        "choices (reference), against the Transformer; Luna-16 and ConvLuna-16 with our "
        "defaults; ConvLuna-16 (reference) with one of the code's choices reverted per row",
    ),
    "convluna_appendix": Grid(
        tuple(
            Variant(f"{label} (reference)", "convluna", f"mem=16,{flag}reference")
            for label, flag in (
                ("ConvLuna-16", ""),
                ("FixedTemperature-16", "fixed_temperature,"),
                ("OnlyFiltering-16", "only_filtering,"),
                ("MaxPool-16", "maxpool,"),
                ("ConvLuna-16 stride 2", "stride2,"),
                ("ConvLuna-16 stride 4", "stride4,"),
            )
        ),
        tasks=("listops",),
        description="ConvLuna paper, Appendices D and E on ListOps (python -m lra.reproduce.convluna_appendix): "
        "the packing temperature learned from 1, fixed at 1 or at d^-1/2; Conv K=32 against "
        "MaxPool K=4; stride 1/2/4; all with the published code's choices (reference)",
    ),
    "lra_families": Grid(
        registry_rows,  # Transformer, Luna-16, ConvLuna-16, Clustered-100, i-Clustered-100, ..., Gated Linear
        tasks=("listops",),
        description="Every attention family at its paper defaults, side by side on ListOps",
    ),
}
