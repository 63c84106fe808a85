"""Time and memory of one attention layer (forward + backward) against sequence length.

Every family in lra.attention.ATTENTIONS by default, after the reference row ``projections`` (the
q/k/v/out projections alone: what the machine charges for the dense layers every family shares);
see lra_lab/bench/attention.py for the method. Writes
attention_scaling.{json,md,png} (or --name.*) under --out. A family may carry module options,
``name:key=value,...``, to compare settings side by side.

    python scripts/bench_attention.py                                   # all families, 1K..16K
    python scripts/bench_attention.py --families softmax luna --lengths 1024 4096 --repeats 3
    python scripts/bench_attention.py --lengths 256 512 --repeats 2 --out /tmp/bench   # a quick try
    python scripts/bench_attention.py --families linear linear:chunk_size=1000000 --name linear_chunks
    python scripts/bench_attention.py --replot results/bench/attention_scaling.json   # redraw the .png only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax

from lra import attention
from lra_lab.bench import attention as bench


def main(argv: list[str] | None = None) -> None:
    from lra.training.provenance import mark_start

    mark_start()  # the record names the commit the measurement began at
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--families",
        nargs="+",
        default=["projections", *attention.ATTENTIONS],
        help="registry names, each optionally with module options: luna:memory_size=256",
    )
    p.add_argument("--lengths", nargs="+", type=int, default=list(bench.DEFAULT_LENGTHS))
    p.add_argument("--repeats", type=int, default=5, help="timed calls per case (median reported)")
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", default="attention_scaling", help="file name stem of the report")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--qkv-dim", type=int, default=128)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument(
        "--max-seconds-per-case",
        type=float,
        default=60.0,
        help="a call slower than this is not repeated and the family's longer lengths are skipped",
    )
    p.add_argument(
        "--max-memory-gb",
        type=float,
        default=None,
        help="skip cases whose compiled step needs more (default: 60%% of RAM on CPU, " "90%% of device memory on GPU)",
    )
    p.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each case in a fresh process, recording the device's peak memory "
        "(default: on for GPU/TPU, off for CPU)",
    )
    p.add_argument(
        "--replot",
        type=Path,
        metavar="JSON",
        help="redraw JSON's figure (the .png beside it) from its recorded cases; runs nothing",
    )
    args = p.parse_args(argv)
    if args.replot:
        png = args.replot.with_suffix(".png")
        bench.plot(json.loads(args.replot.read_text()), png)
        print("wrote", png)
        return
    for family in args.families:
        try:
            bench.parse_family(family)  # unknown names and options fail now, listing the valid ones
        except ValueError as e:
            p.error(str(e))

    limit = int(args.max_memory_gb * 2**30) if args.max_memory_gb else bench.default_memory_limit()
    settings = bench.Settings(
        batch=args.batch,
        dim=args.dim,
        num_heads=args.heads,
        qkv_dim=args.qkv_dim,
        dtype=args.dtype,
        repeats=args.repeats,
        max_seconds=args.max_seconds_per_case,
        max_memory_bytes=limit,
    )
    isolate = args.isolate if args.isolate is not None else jax.default_backend() != "cpu"
    cases = bench.run(args.families, args.lengths, settings, isolate=isolate)
    paths = bench.write_report(
        cases, settings, args.out, [Path(sys.argv[0]).name] + (argv or sys.argv[1:]), name=args.name
    )
    print(paths["md"].read_text())
    print("wrote", ", ".join(str(path) for path in paths.values()))


if __name__ == "__main__":
    main()
