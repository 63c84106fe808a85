"""Training-step benchmark (lra/step_bench.py): two commands.

steps: every family's paper-scale ListOps train step at several lengths, dtypes and seed counts:
steps/s, peak memory, XLA FLOPs and MFU. The full grid on a GPU, in one command:

    python scripts/bench_training.py steps --out results/bench --name training_steps_h100

Chunk it with --families / --lengths / --dtypes / --seeds. A CPU run at a size that fits minutes:

    python scripts/bench_training.py steps --lengths 256 512 --dtypes float32 --seeds 1 5 \\
        --set batch_size=4 --steps 3 --name training_steps_cpu

seeds: 5 seeds in one vmapped program against 5 sequential runs, real `python -m lra.train` runs
of the cpu preset:

    python scripts/bench_training.py seeds --configs configs/listops_transformer.py \\
        configs/listops_convluna.py --steps 200 --name seeds_vmapped_cpu
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
from pathlib import Path

import jax

from lra import step_bench


def _overrides(items: list[str]) -> tuple[tuple[str, object], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value (e.g. batch_size=4), got {item!r}")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        out.append((key.strip(), parsed))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    steps = sub.add_parser("steps", help="train-step speed, memory and MFU per family, length, dtype, seeds")
    steps.add_argument("--families", nargs="+", default=list(step_bench.FAMILIES), choices=step_bench.FAMILIES)
    steps.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048, 4096])
    steps.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    steps.add_argument("--seeds", nargs="+", type=int, default=[1, 5], help="seeds vmapped in one step")
    steps.add_argument("--steps", type=int, default=10, help="timed steps per window")
    steps.add_argument("--repeats", type=int, default=2, help="timed windows (the median is reported)")
    steps.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="config override for every case, e.g. --set batch_size=4 (repeatable)")
    steps.add_argument("--matmul-size", type=int, default=4096, help="the dense matmul that MFU is relative to")
    steps.add_argument("--isolate", choices=("auto", "on", "off"), default="auto",
                       help="each case in its own process (device peak memory); auto: where memory_stats exists")
    seeds = sub.add_parser("seeds", help="seeds vmapped in one program vs one after another (real runs)")
    seeds.add_argument("--configs", nargs="+", type=Path,
                       default=[Path("configs/listops_transformer.py"), Path("configs/listops_convluna.py")])
    seeds.add_argument("--seed-list", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    seeds.add_argument("--steps", type=int, default=200)
    seeds.add_argument("--data-dir", default="", help="config.data_dir of the runs (default: the config's)")
    seeds.add_argument("--workdir", type=Path, help="where the runs go (default: a temporary folder)")
    for sp in (steps, seeds):
        sp.add_argument("--out", type=Path, default=Path("results/bench"))
        sp.add_argument("--name", required=True, help="file stem of the .json/.md(/.png) written under --out")
    args = p.parse_args(argv)
    command = ["python", "scripts/bench_training.py", *(argv if argv is not None else sys.argv[1:])]

    if args.command == "steps":
        overrides = _overrides(args.sets)
        cases = [step_bench.Case(f, n, d, s, args.steps, args.repeats, overrides)
                 for d in args.dtypes for s in args.seeds for n in args.lengths for f in args.families]
        isolate = args.isolate == "on" or (args.isolate == "auto" and bool(step_bench._memory_stats()))
        print(f"{len(cases)} cases on {jax.devices()[0].device_kind}" + (", each in its own process" if isolate else ""),
              flush=True)
        results, rates = step_bench.run_grid(cases, isolate, args.matmul_size,
                                             log=lambda line: print(line, flush=True))
        settings = {"steps": args.steps, "repeats": args.repeats, "overrides": dict(overrides), "isolate": isolate,
                    "matmul_size": args.matmul_size}
        step_bench.write_report(results, rates, settings, args.out, args.name, command)
    else:
        root = args.workdir or Path(tempfile.mkdtemp(prefix="lra_seeds_bench_"))
        rows = step_bench.seeds_vs_sequential(args.configs, args.seed_list, args.steps, root, args.data_dir,
                                              log=lambda line: print(line, flush=True))
        report = {"environment": {**step_bench.environment(command),
                                  "load_average_1_5_15min": list(os.getloadavg())}, "rows": rows}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / f"{args.name}.md").write_text(step_bench.seeds_markdown(report))
    print(f"wrote {args.out / args.name}.*", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
