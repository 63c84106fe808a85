"""Registered claims judged again on a replication's runs: the same rule code, another set of records.

A confirmatory verdict rests on one set of runs on one machine. A replication of the same design
(another device, seeds vmapped in one program instead of one process each) should be judged by the
claims' own registered judges, not by a new script that might differ from them. The judges read
their records from fixed paths under a repository root, so this module builds a temporary root
whose registered run folder is a link to the replication's folder and calls each claim's
``outcome`` there: no judge is edited or copied.

Beside the verdicts it compares the two sets of runs seed by seed, row by row (same seed, same
data order and initialisation, other arithmetic): the paired mean difference of test accuracy, its
95% interval and the two-sided paired t-test (``lra.reports.compare.paired``), and the correlation
over seeds. A replication judged here is reported beside the registered verdict, never in its
place::

    python -m lra_lab.reproduce.replication --paper convluna --claims confirm-table1-listops confirm-fig2-memory-size \\
        --registered results/runs/convluna_listops_confirm --replication results/runs/convluna_listops_confirm_h100 \\
        --label "H100" --out results/listops_confirm_h100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lra.errors import StorageError, exit_code
from lra.reports.compare import paired
from lra.training.run_files import check_can_write, record_problem, write_json_atomic, write_text_atomic


def judge_on(claims: Sequence[Any], registered: str, replication: Path) -> dict[str, Any]:
    """Each claim's outcome with ``replication`` standing in for the folder ``registered`` (repo-relative)."""
    from lra_lab.reproduce.evidence import DESIGN_PROGRAM

    with tempfile.TemporaryDirectory(prefix="lra_replication_") as tmp:
        link = Path(tmp) / registered
        link.parent.mkdir(parents=True)
        os.symlink(replication.resolve(), link)
        token = DESIGN_PROGRAM.set(False)  # another machine by design: one device and program per row
        try:
            outcomes = {claim.id: claim.outcome(Path(tmp)) for claim in claims}
        finally:
            DESIGN_PROGRAM.reset(token)
    # the judges name their records under the registered folder: name the replication's files that were
    # read (issue 52 RP11: the verdict named the intact registered file, not the damaged replication one)
    here = str(replication)
    return {
        key: dataclasses.replace(o, missing=tuple(m.replace(registered, here) for m in o.missing))
        for key, o in outcomes.items()
    }


def seed_accuracies(run_dir: Path) -> tuple[dict[int, float], list[str]]:
    """Test accuracy (%) per seed of the finished runs in ``run_dir/seed<k>/``, and the records skipped (why).

    A record counts only if it passes the check every reader makes (``run_files.record_problem``: a
    finished run's, agreeing with its own config.json, metrics.jsonl and sessions.jsonl, of the seed its
    folder names), is of the row its folder names (``<task>_<slug of its variant>``), and ran on the
    row's device and program (``evidence.program_problems``): the same validation as the verdicts, so a
    record the verdict refuses never enters the seed-by-seed table (issue 52 RP13)."""
    from lra_lab.experiments.sweep import slug
    from lra_lab.reproduce.evidence import program_problems

    found, skipped, programs = {}, [], {}
    for path in sorted(run_dir.glob("seed*/result.json")):
        problem = record_problem(path)
        seed = path.parent.name.removeprefix("seed")
        result = json.loads(path.read_text()) if problem is None else {}
        if problem is None and not seed.isdigit():
            problem = f"its folder {path.parent.name} names no seed"
        row = f"{result.get('task')}_{slug(str(result.get('variant')))}"
        if problem is None and run_dir.name != row and not run_dir.name.startswith(f"{row}-"):  # -: [field=value]
            problem = f"it is a record of {result['task']} / {result['variant']!r}, not of the row {run_dir.name}"
        if problem is not None:
            skipped.append(f"{path} ({problem})")
            continue
        found[int(seed)] = 100.0 * float(result["test_accuracy"])
        programs[int(seed)] = (str(result.get("device_kind")), result.get("seeds_in_program"))
    for k, why in program_problems(programs).items():
        del found[k]
        skipped.append(f"{run_dir / f'seed{k}' / 'result.json'} ({why})")
    return found, skipped


def compare_rows(registered: Path, replication: Path) -> list[dict[str, Any]]:
    """Per row of the replication: each side's mean and, over common seeds, the paired replication - registered."""
    rows = []
    for run_dir in sorted(p for p in replication.iterdir() if p.is_dir()):
        (a, skip_a), (b, skip_b) = seed_accuracies(run_dir), seed_accuracies(registered / run_dir.name)
        common = sorted(set(a) & set(b))
        row: dict[str, Any] = {
            "row": run_dir.name,
            "seeds_registered": len(b),
            "seeds_replication": len(a),
            "mean_registered": float(np.mean(list(b.values()))) if b else None,
            "mean_replication": float(np.mean(list(a.values()))) if a else None,
            "common_seeds": common,
            "skipped": skip_a + skip_b,
        }
        if len(common) >= 3:
            stats = paired(a, b)
            row.update(
                mean_difference=stats["mean_difference"],
                ci=stats["ci"],
                t_p_two_sided=stats["t_p_two_sided"],
                correlation=float(np.corrcoef([a[k] for k in common], [b[k] for k in common])[0, 1]),
            )
        rows.append(row)
    return rows


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def structure_free(replication: Path) -> tuple[dict[str, Any] | None, str | None]:
    """ListOps's structure-free baseline on the data the replication's first recorded run names (its
    rows share one data set), and the report's sentence; (None, None) for records that name no ListOps data."""
    from lra.reports.table_curves import first_baseline

    return first_baseline(sorted(replication.glob("*/seed*/config.json")))


def render(
    label: str, outcomes: dict[str, Any], rows: list[dict[str, Any]], command: str, reference: str | None = None
) -> str:
    """The markdown report: the verdicts on the replication, then the seed-by-seed comparison, then
    ``reference`` (the trivial baseline's sentence, where there is one)."""
    lines = [
        f"# Registered claims judged on a replication: {label}",
        "",
        f"Made by `{command}`.",
        "",
        "The claims' registered judges, unchanged, read the replication's records in place of the registered "
        "runs (lra_lab.reproduce.replication). These verdicts stand beside the registered ones, not in their place.",
        "",
        "| claim | verdict on the replication | ours | statistic |",
        "|---|---|---|---|",
    ]
    for claim_id, o in outcomes.items():
        verdict = o.verdict + (f" ({o.detail})" if o.detail else "")
        ours = o.ours or ("missing: " + "; ".join(o.missing[:3]) if o.missing else "")
        lines.append(f"| {claim_id} | {verdict} | {ours} | {o.statistic} |")
    lines += [
        "",
        "## Seed by seed: replication - registered runs (same seeds, test accuracy, points)",
        "",
        "| row | registered (seeds) | replication (seeds) | paired difference [95% CI] | paired t p (two-sided) "
        "| correlation over seeds |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff = (
            f"{r['mean_difference']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] ({len(r['common_seeds'])} seeds)"
            if "mean_difference" in r
            else f"- ({len(r['common_seeds'])} common seeds)"
        )
        lines.append(
            f"| {r['row']} | {_fmt(r['mean_registered'])} ({r['seeds_registered']}) | "
            f"{_fmt(r['mean_replication'])} ({r['seeds_replication']}) | {diff} | "
            f"{_fmt(r.get('t_p_two_sided'), '.3g')} | {_fmt(r.get('correlation'), '.2f')} |"
        )
    skipped = [s for r in rows for s in r.get("skipped", [])]
    if skipped:
        lines += ["", "Records skipped (damaged, unfinished or foreign): " + "; ".join(skipped)]
    if reference:
        lines += ["", reference]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from lra_lab.reproduce import registry

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--paper", required=True, help="the paper's key in lra_lab.reproduce (e.g. convluna)")
    parser.add_argument("--claims", nargs="+", required=True, help="claim ids whose judges read --registered")
    parser.add_argument("--registered", required=True, help="the registered run folder, relative to the repo root")
    parser.add_argument("--replication", required=True, type=Path, help="the replication's run folder (same layout)")
    parser.add_argument("--label", required=True, help="what the replication is, for the report's title")
    parser.add_argument("--out", type=Path, help="write replication.md and replication.json here")
    args = parser.parse_args(argv)
    try:
        claims = [registry.find(args.paper, claim_id)[1][0] for claim_id in args.claims]
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    outside = [c.id for c in claims if not any(r.startswith(args.registered.rstrip("/") + "/") for r in c.records)]
    if outside or not args.replication.is_dir():
        why = (
            f"{', '.join(outside)} read no record under {args.registered}"
            if outside
            else f"{args.replication} is not a folder"
        )
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.out:
        try:
            check_can_write(args.out, folder=True)
        except StorageError as e:
            print(f"error: {e}", file=sys.stderr)
            return exit_code(e)
    outcomes = judge_on(claims, args.registered, args.replication)
    rows = compare_rows(registry.REPO / args.registered, args.replication)
    command = "python -m lra_lab.reproduce.replication " + " ".join(
        a if " " not in a else f'"{a}"' for a in (argv if argv is not None else sys.argv[1:])
    )
    baseline, reference = structure_free(args.replication)
    text = render(args.label, outcomes, rows, command, reference)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out / "replication.md", text)
        write_json_atomic(
            args.out / "replication.json",
            {
                "command": command,
                "label": args.label,
                "outcomes": {
                    k: {
                        "verdict": o.verdict,
                        "ours": o.ours,
                        "statistic": o.statistic,
                        "detail": o.detail,
                        "missing": list(o.missing),
                    }
                    for k, o in outcomes.items()
                },
                "rows": rows,
                "listops_structure_free_baseline": baseline,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
