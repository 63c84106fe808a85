"""Where a config goes in one training run: the library files whose functions take it, in call order.

    python scripts/config_walk.py configs/listops_transformer.py:smoke

Runs ``lra.training.train_and_evaluate`` for two steps in a temporary folder with a trace hook that
records every call of a library function with a ConfigDict among its explicit arguments (not
``self.config``), merges consecutive calls in one file into one stop, and prints the stops, then
how often each file is entered (issue 55: "a walk of ``config`` from the training entry point
enters each file once or twice"). A reading aid for the loop's layout, not a test.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a config spec, e.g. configs/listops_transformer.py:smoke")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)

    import ml_collections

    from lra.config_args import config_from_args
    from lra.training import loop

    library = str(Path(loop.__file__).resolve().parents[1]) + os.sep
    calls: list[tuple[str, str]] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(library):
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            if any(isinstance(frame.f_locals.get(a), ml_collections.ConfigDict) for a in names if a != "self"):
                calls.append((code.co_filename[len(library) :], code.co_name))

    config = config_from_args(args.config)
    config.num_train_steps = config.eval_every = config.checkpoint_every = args.steps
    with tempfile.TemporaryDirectory(prefix="lra_config_walk_") as tmp:
        sys.settrace(hook)  # type: ignore[arg-type]
        try:
            loop.train_and_evaluate(config, Path(tmp) / "run")
        finally:
            sys.settrace(None)
    stops: list[tuple[str, list[str]]] = []
    for file, function in calls:
        if stops and stops[-1][0] == file:
            if function not in stops[-1][1]:
                stops[-1][1].append(function)
        else:
            stops.append((file, [function]))
    entered = collections.Counter(file for file, _ in stops)
    print()
    for file, functions in stops:
        print(f"lra/{file}: {', '.join(functions)}")
    print(f"\n{len(stops)} stops in {len(entered)} files; {len(stops) - len(entered)} returns to a file already left")
    for file, n in entered.most_common():
        print(f"  {n} x lra/{file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
