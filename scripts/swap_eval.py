"""Evaluate one trained run with several attentions of softmax's parameter tree; write a table.

The clustered-attention paper's Table 1 experiment ("train with full, evaluate with clustered")
on our tasks:

    python scripts/swap_eval.py --workdir runs/sweeps/lra_families_cpu/listops_transformer/seed0 \\
        --out results/swap_eval_listops_cpu \\
        softmax clustered:clusters=8 clustered:clusters=32 improved_clustered:clusters=8

Each entry is ATTENTION[:k=v,...]; results are also appended to the run's evaluations.jsonl.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lra.errors import InputError  # noqa: E402
from lra.evaluate import evaluate_run, evaluation_config, fail, load_run_config, parse_options  # noqa: E402
from lra.training.provenance import (  # noqa: E402
    mark_start,
    seal,  # noqa: E402
    stamp,
)
from lra.training.run_files import append_jsonl, check_can_write, write_json_atomic, write_text_atomic  # noqa: E402


def checked_entries(workdir: Path, config, entries: list[str]) -> list[tuple[str, str, dict]]:
    """Every entry parsed and its config checked (the parameter trees, the options) before any is
    evaluated: a bad last entry must not cost the evaluations before it. InputError naming it."""
    out = []
    for entry in entries:
        name, _, opts = entry.partition(":")
        try:
            options = parse_options(name, opts.split(","))
            evaluation_config(workdir, config, name, options)
        except InputError as e:  # a bug in the check is not the entry's fault: it keeps its traceback
            raise InputError(f"entry {entry!r}: {e}") from None
        out.append((entry, name, options))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--split", default="test", choices=["test", "validation"])
    parser.add_argument("entries", nargs="+", help="ATTENTION[:k=v,...]")
    args = parser.parse_args(argv)
    mark_start()
    try:  # one error line and the suite's exit code (a missing run 2, a damaged one 5, a full disk 4)
        config = load_run_config(args.workdir)
        entries = checked_entries(args.workdir, config, args.entries)
        check_can_write(args.out, folder=True)
        rows = []
        for i, (entry, name, options) in enumerate(entries, 1):
            start = time.perf_counter()
            row = evaluate_run(args.workdir, config, name, options, args.split)
            row["seconds"] = time.perf_counter() - start
            rows.append(row)
            append_jsonl(args.workdir / "evaluations.jsonl", row)
            print(f"[{i}/{len(entries)}] {entry}: {args.split} accuracy {row['accuracy']:.4f}", flush=True)

        args.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out / "swap_eval.json", {"workdir": str(args.workdir), **stamp(), "rows": rows})
        seal(args.out / "swap_eval.json")  # an edit after this is found by the audit (lra.training.provenance)
        lines = [
            f"Checkpoint of `{args.workdir}` (trained with {rows[0]['trained_with']}, step {rows[0]['step']}),",
            f"evaluated on {args.split} with each attention. Command: `python {' '.join(sys.argv)}`",
            "",
            "| attention | options | accuracy (%) | loss |",
            "|---|---|---:|---:|",
        ]
        for r in rows:
            opts = ", ".join(f"{k}={v}" for k, v in r["attention_kwargs"].items()) or "-"
            lines.append(f"| {r['attention']} | {opts} | {100 * r['accuracy']:.2f} | {r['loss']:.4f} |")
        write_text_atomic(args.out / "swap_eval.md", "\n".join(lines) + "\n")
    except (ValueError, RuntimeError, OSError) as e:
        fail(e)
    print(f"wrote {args.out}/swap_eval.md")


if __name__ == "__main__":
    main()
