"""Generated Pathfinder images written in the LRA release's layout (lra/data/pathfinder.py), batches in spawned
workers, through a temporary folder; ``python -m lra.data.pathfinder_write`` writes one setting and times it."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from lra.data.pathfinder_gen import GEOMETRIES, IMAGES_PER_FILE, SETTINGS, batch_seed, generate
from lra.errors import InputError


def metadata_line(batch: int, index: int, label: int, side: int, contour_length: int) -> str:
    """One metadata row as the release writes it (the original's accumulate_meta fields)."""
    geo = GEOMETRIES[side]
    return (
        f"imgs/{batch} sample_{index}.png {index} {label} {geo.continuity} {contour_length} "
        f"{max(contour_length // 3, 1)} {geo.paddle_length} {geo.thickness} {geo.gap} 1"
    )


def write_batch(folder: Path, side: int, setting: str, batch: int, n: int, seed: int) -> int:
    from PIL import Image  # Pillow: a core dependency

    out = generate(side, SETTINGS[setting], n, batch_seed(seed, side, setting, batch))
    imgs = folder / "imgs" / str(batch)
    imgs.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        Image.fromarray(out.images[i]).save(imgs / f"sample_{i}.png")  # uint8 2-D: mode "L"
        lines.append(metadata_line(batch, i, int(out.labels[i]), side, SETTINGS[setting]))
    meta = folder / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / f"{batch}.npy").write_text("\n".join(lines) + "\n")
    return n


def _write_batch_args(args: tuple) -> int:
    return write_batch(*args)


def batch_sizes(num_images: int, per_file: int = IMAGES_PER_FILE) -> list[int]:
    full, rest = divmod(num_images, per_file)
    return [per_file] * full + ([rest] if rest else [])


def write_setting(
    folder: Path,
    side: int,
    setting: str,
    num_images: int,
    seed: int,
    workers: int | None = None,
    per_file: int = IMAGES_PER_FILE,
    log=None,
) -> Path:
    """Write one setting's images and metadata into ``folder`` (through a temporary sibling); returns ``folder``."""
    if setting not in SETTINGS:
        raise InputError(f"unknown Pathfinder setting {setting!r}; valid: {', '.join(SETTINGS)}")
    if side not in GEOMETRIES:
        raise InputError(f"no Pathfinder geometry for {side} x {side}; valid sides: {', '.join(map(str, GEOMETRIES))}")
    if num_images < 1:
        raise InputError(f"num_images must be >= 1, got {num_images}")
    sizes = batch_sizes(num_images, per_file)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    jobs = [(tmp, side, setting, b, n, seed) for b, n in enumerate(sizes)]
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    start = time.time()
    try:
        if workers == 1:
            done = 0
            for job in jobs:
                done += _write_batch_args(job)
                if log and len(jobs) > 1:
                    log(f"pathfinder{side}/{setting}: {done:,} / {num_images:,} images")
        else:
            # spawn: the caller may have started JAX, whose threads do not survive fork
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                done = 0
                for n in pool.imap_unordered(_write_batch_args, jobs):
                    done += n
                    if log and (done == num_images or done % (20 * per_file) < n):
                        log(
                            f"pathfinder{side}/{setting}: {done:,} / {num_images:,} images "
                            f"({time.time() - start:.0f}s)"
                        )
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished the same folder first: keep theirs
            if not (folder / "metadata").is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:  # cleanup only, re-raised: no half-written folder is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lra.data.pathfinder_write",
        description="Write one Pathfinder setting in the LRA release layout and time it.",
    )
    p.add_argument("--root", required=True, help="folder that receives pathfinder<side>/<setting>/")
    p.add_argument("--side", type=int, default=32, choices=sorted(GEOMETRIES))
    p.add_argument("--setting", default="curv_contour_length_14", choices=list(SETTINGS))
    p.add_argument("--num_images", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=None, help="processes (default: every core)")
    args = p.parse_args(argv)
    folder = Path(args.root) / f"pathfinder{args.side}" / args.setting
    if folder.exists():
        print(f"error: {folder} exists; remove it or choose another --root", file=sys.stderr)
        return 2
    folder.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    write_setting(
        folder,
        args.side,
        args.setting,
        args.num_images,
        args.seed,
        args.workers,
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    elapsed = time.time() - start
    print(
        f"wrote {args.num_images:,} images of pathfinder{args.side}/{args.setting} to {folder} in "
        f"{elapsed:.1f}s ({1e3 * elapsed / args.num_images:.2f} ms per image, "
        f"{args.workers or os.cpu_count()} worker(s))"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
