"""Masked-copy task (Fast Transformers with Clustered Attention, arXiv:2007.04825, App. C.2): full vs
clustered vs improved clustered.

Trains a small model per variant and writes ``results.json`` and ``results.md`` (with this exact
command and the settings) to ``--out``. The defaults (L=31, 800 steps; full, clustered-4,
clustered-16, i-clustered-4) take a few minutes on a 2-core CPU:

    python scripts/masked_copy.py
    python scripts/masked_copy.py --seq-len 63 --variants clustered:8 improved_clustered:8
    python scripts/masked_copy.py --variants clustered:clusters=8 improved_clustered:clusters=8,topk=4

After the colon: the number of clusters C, or the family's options as a config's short form takes
them (``clustered:clusters=8`` is ``clustered:8``: the same variant, label, record and numbers).

A call that is killed keeps its finished variants in ``<out>/partial.jsonl``; the same command
resumes from them (``--restart`` discards them).
"""

from __future__ import annotations

if __name__ == "__main__":  # before jax loads: the faster allocator is set up at process start (lra.training.cpu_speed)
    from lra.training.cpu_speed import reexec_with_fast_allocator

    reexec_with_fast_allocator()

import argparse
import dataclasses
import pathlib
import shlex
import sys

from lra.experiments import masked_copy
from lra.training.run_errors import WorkdirLockedError, describe, exit_code


def main(argv: list[str] | None = None) -> None:
    defaults = masked_copy.Settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(masked_copy.Settings):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if field.name == "variants":
            parser.add_argument(
                flag,
                nargs="+",
                default=list(default),
                help="softmax, clustered:C, improved_clustered:C; or the family's options as a config's short "
                "form takes them, clustered:clusters=C (the same variant as clustered:C) (default: %(default)s)",
            )
        elif field.name == "swap_eval":
            parser.add_argument(
                flag,
                nargs="+",
                default=[],
                help="also evaluate the trained softmax variant with each of clustered:C, improved_clustered:C "
                "(the paper's Table 1: train with one, evaluate with another)",
            )
        else:
            parser.add_argument(flag, type=type(default), default=default, help="default: %(default)s")
    parser.add_argument("--out", default="results/masked_copy", help="output folder (default: %(default)s)")
    parser.add_argument(
        "--restart", action="store_true", help="discard the finished variants of an interrupted call in --out"
    )
    args = vars(parser.parse_args(argv))
    out, restart = pathlib.Path(args.pop("out")), args.pop("restart")
    args["variants"], args["swap_eval"] = tuple(args["variants"]), tuple(args["swap_eval"])
    command = shlex.join(["python", "scripts/masked_copy.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        settings = masked_copy.Settings(**args)
        # one spelling per variant in the record (clustered:clusters=15 is clustered:15), so either resumes the other
        settings = dataclasses.replace(
            settings,
            variants=tuple(masked_copy.canonical_variant(v, settings) for v in settings.variants),
            swap_eval=tuple(masked_copy.canonical_variant(v, settings) for v in settings.swap_eval),
        )
        masked_copy.run_resumable(settings, out, command, restart, log=lambda line: print(line, flush=True))
    except (ValueError, OSError, WorkdirLockedError) as e:  # bad settings (2), --out in use (3), disk (4)
        try:
            code = exit_code(e)
        except TypeError:
            raise e from None  # a bug, not bad settings: keep the traceback
        print(f"error: {describe(e)}", file=sys.stderr, flush=True)
        sys.exit(code)
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")


if __name__ == "__main__":
    main()
