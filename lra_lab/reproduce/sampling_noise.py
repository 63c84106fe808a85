"""The test set's own noise beside each accuracy row: a binomial (Wilson) 95% interval over its examples.

A row's seed spread says how much training varies; it does not say how much one evaluation on a
finite test set can miss the model's true accuracy. With 1,000 examples an accuracy of 40% has a 95%
interval of about +-3 points whatever the seeds do, which is the scale of several effects reported
here. For each row of a claim's run records (``.../<row>/seed<N>/result.json``, the row named by its
``variant``) this gives the Wilson score interval of an accuracy equal to the row's mean on the
``data.num_test`` examples of its config (statsmodels' ``proportion_confint``): the noise of one
seed's test accuracy at that level. It is said beside the verdict, never used by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

CONFIDENCE = 0.95


def wilson(accuracy: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of an accuracy measured on ``n`` examples."""
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(accuracy * n, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def _num_test(config: Path) -> int | None:
    try:
        value = json.loads(config.read_text())["data"]["num_test"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def rows(root: Path, records: Iterable[str]) -> list[tuple[str, float, int, tuple[float, float]]]:
    """(row, mean test accuracy, test examples, Wilson interval) per row of the run records among
    ``records``, in their order; rows without a readable test-set size are left out."""
    accs: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    for rel in records:
        path = root / rel
        if path.name != "result.json" or not path.exists():
            continue
        try:
            result = json.loads(path.read_text())
            accuracy = float(result["test_accuracy"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        n = _num_test(path.parent / "config.json")
        if n is None:
            continue
        row = str(result.get("variant") or path.parent.parent.name)
        accs.setdefault(row, []).append(accuracy)
        sizes.setdefault(row, n)
    out = []
    for row, values in accs.items():
        mean = sum(values) / len(values)
        out.append((row, mean, sizes[row], wilson(mean, sizes[row])))
    return out


def sentence(root: Path, records: Iterable[str]) -> str:
    """The rows' intervals in one line ("" when the claim has no accuracy rows)."""
    found = rows(root, records)
    if not found:
        return ""
    sizes = sorted({n for _, _, n, _ in found})
    parts = [f"{row} {100 * mean:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" for row, mean, _, (lo, hi) in found]
    return (f"test-set noise: binomial 95% interval (Wilson) of one seed's accuracy at the row's mean on "
            f"{' / '.join(f'{n:,}' for n in sizes)} test examples: " + "; ".join(parts))
