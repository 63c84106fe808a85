"""Masked-copy task (Fast Transformers with Clustered Attention, arXiv:2007.04825, App. C.2): full vs clustered vs improved clustered.

Trains a small model per variant and writes ``results.json`` and ``results.md`` (with this exact
command and the settings) to ``--out``. The defaults (L=31, 800 steps; full, clustered-4,
clustered-16, i-clustered-4) take a few minutes on a 2-core CPU:

    python scripts/masked_copy.py
    python scripts/masked_copy.py --seq-len 63 --variants clustered:8 improved_clustered:8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import sys

from lra import masked_copy


def main(argv: list[str] | None = None) -> None:
    defaults = masked_copy.Settings()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(masked_copy.Settings):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if field.name == "variants":
            parser.add_argument(
                flag, nargs="+", default=list(default),
                help="softmax, clustered:C, improved_clustered:C (default: %(default)s)")
        else:
            parser.add_argument(flag, type=type(default), default=default,
                                help="default: %(default)s")
    parser.add_argument("--out", default="results/masked_copy",
                        help="output folder (default: %(default)s)")
    args = vars(parser.parse_args(argv))
    out = pathlib.Path(args.pop("out"))
    args["variants"] = tuple(args["variants"])
    settings = masked_copy.Settings(**args)

    result = masked_copy.run_experiment(settings, log=lambda line: print(line, flush=True))
    command = shlex.join(["python", "scripts/masked_copy.py", *(sys.argv[1:] if argv is None else argv)])
    result["command"] = command
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "results.md").write_text(masked_copy.markdown_report(result, command))
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")


if __name__ == "__main__":
    main()
