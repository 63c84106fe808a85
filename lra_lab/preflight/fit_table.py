"""Does every cell of the ConvLuna paper's Table 1 and every family's paper-scale config fit one GPU,
and with which settings? (issue 50, item 2)

Rows: each distinct (task, variant) of the ``convluna_table1`` grid at the preset ``paper`` (the
ConvLuna paper's Table 1) and each registered family's own paper-scale config on each task of
:data:`TASKS` (``configs/<task>_<family>.py:paper``), once each. For each row and target the
settings of :data:`LADDER` are tried in order, each compiled for the target as ``python -m
lra_lab.preflight`` does (deviceless, cached), until one fits (XLA's memory within the verdict's
headroom of the card); the table gives the first that fits, its memory, and what was tried.

The ladder keeps the paper's training semantics: the same effective batch, float32, attention
dropout. Microbatches (``config.microbatches``: gradient accumulation over equal parts of the batch,
the same gradient up to summation order; lra.training.step) and a recomputed encoder block
(``config.model.remat``: activations recomputed in the backward pass) change memory and time
only. A row that fits as configured needs neither::

    LRA_PREFLIGHT_GPU_SPECS=../gpuspecs python -m lra_lab.preflight.fit_table --targets h100 h200 \\
        --python ../gpuenv/bin/python --out results/preflight --name fit_h100_h200

writes ``<out>/<name>.{md,json}``, rewritten after every row (a stopped run resumes from the
preflight cache: each compile is done once). ``--infer-from h100`` (default): a row whose
as-configured program fits the H100 is not compiled again for the H200 (the same sm_90 program fits
the larger card); the table says which verdicts are so inferred.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lra.console import GIB

TASKS = ("listops", "text", "matching", "image", "pathfinder")

# (name, config fields): tried in order until one fits; the first is the config as it is
LADDER: tuple[tuple[str, dict[str, Any]], ...] = (
    ("as configured", {}),
    ("2 microbatches", {"microbatches": 2}),
    ("4 microbatches", {"microbatches": 4}),
    ("8 microbatches", {"microbatches": 8}),
    ("8 microbatches + remat", {"microbatches": 8, "model.remat": True}),
    ("16 microbatches + remat", {"microbatches": 16, "model.remat": True}),
)


def rows(
    tasks: Sequence[str] = TASKS, families: Sequence[str] | None = None, variants: Sequence[str] | None = None
) -> list[dict[str, str]]:
    """Table 1's cells, then every family's paper-scale config per task (each (task, variant) once);
    ``variants``: only the rows of these labels (``Transformer``), ``tasks``: only these tasks."""
    from lra import attention
    from lra.family_configs import config_spec
    from lra_lab.experiments.sweep import REPO, expand

    out: dict[tuple[str, str], dict[str, str]] = {}
    for run in expand("convluna_table1", "paper"):
        spec = f"{run.config_path}:{run.config_arg}".replace(f"{REPO}/", "")
        out.setdefault((run.task, run.variant.label), {"source": "Table 1", "config": spec})
    for task in tasks:
        for family in families or list(attention.FAMILIES):
            path, first = config_spec(task, family)
            spec = f"{str(path).replace(f'{REPO}/', '')}:{','.join(filter(None, [first, 'paper']))}"
            key = (task, attention.FAMILIES[family].default_label())
            if key in out:
                continue
            out[key] = {"source": "family", "config": spec}
    return [
        {"task": t, "variant": v, **rest}
        for (t, v), rest in out.items()
        if t in tasks and (variants is None or v in variants)
    ]


def fit(
    config: str,
    target: str,
    python: str,
    use_cache: bool = True,
    ladder: Sequence[tuple[str, dict[str, Any]]] = LADDER,
    compile_one: Callable[..., dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The first setting of ``ladder`` with which ``config`` fits ``target``, and every one tried."""
    from lra_lab.preflight.check import PreflightError, preflight

    compile_one = compile_one or preflight
    tried = []
    for name, fields in ladder:
        try:
            r = compile_one(config, target, python=python, use_cache=use_cache, overrides=dict(fields), quiet=True)
        except PreflightError as e:  # a setting the config refuses (e.g. microbatches not dividing the batch)
            r = {"verdict": "cannot tell", "verdict_detail": str(e)}
        memory = (r.get("memory") or {}).get("total")
        tried.append(
            {
                "setting": name,
                "overrides": fields,
                "verdict": r["verdict"],
                "detail": r["verdict_detail"],
                "memory_gib": memory / GIB if memory else None,
                "cached": r.get("cached"),
            }
        )
        if r["verdict"] == "fits":
            return {
                "fits": True,
                "setting": name,
                "overrides": fields,
                "memory_gib": tried[-1]["memory_gib"],
                "tried": tried,
            }
        if r["verdict"] == "cannot tell" and name == ladder[0][0]:
            break  # the config itself does not compile: no setting will tell more
    return {"fits": False, "setting": None, "overrides": None, "memory_gib": None, "tried": tried}


def build(
    targets_: Sequence[str],
    python: str,
    infer_from: str | None,
    use_cache: bool = True,
    tasks: Sequence[str] = TASKS,
    families: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
    compile_one: Callable[..., dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every row's fit on every target (targets in the order given, rows in :func:`rows`' order)."""
    out: list[dict[str, Any]] = [dict(r, targets={}) for r in rows(tasks, families, variants)]
    # the Transformer rows first: the quadratic family is the one that may not fit
    order = sorted(out, key=lambda r: r["variant"] != "Transformer")
    for target in targets_:
        for r in order:
            base = r["targets"].get(infer_from) if infer_from and infer_from != target else None
            if (
                base is not None
                and infer_from is not None
                and base["fits"]
                and base["setting"] == LADDER[0][0]
                and _memory(target) >= _memory(infer_from)
            ):
                r["targets"][target] = {**base, "inferred_from": infer_from, "tried": []}
            else:
                r["targets"][target] = fit(r["config"], target, python, use_cache, compile_one=compile_one)
            print(f"{r['task']} {r['variant']} on {target}: {_cell(r['targets'][target])}", flush=True)
            if on_row is not None:
                on_row(out)
    return out


def _memory(target: str) -> int:
    """A target's memory per device (bytes)."""
    from lra_lab.preflight import targets as targets_mod

    chip = targets_mod.parse(target).chip
    return chip.memory_bytes if chip else 0


def _cell(f: dict[str, Any]) -> str:
    if not f["tried"] and "inferred_from" not in f:
        return "not compiled"
    if f["fits"]:
        inferred = f" (the {f['inferred_from']} program)" if f.get("inferred_from") else ""
        return f"fits, {f['setting']}, {f['memory_gib']:.2f} GiB{inferred}"
    last = f["tried"][-1]
    return f"**{last['verdict']}** with {last['setting']}: {last['detail'][:160]}"


def markdown(record: dict[str, Any]) -> str:
    """The fit table, rendered from its record alone."""
    targets_ = record["targets"]
    lines = [
        f"# Fit on one GPU: {', '.join(record['target_descriptions'])} (deviceless compiles)",
        "",
        f"Command: `{record.get('command', '')}` (commit {record.get('git_commit')}, {record.get('date', '')}; "
        f"jax {record.get('versions', {}).get('jax', '?')}, CUDA plugin "
        f"{record.get('versions', {}).get('jax-cuda12-plugin', '?')}). Rows: every cell of the ConvLuna paper's "
        "Table 1 (`python -m lra_lab.preflight sweep convluna_table1 --preset paper`) and every family's "
        f"paper-scale config on {', '.join(record['tasks'])}. Each row's settings are tried in order until the "
        "program fits (XLA's memory of the compiled train step within the verdict's headroom of the card, "
        "lra_lab/preflight/estimate.py): "
        + "; ".join(f"{n} ({o or 'nothing changed'})" for n, o in record["ladder"])
        + ". Microbatches and remat keep the paper's effective batch, float32 and dropout (the gradient equals "
        "the full batch's up to summation order). Nothing ran on a GPU.",
    ]
    if record.get("infer_from"):
        lines.append(
            f"A row whose as-configured program fits the {record['infer_from']} was not compiled again for a "
            "larger card of the same architecture: it says `(the "
            f"{record['infer_from']} program)`."
        )
    if record.get("variants") or list(record["tasks"]) != list(TASKS):
        lines.append(
            f"**A subset**: only the rows of {', '.join(record.get('variants') or ['every variant'])} on "
            f"{', '.join(record['tasks'])}; the whole table is the same command without `--variants` and "
            "`--tasks` (it answers the rows compiled here from the cache)."
        )
    if not record.get("complete", True):
        lines.append(f"**Incomplete**: {record.get('incomplete_note', 'the run stopped before every row')}.")
    lines += [
        "",
        "| task | variant | from | config | " + " | ".join(targets_) + " |",
        "|---|---|---|---|" + "---|" * len(targets_),
    ]
    for r in record["rows"]:
        cells = [_cell(r["targets"][t]) if t in r["targets"] else "not compiled" for t in targets_]
        lines.append(f"| {r['task']} | {r['variant']} | {r['source']} | `{r['config']}` | " + " | ".join(cells) + " |")
    done = [r for r in record["rows"] if all(t in r["targets"] for t in targets_)]
    fits = [r for r in done if all(r["targets"][t]["fits"] for t in targets_)]
    lines += [
        "",
        f"{len(fits)} of {len(record['rows'])} rows fit every target"
        + (f" ({len(record['rows']) - len(done)} not compiled yet)" if len(done) < len(record["rows"]) else "")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", nargs="+", default=["h100", "h200"])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--families", nargs="+", help="the families' rows (default: every registered family)")
    p.add_argument("--variants", nargs="+", help="only the rows of these labels, e.g. Transformer (default: all)")
    p.add_argument("--python", default=sys.executable, help="the interpreter with the CUDA plugin (its own venv)")
    p.add_argument("--infer-from", default="h100", help="'' to compile every row for every target")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--out", type=Path, default=Path("results/preflight"))
    p.add_argument("--name", default="fit_h100_h200")
    args = p.parse_args(argv)
    from lra.training.provenance import mark_start
    from lra.training.run_files import check_can_write, write_text_atomic
    from lra_lab.experiments.records import write_record
    from lra_lab.preflight import cache, targets
    from lra_lab.preflight.check import PreflightError, check_compiler, check_python, gpu_target_config

    try:
        parsed = [targets.parse(t) for t in args.targets]
        check_python(args.python)
        for t in parsed:
            if t.kind == "gpu":
                check_compiler(t, args.python)
                gpu_target_config(t)
        check_can_write(args.out, folder=True)
    except (PreflightError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    mark_start()
    command = "python -m lra_lab.preflight.fit_table " + " ".join(argv if argv is not None else sys.argv[1:])

    def write(out_rows: list[dict[str, Any]], complete: bool) -> None:
        record = {
            "targets": args.targets,
            "target_descriptions": [t.description for t in parsed],
            "tasks": args.tasks,
            "variants": args.variants,
            "ladder": [[n, o] for n, o in LADDER],
            "infer_from": args.infer_from or None,
            "versions": cache.versions_of(args.python),
            "complete": complete,
            "rows": out_rows,
        }
        path = args.out / f"{args.name}.json"
        write_record(path, record, command)
        import json

        write_text_atomic(args.out / f"{args.name}.md", markdown(json.loads(path.read_text())))

    out_rows = build(
        args.targets,
        args.python,
        args.infer_from or None,
        not args.no_cache,
        args.tasks,
        args.families,
        args.variants,
        on_row=lambda so_far: write(so_far, complete=False),
    )
    write(out_rows, complete=True)
    print(f"wrote {args.out / args.name}.md and .json")
    return 0 if all(all(f["fits"] for f in r["targets"].values()) for r in out_rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
