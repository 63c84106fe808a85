"""Is A better than B? Paired comparisons of finished runs over their common seeds.

``python -m lra.reports.compare --results runs "ConvLuna-16" "Luna-16"`` prints each row's test accuracy (mean ± sample
std) on one task (``--task``); for two rows the paired difference's 95% CI (t), the paired t-test and Wilcoxon
(two-sided, and one-sided "first > second"); for three or more Friedman and pairwise paired t with Holm's correction.
"No significant difference" is not equivalence: the interval bounds the difference.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def paired(a: Mapping[int, float], b: Mapping[int, float], confidence: float = 0.95) -> dict[str, Any]:
    """Paired statistics of ``a - b`` over their common seeds (values in percent)."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        raise ValueError(f"a paired comparison needs at least 2 common seeds; common: {seeds}")
    x, y = np.array([a[k] for k in seeds]), np.array([b[k] for k in seeds])
    d = x - y
    n, mean = len(d), float(d.mean())
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)) if sd > 0 else 0.0
    out: dict[str, Any] = {
        "seeds": seeds,
        "n": n,
        "mean_difference": mean,
        "sd_difference": sd,
        "ci": [mean - half, mean + half],
        "confidence": confidence,
    }
    if sd == 0:
        out.update(
            t_p_two_sided=float("nan"),
            t_p_greater=float("nan"),
            wilcoxon_p_two_sided=float("nan"),
            wilcoxon_p_greater=float("nan"),
            note="every paired difference is equal: no test",
        )
        return out
    out["t_p_two_sided"] = float(stats.ttest_rel(x, y).pvalue)
    out["t_p_greater"] = float(stats.ttest_rel(x, y, alternative="greater").pvalue)
    with warnings.catch_warnings():  # scipy: exact p-values are coarse for small n
        warnings.simplefilter("ignore")
        out["wilcoxon_p_two_sided"] = float(stats.wilcoxon(x, y).pvalue)
        out["wilcoxon_p_greater"] = float(stats.wilcoxon(x, y, alternative="greater").pvalue)
    return out


def friedman_holm(rows: Mapping[str, Mapping[int, float]]) -> dict[str, Any]:
    """Friedman over >= 3 rows on the seeds all of them have, and Holm-corrected pairwise paired t."""
    from scipy import stats

    from lra.reports.stats import friedman_p, holm

    names = list(rows)
    seeds = sorted(set.intersection(*(set(rows[n]) for n in names)))
    if len(seeds) < 2:
        raise ValueError(f"Friedman needs at least 2 seeds common to every row; common: {seeds}")
    samples = [[rows[n][k] for k in seeds] for n in names]
    friedman = friedman_p(samples)
    pairs = list(itertools.combinations(names, 2))
    raw = []
    for a, b in pairs:
        x, y = np.array([rows[a][k] for k in seeds]), np.array([rows[b][k] for k in seeds])
        raw.append(float(stats.ttest_rel(x, y).pvalue) if np.any(x != y) else 1.0)
    adjusted = holm(raw)
    return {
        "seeds": seeds,
        "friedman_p": friedman,
        "pairs": [
            {
                "a": a,
                "b": b,
                "mean_difference": float(np.mean([rows[a][k] - rows[b][k] for k in seeds])),
                "t_p": p,
                "t_p_holm": float(q),
            }
            for (a, b), p, q in zip(pairs, raw, adjusted, strict=False)
        ],
    }


def mean_std_line(name: str, values: Sequence[float]) -> str:
    """``name: 39.1 ± 2.3% over 5 seeds`` (sample std)."""
    arr = np.asarray(values, float)
    std = f" ± {arr.std(ddof=1):.2f}" if len(arr) > 1 else ""
    return f"{name}: {arr.mean():.2f}{std}% over {len(arr)} seed{'s' if len(arr) != 1 else ''}"


def load_rows(results: Path, names: Sequence[str], task: str | None) -> tuple[dict[str, dict[int, float]], str]:
    """The named rows' test accuracy (%) per seed; the task used."""
    from lra.reports.tables import load_results, split_by_config

    runs, _ = load_results(results)
    runs = split_by_config(runs)
    tasks = sorted({r.task for r in runs})
    if task is None:
        if len(tasks) != 1:
            raise ValueError(f"the runs under {results} are of several tasks ({', '.join(tasks)}): pass --task")
        task = tasks[0]
    runs = [r for r in runs if r.task == task]
    variants = sorted({r.variant for r in runs})
    rows: dict[str, dict[int, float]] = {}
    for name in names:
        mine = [r for r in runs if r.variant == name]
        if not mine:
            import difflib

            close = difflib.get_close_matches(name, variants, n=3, cutoff=0.4)
            raise ValueError(
                f"no finished {task} run of {name!r} under {results}"
                + (
                    f"; did you mean {', '.join(repr(c) for c in close)}?"
                    if close
                    else f"; rows: {', '.join(repr(v) for v in variants) or '(none)'}"
                )
            )
        steps = {r.num_train_steps for r in mine}
        if len(steps) > 1:
            raise ValueError(f"{name!r} has runs of {sorted(steps)} steps: compare runs of one scale")
        by_seed: dict[int, float] = {}
        for r in mine:
            if r.seed in by_seed:
                raise ValueError(f"{name!r} has two runs of seed {r.seed} under {results}: {r.workdir}")
            by_seed[r.seed] = 100.0 * r.test_accuracy
        rows[name] = by_seed
    return rows, task


def report(rows: Mapping[str, Mapping[int, float]], task: str) -> str:
    lines = [f"{task}, test accuracy at the best-validation step:"]
    lines += ["  " + mean_std_line(n, list(v.values())) for n, v in rows.items()]
    names = list(rows)
    if len(names) == 2:
        r = paired(rows[names[0]], rows[names[1]])
        lines += [
            f"paired over {r['n']} common seeds ({', '.join(map(str, r['seeds']))}): "
            f"{names[0]} - {names[1]} = {r['mean_difference']:+.2f} points, "
            f"{100 * r['confidence']:.0f}% CI [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]"
        ]
        if "note" in r:
            lines.append(f"  {r['note']}")
        else:
            lines += [
                f"  paired t: p = {r['t_p_two_sided']:.3g} (two-sided), {r['t_p_greater']:.3g} "
                f"(one-sided, {names[0]} > {names[1]})",
                f"  Wilcoxon signed-rank: p = {r['wilcoxon_p_two_sided']:.3g} (two-sided), "
                f"{r['wilcoxon_p_greater']:.3g} (one-sided)",
            ]
        lines.append("  (a p-value above 0.05 is not evidence of equality: the interval bounds the difference)")
    elif len(names) >= 3:
        f = friedman_holm(rows)
        lines.append(
            f"Friedman over {len(names)} rows, {len(f['seeds'])} common seeds as blocks: " f"p = {f['friedman_p']:.3g}"
        )
        lines += [
            f"  {p['a']} - {p['b']}: {p['mean_difference']:+.2f} points, paired t p = {p['t_p']:.3g}, "
            f"Holm {p['t_p_holm']:.3g}"
            for p in f["pairs"]
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lra.reports.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rows", nargs="+", help="variant names as the tables print them, e.g. 'ConvLuna-16'")
    parser.add_argument("--results", type=Path, default=Path("runs"), help="folder searched for result.json")
    parser.add_argument("--task", help="the task (default: the only one under --results)")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(f"error: --results {args.results} is not a folder (lra.train writes runs/ by default)", file=sys.stderr)
        return 2
    previous = warnings.formatwarning
    warnings.formatwarning = lambda message, category, filename, lineno, line=None: f"warning: {message}\n"
    try:
        rows, task = load_rows(args.results, args.rows, args.task)
        print(report(rows, task))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = previous
    return 0


if __name__ == "__main__":
    sys.exit(main())
