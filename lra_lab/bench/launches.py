"""Kernel launches per training step on a GPU, counted on a machine without one (issue 50, item 5).

Each family's paper-scale ListOps training step (its own config at the preset ``paper``, as the
training-step benchmark :mod:`lra_lab.bench.steps` builds it: batch 32, float32 unless ``--dtypes``
says otherwise) at each length N is compiled for a GPU target on this CPU, as ``python -m
lra_lab.preflight`` does (a child process, XLA's description of the card, abstract inputs; its cache
answers a second run). The compiled program's text is then counted by
:mod:`lra_lab.bench.hlo_launches`: kernels per step (loop bodies times their trip counts), while
loops, sorts, scatters and custom calls executed per step, with XLA's memory analysis of the same
program. (Graph launches: XLA forms CUDA graphs from the thunk sequence after the HLO, so a
deviceless compile of jaxlib 0.10.2 shows none; see :mod:`lra_lab.bench.hlo_launches`.) Nothing runs on a GPU,
so no time is measured: a launch costs a few microseconds on the host whatever its kernel does,
and these counts say which steps are launch-bound before any GPU is paid for::

    LRA_PREFLIGHT_GPU_SPECS=../gpuspecs python scripts/bench_launches.py --python ../gpuenv/bin/python

writes ``results/bench/launches_h100.{md,json}``; ``--before OLD.json`` adds an earlier record's
counts beside each row (the code before a change).

The targets (:data:`TARGETS`, issue 50) are judged by :func:`verdicts`: at N = 1,024 and 4,096 the
family's kernels per step are at most its target, and no family's count grows with N: the count
at the largest N measured is at most :data:`GROWTH_TOLERANCE` above the count at the smallest. A
count that follows N (a loop whose trip count is N / block) grows by the length ratio (4x from 1K
to 4K); the tolerance admits the compiler's shape-dependent choices (a reduction split into two
kernels at a longer row), which add a handful of launches, not a multiple. A length whose step does
not fit the card's memory (preflight's verdict, kept in each row) is shown but not judged: XLA
then rematerialises to try to fit, which compiles another program (more kernels) for a step that
cannot run there anyway; the growth is judged over the lengths that fit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lra.console import GIB

# Kernels per step at most, at N = 1,024 and 4,096 (issue 50 item 5: today 5,801 / 5,840 for
# clustered, 7,310 / 10,935 for improved clustered, 26,183 / 177,621 for dispersed).
TARGETS = {"clustered": 1500, "improved_clustered": 2000, "dispersed": 3000}
TARGET_LENGTHS = (1024, 4096)
GROWTH_TOLERANCE = 0.05  # a count may rise by at most 5% from the smallest N to the largest


def case_spec(family: str) -> str:
    """``configs/listops_<family>.py:paper`` (or ``configs/listops.py:family=NAME,paper``), relative
    to the repository as it names configs."""
    from lra.family_configs import config_spec

    path, first = config_spec("listops", family)
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    return f"{path}:{','.join(filter(None, [first, 'paper']))}"


def measure(
    family: str,
    length: int,
    dtype: str,
    target: str,
    python: str,
    use_cache: bool = True,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row: the family's step at ``length`` compiled for ``target`` (lra_lab.preflight) and counted."""
    from lra_lab.bench.steps import label
    from lra_lab.preflight.check import preflight

    fields = {"data.max_len": length, "model.max_len": length, "model.dtype": dtype, **(overrides or {})}
    t0 = time.perf_counter()
    r = preflight(case_spec(family), target, python=python, use_cache=use_cache, overrides=fields, quiet=True)
    row: dict[str, Any] = {
        "family": family,
        "label": label(family),
        "length": length,
        "dtype": dtype,
        "overrides": overrides or {},
        "config": case_spec(family),
        "status": r.get("status"),
        "fits": r.get("verdict"),  # preflight's verdict on the target: fits / does not fit / cannot tell
        "cached": r.get("cached"),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if r.get("status") != "ok":
        return {**row, "error": r.get("error") or r.get("verdict_detail")}
    if "launches" not in r:
        return {**row, "status": "error", "error": "the compile result has no launch counts (not a GPU target?)"}
    return {
        **row,
        **r["launches"],
        "memory": r.get("memory"),
        "memory_gib": (r.get("memory") or {}).get("total", 0) / GIB,
        "gflop_per_step": r["cost"]["flops"] / 1e9,
        "num_params": r.get("num_params"),
        "compile_seconds": r.get("compile_seconds"),
        "jax_version": r.get("jax_version"),
        "xla_flags": r.get("xla_flags"),
    }


def verdicts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family: its counts at the smallest and largest N, whether they grow, and the target check.

    ``meets``: True/False where the family has a target and both target lengths were measured,
    None otherwise (no target, or a length missing: not judged)."""
    out = []
    for family in dict.fromkeys(r["family"] for r in rows):
        compiled = {r["length"]: r for r in rows if r["family"] == family and r.get("status") == "ok"}
        ok = {n: r for n, r in compiled.items() if r.get("fits") != "does not fit"}
        if not ok:
            out.append({"family": family, "meets": None, "reason": "no length compiled and fitting"})
            continue
        lo, hi = min(ok), max(ok)
        grows = ok[hi]["kernels"] > (1 + GROWTH_TOLERANCE) * ok[lo]["kernels"] if hi > lo else None
        target = TARGETS.get(family)
        at = {n: ok[n]["kernels"] for n in TARGET_LENGTHS if n in ok}
        meets: bool | None = None
        if target is not None and len(at) == len(TARGET_LENGTHS) and grows is not None:
            meets = all(k <= target for k in at.values()) and not grows
        out.append(
            {
                "family": family,
                "label": ok[lo]["label"],
                "lengths": [lo, hi],
                "kernels": [ok[lo]["kernels"], ok[hi]["kernels"]],
                "growth": ok[hi]["kernels"] / ok[lo]["kernels"] if ok[lo]["kernels"] else None,
                "grows": grows,
                "not_fitting": sorted(set(compiled) - set(ok)),
                "target": target,
                "meets": meets,
            }
        )
    return out


FITS = {"fits": "yes", "does not fit": "**no**"}


def _by_key(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {(r["family"], r["length"], r["dtype"]): r for r in rows if r.get("status") == "ok"}


def markdown(record: dict[str, Any]) -> str:
    """The table of a record (rendered from the record alone)."""
    before = _by_key(record.get("before", {}).get("rows", []))
    lines = [
        f"# Kernel launches per training step: {record['target_description']} (deviceless compile)",
        "",
        f"Command: `{record.get('command', '')}` (commit {record.get('git_commit')}, "
        f"jax {record.get('jax_version')}, {record.get('date', '')}).",
        f"Each family's paper-scale ListOps training step (its `configs/listops_<family>.py:paper`, batch "
        f"{record.get('batch', 32)}, AdamW, dropout on) compiled on this CPU for the GPU described by XLA's "
        f"`{record['gpu_spec']}` (sha256 {record['gpu_spec_sha256'][:12]}), "
        f"XLA flags `{record['xla_flags'] or 'none'}`. "
        "Nothing ran on a GPU. Kernels: the compiled program's launches per step (thunks), loop bodies "
        "times their trip counts (lra_lab/bench/hlo_launches.py); while loops, sorts, scatters and custom calls "
        "(cuBLAS, cuDNN): executed per step; memory: XLA's analysis of the same program (arguments + outputs "
        "+ temporaries). Graph (command-buffer) launches: this jaxlib's XLA groups thunks into CUDA graphs "
        "after the compiled HLO and its thunk dump (a pass over the thunk sequence), so a deviceless compile "
        "shows none; the JSON's `graph_launches` counts only command buffers visible in the HLO. Every "
        "kernel is a launch from the host unless the runtime graphs it; a graphed kernel still costs a "
        "node's launch on the device.",
    ]
    if before:
        lines.append(
            f"Before: `{record['before'].get('command', '')}` at commit {record['before'].get('commit')} "
            "(the code before the rewrite), kernels per step in the column `before`."
        )
    lines += [
        "",
        "| family | N | dtype | kernels | before | while loops | sorts | scatters | custom calls | memory GiB "
        "| fits | unknown-trip loops |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in record["rows"]:
        head = f"| {r['label']} | {r['length']} | {r['dtype']} |"
        if r.get("status") != "ok":
            lines.append(f"{head} error: {str(r.get('error'))[:120]} |||||||||")
            continue
        b = before.get((r["family"], r["length"], r["dtype"]))
        was = f"{b['kernels']:,}" if b else ""
        lines.append(
            f"{head} {r['kernels']:,} | {was} | {r['while_loops']:,} | {r['sorts']:,} | {r['scatters']:,} | "
            f"{r['custom_calls']:,} | {r['memory_gib']:.2f} | {FITS.get(r.get('fits'), r.get('fits') or '')} | "
            f"{r['unknown_trip_loops']} |"
        )
    lines += [
        "",
        f"Targets (issue 50): kernels per step at N = {' and '.join(f'{n:,}' for n in TARGET_LENGTHS)} at most "
        + ", ".join(f"{k} {v:,}" for k, v in TARGETS.items())
        + f"; no family's count grows with N (largest N at most {GROWTH_TOLERANCE:.0%} above the smallest, "
        "over the lengths whose step fits the card: where it does not, XLA rematerialises to try, another "
        "program).",
        "",
        "| family | kernels (smallest N -> largest N) | growth | grows with N | target | meets |",
        "|---|---|---:|---|---:|---|",
    ]
    for v in record["verdicts"]:
        if "kernels" not in v:
            lines.append(f"| {v['family']} | {v['reason']} | | | | |")
            continue
        meets = {True: "yes", False: "**no**", None: "not judged" if v["target"] else ""}[v["meets"]]
        grows = {True: "**yes**", False: "no", None: "one length"}[v["grows"]]
        if v.get("not_fitting"):
            grows += f" (N={', '.join(f'{n:,}' for n in v['not_fitting'])}: does not fit, not judged)"
        lines.append(
            f"| {v['label']} | {v['kernels'][0]:,} (N={v['lengths'][0]:,}) -> {v['kernels'][1]:,} "
            f"(N={v['lengths'][1]:,}) | {v['growth']:.2f}x | {grows} | {v['target'] or ''} | {meets} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from lra_lab.bench.steps import families

    p.add_argument("--families", nargs="+", default=list(families()), choices=families())
    p.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048, 4096])
    p.add_argument("--dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    p.add_argument("--target", default="h100", help="a GPU target of lra_lab.preflight (h100, h200, a100-80gb)")
    p.add_argument("--python", default=sys.executable, help="the interpreter with the CUDA plugin (its own venv)")
    p.add_argument("--no-cache", action="store_true", help="compile again even where the preflight cache has it")
    p.add_argument("--before", type=Path, help="an earlier record of this command: its counts beside each row")
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", help="file stem under --out (default launches_<target>)")
    args = p.parse_args(argv)
    from lra.training.provenance import mark_start
    from lra.training.run_files import check_can_write, write_text_atomic
    from lra_lab.experiments.records import write_record
    from lra_lab.preflight import targets
    from lra_lab.preflight.check import PreflightError, check_compiler, check_python, gpu_target_config

    try:
        target = targets.parse(args.target)
        if target.kind != "gpu":
            raise PreflightError(f"--target {args.target}: launch counts are of GPU programs (h100, h200, ...)")
        check_python(args.python)
        check_compiler(target, args.python)
        spec_text = gpu_target_config(target)
        before = json.loads(args.before.read_text()) if args.before else None
        name = args.name or f"launches_{args.target}"
        check_can_write(args.out, folder=True)
    except (PreflightError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    mark_start()
    command = "python scripts/bench_launches.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = []
    cases = [(f, n, d) for d in args.dtypes for n in args.lengths for f in args.families]
    for i, (family, length, dtype) in enumerate(cases, 1):
        row = measure(family, length, dtype, args.target, args.python, use_cache=not args.no_cache)
        rows.append(row)
        what = (
            f"{row['kernels']:,} kernels, {row['while_loops']:,} while loops, {row['memory_gib']:.2f} GiB"
            if row["status"] == "ok"
            else f"error: {row.get('error')}"
        )
        print(f"[{i}/{len(cases)}] {family} N={length} {dtype}: {what} ({row['seconds']:.0f} s)", flush=True)
    ok = [r for r in rows if r.get("status") == "ok"]
    record: dict[str, Any] = {
        "target": args.target,
        "target_description": target.description,
        "gpu_spec": target.chip.gpu_spec if target.chip else "",
        "gpu_spec_sha256": hashlib.sha256(spec_text.encode()).hexdigest(),
        "xla_flags": ok[0]["xla_flags"] if ok else os.environ.get("XLA_FLAGS", ""),
        "jax_version": ok[0]["jax_version"] if ok else None,
        "batch": 32,
        "targets": TARGETS,
        "target_lengths": list(TARGET_LENGTHS),
        "growth_tolerance": GROWTH_TOLERANCE,
        "rows": rows,
        "verdicts": verdicts(rows),
    }
    if before is not None:
        record["before"] = {
            "path": str(args.before),
            "command": before.get("command"),
            "commit": before.get("git_commit"),
            "rows": [
                {k: r.get(k) for k in ("family", "length", "dtype", "status", "kernels", "host_launches")}
                for r in before["rows"]
            ],
        }
    path = args.out / f"{name}.json"
    write_record(path, record, command)
    written = json.loads(path.read_text())  # with its provenance: the table names the commit
    write_text_atomic(args.out / f"{name}.md", markdown(written))
    print(markdown(written))
    print(f"wrote {path} and {name}.md")
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
