"""Training-step benchmark (lra_lab/bench/steps.py): two commands.

steps: every family's paper-scale ListOps train step at several lengths, dtypes and seed counts:
steps/s, peak memory, XLA FLOPs, MFU (against a matmul measured in the run and against the
device's datasheet peak), kernels and command-buffer launches per step, and the XLA flags. The grid
has a "Transformer (flash)" row (softmax_flash: cuDNN fused attention, bfloat16, no attention
dropout) beside the Transformer. The full grid on a GPU, in one command:

    python scripts/bench_training.py steps --out results/bench --name training_steps_h100

Each case runs in its own process on a GPU; `--jobs 4` runs four at once (they compile side by
side and each is timed with the device to itself). Every finished case is appended to
<out>/<name>.partial.jsonl and the report is rewritten, so a grid stopped by a time limit resumes
where it was when the same command is run again (`--restart` starts over). Chunk it with
--families / --lengths / --dtypes / --seeds. A CPU run at a size that fits minutes:

    python scripts/bench_training.py steps --lengths 256 512 --dtypes float32 --seeds 1 5 \\
        --config.batch_size=4 --steps 3 --name training_steps_cpu

`--config.FIELD=VALUE` sets a field of every case's config as it does for `python -m lra.train`
(lra.config_args: the field must exist, the value is cast to its type; a family option such as
`--config.model.attention_kwargs.mem=8` is checked against every family of the grid).
`--set FIELD=VALUE` is its old spelling: the same override, and records made with it resume.

seeds: 5 seeds in one vmapped program against 5 sequential runs, real `python -m lra.train` runs
of the cpu preset:

    python scripts/bench_training.py seeds --configs configs/listops_transformer.py \\
        configs/listops_convluna.py --steps 200 --name seeds_vmapped_cpu
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from lra.config_args import as_old_spelling, expand_options, split_config_args
from lra.errors import InputError
from lra.training.run_files import write_text_atomic
from lra_lab.bench import seeds_vs_sequential, steps_report
from lra_lab.bench import steps as step_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    steps = sub.add_parser("steps", help="train-step speed, memory and MFU per family, length, dtype, seeds")
    steps.add_argument(
        "--families",
        nargs="+",
        default=list(step_bench.grid_families()),
        choices=step_bench.grid_families(),
        help="registered families and the variants (softmax_flash: the Transformer on cuDNN flash "
        "attention, bfloat16 only); default: all",
    )
    steps.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048, 4096])
    steps.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    steps.add_argument("--seeds", nargs="+", type=int, default=[1, 5], help="seeds vmapped in one step")
    steps.add_argument("--steps", type=int, default=10, help="timed steps per window")
    steps.add_argument("--repeats", type=int, default=2, help="timed windows (the median is reported)")
    steps.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="old spelling of --config.FIELD=VALUE: a config field of every case, e.g. "
        "--config.batch_size=4 (repeatable)",
    )
    steps.add_argument("--matmul-size", type=int, default=4096, help="the dense matmul that MFU is relative to")
    steps.add_argument(
        "--isolate",
        choices=("auto", "on", "off"),
        default="auto",
        help="each case in its own process (device peak memory); auto: where memory_stats exists " "or --jobs > 1",
    )
    steps.add_argument(
        "--jobs", type=int, default=1, help="case processes at once: they compile side by side, each is timed alone"
    )
    steps.add_argument(
        "--case-timeout",
        type=float,
        default=None,
        help="seconds before a case process is " "stopped and recorded as an error (isolated cases)",
    )
    steps.add_argument(
        "--restart",
        action="store_true",
        help="ignore <out>/<name>.partial.jsonl (by default "
        "the cases it holds are kept and skipped, so a killed grid resumes)",
    )
    steps.add_argument("--retry-errors", action="store_true", help="measure again the cases that failed last time")
    seeds = sub.add_parser("seeds", help="seeds vmapped in one program vs one after another (real runs)")
    seeds.add_argument(
        "--configs",
        nargs="+",
        type=Path,
        default=[Path("configs/listops_transformer.py"), Path("configs/listops_convluna.py")],
    )
    seeds.add_argument("--seed-list", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    seeds.add_argument("--steps", type=int, default=200)
    seeds.add_argument("--data-dir", default="", help="config.data_dir of the runs (default: the config's)")
    seeds.add_argument("--workdir", type=Path, help="where the runs go (default: a temporary folder)")
    for sp in (steps, seeds):
        sp.add_argument("--out", type=Path, default=Path("results/bench"))
        sp.add_argument("--name", required=True, help="file stem of the .json/.md(/.png) written under --out")
    given = list(argv if argv is not None else sys.argv[1:])
    try:
        if split_config_args(given)[0] is not None:
            p.error("--config: each case builds its family's ListOps config; set fields with --config.FIELD=VALUE")
        # steps reads --config.FIELD=VALUE as its old spelling --set, in place (one list, in order)
        args = p.parse_args(as_old_spelling(given, "--set") if given[:1] == ["steps"] else given)
    except InputError as e:
        p.error(str(e))
    command = ["python", "scripts/bench_training.py", *given]

    if args.command == "steps":
        if args.jobs < 1 or (args.jobs > 1 and args.isolate == "off"):
            raise SystemExit("--jobs N runs N case processes at once: N >= 1, and not with --isolate off")
        try:
            overrides = step_bench.typed_overrides(args.families, expand_options(args.sets))
        except InputError as e:  # a misspelt field or a mistyped value: one line, nothing measured
            p.error(str(e))
        cases = [
            step_bench.Case(f, n, d, s, args.steps, args.repeats, overrides)
            for d in args.dtypes
            for s in args.seeds
            for n in args.lengths
            for f in args.families
            if step_bench.runs_in(f, d)
        ]
        # The probe runs in a child unless told not to isolate: a parent holding the GPU (JAX
        # preallocates most of its memory) would leave the case processes too little.
        probed = step_bench.probe(args.dtypes, args.matmul_size, command, isolate=args.isolate != "off")
        isolate = args.isolate == "on" or args.jobs > 1 or (args.isolate == "auto" and probed["memory_stats"])
        print(
            f"{len(cases)} cases on {probed['environment']['device_kind']}"
            + (f", each in its own process, {args.jobs} at a time" if isolate else ""),
            flush=True,
        )
        for dtype, rate in probed["matmul_rates"].items():
            print(f"dense {args.matmul_size}x{args.matmul_size} matmul, {dtype}: {rate / 1e12:.3g} TFLOP/s", flush=True)
        peaks = probed.get("datasheet_peaks")
        print(
            f"datasheet peaks ({peaks['chip']}): bfloat16 {peaks['bfloat16'] / 1e12:.0f}, float32 (TF32) "
            f"{peaks['float32'] / 1e12:.0f} TFLOP/s"
            if peaks
            else "no datasheet peak for this device: MFU against the measured matmul only",
            flush=True,
        )
        settings = {
            "steps": args.steps,
            "repeats": args.repeats,
            "overrides": dict(overrides),
            "isolate": isolate,
            "jobs": args.jobs,
            "matmul_size": args.matmul_size,
        }
        partial = args.out / f"{args.name}.partial.jsonl"
        if args.restart and partial.exists():
            partial.unlink()
        rows = step_bench.run_grid(
            cases,
            isolate,
            probed["matmul_rates"],
            jobs=args.jobs,
            peaks=peaks,
            case_timeout=args.case_timeout,
            partial=partial,
            retry_errors=args.retry_errors,
            log=lambda line: print(line, flush=True),
            on_row=lambda rows: steps_report.write_report(rows, probed, settings, args.out, args.name),
        )
        steps_report.write_report(rows, probed, settings, args.out, args.name)
    else:
        root = args.workdir or Path(tempfile.mkdtemp(prefix="lra_seeds_bench_"))
        rows = seeds_vs_sequential.seeds_vs_sequential(
            args.configs, args.seed_list, args.steps, root, args.data_dir, log=lambda line: print(line, flush=True)
        )
        report = {
            "environment": {**step_bench.environment(command), "load_average_1_5_15min": list(os.getloadavg())},
            "rows": rows,
        }
        args.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out / f"{args.name}.json", json.dumps(report, indent=2) + "\n")
        write_text_atomic(args.out / f"{args.name}.md", seeds_vs_sequential.seeds_markdown(report))
    print(f"wrote {args.out / args.name}.*", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
