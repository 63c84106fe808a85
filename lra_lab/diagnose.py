"""``python -m lra_lab.diagnose``: diagnostics of finished runs (the work: lra_lab/reports/diagnostics.py).
``memory``: the memory degradation of the memory families (the ConvLuna paper's Figure 1 and
Section 2) at each run's best checkpoint.

    python -m lra_lab.diagnose memory --workdir runs/listops_luna-16_cpu/seed0 runs/listops_convluna-16_cpu/seed0
    python -m lra_lab.diagnose memory --workdir RUN [RUN ...] --out results/diagnostics

Exit status: 0 done; 2 a run that cannot be diagnosed or a missing file (one ``error:`` line);
4 / 5 an unwritable or damaged file (lra.errors).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from lra_lab.reports.diagnostics import DiagnoseError, diagnose_memory


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lra_lab.diagnose",
        description="Diagnostics of finished lra.train runs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    memory = sub.add_parser(
        "memory",
        help="memory degradation of Luna / ConvLuna runs (the ConvLuna paper's Figure 1)",
        description="Memory degradation of memory-family runs (luna, convluna) at their best checkpoints, on "
        "the first eval_batch_size validation examples: heatmaps of the learned initial memory "
        "and each block's memory (memory_<run>.png), the statistics of lra.memory_stats "
        "(memory_stats.md, memory_stats.json), memory_degradation.png, and memory_curves.png "
        "when the runs logged memory statistics during training.",
    )
    memory.add_argument(
        "--workdir",
        nargs="+",
        required=True,
        metavar="RUN",
        help="run directories written by lra.train (memory families only)",
    )
    memory.add_argument("--out", metavar="DIR", default=None, help="output folder (default: <first RUN>/diagnostics)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from lra.training.provenance import mark_start

    mark_start()
    command = shlex.join(
        ["python", "-m", "lra_lab.diagnose", "memory", "--workdir", *args.workdir]
        + (["--out", args.out] if args.out else [])
    )
    from lra.evaluate import error_line

    try:
        diagnose_memory(args.workdir, args.out, command, log=lambda m: print(m, flush=True))
    except DiagnoseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as e:  # a damaged checkpoint / run file (5), data (2), disk (4)
        try:
            code, line = error_line(e)
        except TypeError:
            raise e from None  # a bug, not a run error: keep the traceback
        print(line, file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
