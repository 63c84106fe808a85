"""Why a step's kernel count changes with N: the same config compiled for a GPU at two lengths, its cuBLAS
calls (by operand shapes) and fusions (by kind and fused computation) set side by side.

    JAX_PLATFORMS=cpu LRA_PREFLIGHT_GPU_SPECS=DIR GPU_PYTHON -m lra_lab.bench.launch_diff \\
        --config configs/listops_transformer.py:paper --lengths 1024 2048 --out results/bench/launch_diff_h100

Run it with an interpreter that has the CUDA plugin (``pip install -e ".[preflight-gpu]"`` in its own venv,
as ``lra_lab.preflight`` does for its compile children): the step is compiled deviceless for the target
(XLA's GPU description from ``LRA_PREFLIGHT_GPU_SPECS``), with the same flags as the launch benchmark
(``--xla_gpu_enable_triton_gemm=false``, lra_lab.preflight.check). Sequence-dependent sizes are written
``R`` (batch x (N + 1) rows) and ``N+1`` so that a GEMM of the same role at both lengths reads the same.
What it shows is a difference of XLA's lowering of one program at two sizes (issue 50's growth rule):
``while`` loops, sorts and scatters are counted beside it, so a count that grows from a loop is told apart.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from pathlib import Path
from typing import Any

FLAG = "--xla_gpu_enable_triton_gemm=false"  # as the launch benchmark compiles (lra_lab.preflight.check)


def compiled_text(spec: str, length: int, target_name: str) -> tuple[str, int]:
    """The optimised HLO of ``spec``'s train step at ``length``, compiled deviceless for ``target_name``,
    and the step's batch size."""
    from lra_lab.preflight import targets
    from lra_lab.preflight.check import gpu_target_config
    from lra_lab.preflight.compile_step import abstract_step, devices_for, load_config

    path, _, options = spec.partition(":")
    config = load_config(path, options or None, {"data.max_len": length, "model.max_len": length})
    devices = devices_for({"kind": "gpu", "target_config": gpu_target_config(targets.parse(target_name)), "devices": 1})
    step = abstract_step(config, devices, [0])
    return step.train.lower(step.state, step.batch).compile().as_text() or "", step.shape[1]


def _normalise(dims: str, rows: int, tokens: int) -> str:
    names = {str(rows): "R", str(tokens): "N+1"}
    return ",".join(names.get(d, d) for d in dims.split(",") if d)


def inventory(hlo_text: str, rows: int, tokens: int) -> dict[str, collections.Counter]:
    """The entry computation's cuBLAS calls by operand shapes and its fusions by kind and computation."""
    entry = re.search(r"\nENTRY [^\n]*\{\n(.*?)\n\}", hlo_text, re.S)
    gemms: collections.Counter = collections.Counter()
    fusions: collections.Counter = collections.Counter()
    for line in (entry.group(1) if entry else "").splitlines():
        if 'custom_call_target="__cublas' in line:
            shapes = re.findall(r"(f32|bf16|f16)\[([0-9,]*)\]", line)[:3]
            gemms[" ".join(f"{t}[{_normalise(d, rows, tokens)}]" for t, d in shapes)] += 1
        elif " fusion(" in line:
            kind = re.search(r"kind=(k\w+)", line)
            calls = re.search(r"calls=%?([\w.\-]+)", line)
            name = re.sub(r"\.\d+", "", re.sub(r"[._]\d+$", "", calls.group(1))) if calls else "?"
            fusions[f"{kind.group(1) if kind else '?'} {name}"] += 1
    return {"gemms": gemms, "fusions": fusions}


def compare(spec: str, lengths: list[int], target: str) -> dict[str, Any]:
    from lra_lab.bench.hlo_launches import summary

    rows: dict[str, Any] = {"config": spec, "target": target, "lengths": lengths, "counts": {}, "diff": {}}
    found = {}
    for n in lengths:
        text, batch = compiled_text(spec, n, target)
        counts = summary(text)
        rows["counts"][str(n)] = {k: counts[k] for k in ("kernels", "custom_calls", "while_loops", "sorts", "scatters")}
        found[n] = inventory(text, batch * (n + 1), n + 1)
        print(f"N = {n}: {rows['counts'][str(n)]}", flush=True)
    lo, hi = lengths[0], lengths[-1]
    for part in ("gemms", "fusions"):
        a, b = found[lo][part], found[hi][part]
        rows["diff"][part] = [
            {"what": k, str(lo): a[k], str(hi): b[k]} for k in sorted(set(a) | set(b)) if a[k] != b[k]
        ]
    return rows


def markdown(record: dict[str, Any]) -> str:
    lo, hi = (str(n) for n in (record["lengths"][0], record["lengths"][-1]))
    lines = [
        f"# Kernel launches of `{record['config']}` at N = {lo} and {hi}, compiled for {record['target']}",
        "",
        "| N | kernels | cuBLAS calls | while loops | sorts | scatters |",
        "|---|---|---|---|---|---|",
    ]
    for n, c in record["counts"].items():
        lines.append(
            f"| {n} | {c['kernels']} | {c['custom_calls']} | {c['while_loops']} | {c['sorts']} | {c['scatters']} |"
        )
    for part, title in (("gemms", "cuBLAS calls by operand shapes"), ("fusions", "fusions by kind")):
        lines += ["", f"{title} whose count differs (R: rows, batch x (N + 1)):", "", f"| | N = {lo} | N = {hi} |"]
        lines += ["|---|---|---|"] + [f"| `{d['what']}` | {d[lo]} | {d[hi]} |" for d in record["diff"][part]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a config spec, e.g. configs/listops_transformer.py:paper")
    parser.add_argument("--lengths", type=int, nargs=2, default=[1024, 2048])
    parser.add_argument("--target", default="h100")
    parser.add_argument("--out", type=Path, help="write OUT.json (the record) and OUT.md")
    args = parser.parse_args(argv)
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FLAG}".strip()
    record = compare(args.config, args.lengths, args.target)
    text = markdown(record)
    print(text)
    if args.out:
        from lra.training.run_files import write_text_atomic
        from lra_lab.experiments.records import write_record

        write_record(args.out.with_suffix(".json"), record)
        write_text_atomic(args.out.with_suffix(".md"), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
