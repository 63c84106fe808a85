"""The suite's statistics: mean ± sample std over seeds, the Friedman test and Holm's correction.

One module for every caller, so each test and its tie rule are written once. ConvLuna paper, Figure 2 / Appendix A:
per (model, task), Friedman over the memory sizes, blocks paired by seed (seeds every size has), H0 "expected
accuracies are equal"; all p-values at one scale are Holm-corrected together (García & Herrera, 2008)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

MIN_FRIEDMAN_SEEDS = 2  # fewer paired seeds: not tested


@dataclasses.dataclass
class Cell:
    """Test accuracies (percent) of one (variant, task) over seeds."""

    seeds: list[int]
    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def std(self) -> float:
        """Sample standard deviation (ddof=1); NaN for one seed."""
        return float(np.std(self.values, ddof=1)) if self.n > 1 else math.nan


@dataclasses.dataclass
class FriedmanResult:
    model: str
    task: str
    sizes: tuple[int, ...]
    seeds: list[int]  # the blocks: seeds present for every size
    statistic: float = math.nan
    p_value: float = math.nan
    p_holm: float = math.nan
    note: str = ""  # why a pair was not tested

    @property
    def tested(self) -> bool:
        return math.isfinite(self.p_value)


def friedman(model: str, task: str, by_size: Mapping[int, Mapping[int, float]], sizes: Sequence[int]) -> FriedmanResult:
    """Friedman test over ``sizes`` for one (model, task); ``by_size[size][seed] = accuracy``."""
    missing = [s for s in sizes if s not in by_size]
    common = sorted(set.intersection(*(set(by_size[s]) for s in sizes))) if not missing else []
    result = FriedmanResult(model, task, tuple(sizes), common)
    if missing:
        result.note = f"no runs of size(s) {', '.join(map(str, missing))}"
    elif len(common) < MIN_FRIEDMAN_SEEDS:
        result.note = f"{len(common)} seed(s) shared by all sizes; need {MIN_FRIEDMAN_SEEDS}"
    else:
        tested = friedman_test([[by_size[s][seed] for seed in common] for s in sizes])
        if tested is None:
            result.note = "every seed ties across sizes: the statistic is undefined"
        else:
            result.statistic, result.p_value = tested
    return result


def correct_holm(results: Sequence[FriedmanResult]) -> None:
    """Set ``p_holm`` of the tested results, correcting over all of them together."""
    tested = [r for r in results if r.tested]
    for r, p in zip(tested, holm([r.p_value for r in tested]), strict=False):
        r.p_holm = p


def friedman_test(samples: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """scipy's Friedman (statistic, p) over k >= 3 samples (blocks: seeds in order); None if all blocks tie (0/0)."""
    from scipy.stats import friedmanchisquare

    if all(len(set(block)) == 1 for block in zip(*samples, strict=False)):
        return None
    stat = friedmanchisquare(*samples)
    return float(stat.statistic), float(stat.pvalue)


def friedman_p(samples: Sequence[Sequence[float]]) -> float:
    """:func:`friedman_test`'s p, and 1.0 when every block ties (no evidence against equal treatments)."""
    tested = friedman_test(samples)
    return 1.0 if tested is None else tested[1]


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values in the input's order (statsmodels' ``multipletests(method="holm")``)."""
    if not pvalues:
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(p) for p in multipletests(list(pvalues), method="holm")[1]]
