"""What sealing the token cache costs at load: SHA-256 of every array + the token/label range check.

    python scripts/bench_cache_check.py --out results/bench/cache_check.json   # paper-scale ListOps (the record)
    python scripts/bench_cache_check.py --rows 2000     # a quick look

Writes a cache entry of the paper-scale ListOps shapes (random in-range tokens; train 96,000 x
2,000, validation and test 2,000 x 2,000, int16: ~400 MB) through ``lra.data.cache.Writer``, then
times ``cache.load_entry`` (every check a run's data load makes) ``--repeat`` times, after one
untimed load that brings the files into the page cache as a run's first read would. The entry
is deleted afterwards. ``--out`` writes the timings as JSON (docs/reliability.md and docs/design.md, Data,
quote results/bench/cache_check.json).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lra.data import cache, listops


def write_entry(folder: Path, rows: int, length: int, eval_rows: int) -> Path:
    """A committed entry with ListOps' shapes and dtypes, tokens drawn in range."""
    rng = np.random.default_rng(0)
    writer = cache.Writer(folder / "listops-bench")
    for split, n in (("train", rows), ("validation", eval_rows), ("test", eval_rows)):
        inputs = writer.array(f"{split}.inputs", (n, length), np.int16)
        for start in range(0, n, 4096):  # in blocks: no second 400 MB array in memory
            stop = min(n, start + 4096)
            inputs[start:stop] = rng.integers(0, len(listops.VOCAB), (stop - start, length), np.int16)
        writer.array(f"{split}.labels", (n,), np.int32)[:] = rng.integers(0, listops.NUM_CLASSES, n)
        writer.array(f"{split}.lengths", (n,), np.int32)[:] = length
    return writer.commit({"splits": ["train", "validation", "test"]})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=96_000, help="training rows (paper-scale ListOps: 96,000)")
    p.add_argument("--length", type=int, default=2_000, help="tokens per row (paper: 2,000)")
    p.add_argument("--eval-rows", type=int, default=2_000, help="validation and test rows each")
    p.add_argument("--repeat", type=int, default=2, help="timed loads")
    p.add_argument("--dir", type=Path, default=None, help="where to write the entry (default: a temporary folder)")
    p.add_argument("--out", type=Path, default=None, help="write the timings to this JSON file")
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="lra-cache-bench-", dir=args.dir))
    try:
        entry = write_entry(folder, args.rows, args.length, args.eval_rows)
        size = sum(f.stat().st_size for f in entry.glob("*.npy"))
        cache.load_entry(entry, len(listops.VOCAB), listops.NUM_CLASSES)  # warm the page cache
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            cache.load_entry(entry, len(listops.VOCAB), listops.NUM_CLASSES)
            times.append(time.perf_counter() - start)
        train = entry / "train.inputs.npy"
        start = time.perf_counter()
        cache.file_digest(train)
        digest = time.perf_counter() - start
        if args.out is not None:
            from lra.training.run_files import git_commit, write_json_atomic

            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(
                args.out,
                {
                    "command": "python scripts/bench_cache_check.py "
                    + " ".join(argv if argv is not None else sys.argv[1:]),
                    "rows": args.rows,
                    "length": args.length,
                    "eval_rows": args.eval_rows,
                    "bytes": size,
                    "load_seconds": times,
                    "train_inputs_sha256_seconds": digest,
                    "cpu_count": os.cpu_count(),
                    "load_average": os.getloadavg(),
                    "processor": platform.processor() or platform.machine(),
                    "git_commit": git_commit(),
                },
            )
        print(
            f"cache entry of {args.rows:,} x {args.length:,} int16 training rows (+2 x {args.eval_rows:,}), "
            f"{size / 1e6:.0f} MB: load_entry (SHA-256 of every array + range check) took "
            + ", ".join(f"{t:.3f} s" for t in times)
            + f"; of which the training inputs' SHA-256 {digest:.3f} s"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0
