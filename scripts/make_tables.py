"""Rebuild every results table and plot from the runs on disk.

    python scripts/make_tables.py --results runs/sweeps --out results/tables
    python scripts/make_tables.py --results results/runs --out results/tables --seeds 5

Reads every result.json under --results (and each run's metrics.jsonl and sweep_run.json) and
writes under --out, one folder per scale (preset, training steps, overrides):
results.md / results.tex / runs.csv (test accuracy %, mean ± sample std over seeds, paper layout),
friedman.md / .tex / .csv / .png (Friedman test over memory sizes 1/16/256, Holm-corrected),
curves_<task>.png (validation accuracy vs step, mean and min-max band over seeds, test accuracy in
the legend, chance and, with --majority, the majority-class line); plus tables.md (all of it on
one page) and summary.json (every number computed). See lra/reports/tables.py for the rules (bold, n=).

Needs the tables extra (matplotlib, scipy, statsmodels): pip install -e ".[tables]".
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

try:
    from lra.reports import tables
except ModuleNotFoundError as e:  # a core install (training only) lacks the tables extra
    sys.exit(f'{e}: make_tables needs the tables extra, pip install -e ".[tables]"')


def parse_majority(items: list[str]) -> dict[str, float]:
    """``["listops=16.9"]`` -> ``{"listops": 16.9}``; a ValueError naming the bad item otherwise."""
    out = {}
    for item in items:
        task, sep, value = item.partition("=")
        try:
            percent = float(value)
        except ValueError:
            percent = -1.0
        if not sep or not task or not 0.0 <= percent <= 100.0:
            raise ValueError(f"--majority {item!r}: expected TASK=PERCENT, e.g. listops=16.9")
        out[task] = percent
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path("runs"), help="folder searched for result.json files")
    p.add_argument("--out", type=Path, default=Path("results/tables"))
    p.add_argument("--seeds", type=int, help="seeds a complete cell has (default: the most any cell of the table has)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--note", help="a sentence printed under every table, e.g. how these runs differ from the paper")
    p.add_argument(
        "--note-from",
        type=Path,
        metavar="SUMMARY_JSON",
        help="reuse the note of an earlier summary.json (regenerates a committed table byte for byte)",
    )
    p.add_argument(
        "--majority",
        action="append",
        default=[],
        metavar="TASK=PERCENT",
        help="accuracy (%%) of always answering the validation split's most frequent label, measured "
        "on the data; drawn on TASK's curves as 'majority class' (repeatable; chance, 1/classes, "
        "is always drawn)",
    )
    p.add_argument(
        "--no-listops-baseline",
        action="store_true",
        help="leave out ListOps's structure-free baseline (computed from the runs' data, which it loads "
        "or generates: lra.reports.listops_baseline)",
    )
    args = p.parse_args(argv)
    # a skipped record or a split cell is a "warning: ..." line naming the files, not Python's source echo
    previous = warnings.formatwarning
    warnings.formatwarning = lambda message, category, filename, lineno, line=None: f"warning: {message}\n"
    try:
        return _make(p, args)
    finally:
        warnings.formatwarning = previous


def _make(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not args.results.is_dir():
        p.error(f"--results {args.results} is not a folder")
    try:
        majority = parse_majority(args.majority)
    except ValueError as e:
        p.error(str(e))
    if args.note_from is not None:
        if args.note is not None:
            p.error("give --note or --note-from, not both")
        try:
            args.note = json.loads(args.note_from.read_text()).get("note")
        except (OSError, ValueError, AttributeError) as e:
            p.error(f"--note-from {args.note_from}: not a readable summary.json ({e})")
    summary = tables.write_all(
        args.results,
        args.out,
        args.seeds,
        plots_enabled=not args.no_plots,
        note=args.note,
        majority=majority,
        structure_free_baseline=not args.no_listops_baseline,
    )
    if not summary["tables"]:
        print(f"no finished runs (result.json) under {args.results}", file=sys.stderr)
        return 1
    print((args.out / "tables.md").read_text())
    print(
        f"wrote {len(summary['tables'])} table(s) from {summary['num_runs']} runs to {args.out} "
        f"(see {args.out / 'tables.md'}, {args.out / 'summary.json'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
