"""Compare the training-loss curves of two sweeps run by run (lra_lab/reports/curve_compare.py), e.g. bfloat16
against float32 at the same seed:

    python scripts/compare_curves.py ROOT_A ROOT_B --labels float32 bfloat16 --out results/bench --name NAME

Writes NAME.md (a table: final losses, largest gap, validation accuracy, agree), NAME.json and
NAME.png (one panel per run, both curves). Exit 1 when some pair does not agree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lra_lab.reports import curve_compare


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root_a", type=Path)
    p.add_argument("root_b", type=Path)
    p.add_argument("--labels", nargs=2, default=["A", "B"])
    p.add_argument("--window", type=int, default=20, help="moving mean over this many logged steps")
    p.add_argument("--skip", type=float, default=0.1, help="fraction of the first steps left out of the gap")
    p.add_argument("--tolerance", type=float, default=0.05, help="largest gap (absolute loss) that agrees")
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", required=True)
    args = p.parse_args(argv)
    for root in (args.root_a, args.root_b):
        if not root.is_dir():
            print(f"error: {root} is not a folder of runs", file=sys.stderr)
            return 2
    try:
        rows = curve_compare.compare(args.root_a, args.root_b, args.window, args.skip, args.tolerance)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings = {"window": args.window, "skip": args.skip, "tolerance": args.tolerance}
    command = " ".join(["python", "scripts/compare_curves.py", *(argv if argv is not None else sys.argv[1:])])
    report = curve_compare.write(rows, args.labels, [args.root_a, args.root_b], settings, command, args.out, args.name)
    print(curve_compare.markdown(report), end="")
    print(f"wrote {args.out / args.name}.*")
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
