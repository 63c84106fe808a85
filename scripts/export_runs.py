"""Copy finished runs' records (config, metrics, result; no checkpoints) into results/.

python scripts/export_runs.py runs/sweeps/lra_families_cpu results/runs/lra_families_cpu
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lra.training.run_files import export_records  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="folder holding run workdirs (searched recursively)")
    parser.add_argument("out", type=Path, help="where the records go")
    args = parser.parse_args()
    exported = export_records(args.runs, args.out)
    if not exported:
        raise SystemExit(f"no finished run (result.json) under {args.runs}")
    print(f"exported {len(exported)} runs to {args.out}")


if __name__ == "__main__":
    main()
