"""Reading committed records and the statistics the verdict rules use.

Records are read, never trusted: a missing or malformed one is reported as missing (the claim is
then "incomplete"), not turned into a number.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None if it is absent or not a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def seed_accuracies(root: Path, run_dir: str, seeds: Sequence[int],
                    steps: int | None = None) -> tuple[dict[int, float], list[str]]:
    """Test accuracy (percent) per seed from ``<run_dir>/seed<k>/result.json``, and what is missing.

    With ``steps``, a result of another number of training steps counts as missing (named so).
    """
    found: dict[int, float] = {}
    missing: list[str] = []
    for k in seeds:
        rel = f"{run_dir}/seed{k}/result.json"
        result = read_json(root / rel)
        acc = None if result is None else result.get("test_accuracy")
        if steps is not None and result is not None and result.get("num_train_steps", steps) != steps:
            missing.append(f"{rel} at {steps} steps (it holds {result.get('num_train_steps')})")
        elif isinstance(acc, (int, float)) and 0.0 <= acc <= 1.0:
            found[k] = 100.0 * float(acc)
        else:
            missing.append(rel)
    return found, missing


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def fmt_mean_std(values: Sequence[float], unit: str = "%") -> str:
    mean, std = mean_std(values)
    return f"{mean:.1f} +- {std:.1f}{unit} ({len(values)} seed{'s' if len(values) != 1 else ''})"


def paired_greater(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[float, float, int]:
    """Mean of a - b over the seeds both have, and the one-sided paired t-test's p (H1: a > b).

    Paired by seed: the same seed draws the same data order and (for equal shapes) similar
    initial weights, so pairing removes the shared part of the seed-to-seed spread.
    """
    from scipy import stats  # the tables extra (installed with the tests)

    seeds = sorted(set(a) & set(b))
    diffs = [a[k] - b[k] for k in seeds]
    if len(diffs) < 2:
        raise ValueError("a paired test needs at least 2 seeds in common")
    mean = sum(diffs) / len(diffs)
    if all(abs(d - diffs[0]) < 1e-12 for d in diffs):  # zero variance: t is undefined
        return mean, (0.0 if mean > 0 else 1.0), len(diffs)
    p = float(stats.ttest_rel([a[k] for k in seeds], [b[k] for k in seeds], alternative="greater").pvalue)
    return mean, p, len(diffs)


def friedman_p(samples: Sequence[Sequence[float]]) -> float:
    """Friedman test's p over k >= 3 related samples (blocks = seeds), as the ConvLuna paper's Figure 2."""
    from scipy import stats

    if all(list(s) == list(samples[0]) for s in samples):  # identical samples: nothing to reject (scipy: NaN)
        return 1.0
    return float(stats.friedmanchisquare(*samples).pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input's order (step-down, kept monotone, capped at 1)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [1.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
