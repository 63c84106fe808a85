"""``python -m lra_lab.preflight --config configs/X.py[:OPTIONS] --target TARGET`` and ``... sweep GRID``."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from lra.config_args import (
    Override,
    config_from_args,
    expand_options,
    field_value,
    fold_family_options,
    split_config_args,
)
from lra.console import GIB
from lra.errors import EXIT_INVALID, EXIT_STORAGE, Interrupted, describe
from lra.training.run_files import check_can_write
from lra_lab.preflight import targets
from lra_lab.preflight.check import (
    COMPILES,
    PreflightError,
    check_python,
    fit_microbatches,
    preflight,
    report_lines,
)
from lra_lab.preflight.estimate import check_price

EPILOG = """examples:
  python -m lra_lab.preflight --config configs/listops_convluna.py --target v5e:2x2
  python -m lra_lab.preflight --config configs/listops_transformer.py:cpu --target cpu --measure-steps 5
  python -m lra_lab.preflight sweep convluna_table1 --preset paper --target v5e:2x2 --out results/preflight
  python -m lra_lab.preflight --config configs/listops_convluna.py --target h100 --price-per-hour 2.50
  python -m lra_lab.preflight --config configs/text_transformer.py --target h100 --fit
targets: """ + ", ".join(targets.known())


def config_overrides(spec: str | None, fields: list[Override], sets: list[str] | None) -> tuple[str, dict[str, Any]]:
    """(the config spec with family options folded in, ``{dotted field: value}``) from ``--config SPEC``,
    each ``--config.FIELD=VALUE`` and the old spelling ``--set FIELD=VALUE``: checked and typed by the
    config itself (lra.config_args), so a misspelt field or ``mem=1.5`` fails before anything compiles."""
    if spec is None:
        raise PreflightError("--config is required, e.g. --config configs/listops_transformer.py:cpu")
    fields = [*fields, *expand_options(sets or [])]
    if any(d == "model.max_len" for d, _ in fields) and not any(d == "data.max_len" for d, _ in fields):
        # the data pipeline's length follows the model's, as in the benchmark
        fields.append(("data.max_len", next(v for d, v in reversed(fields) if d == "model.max_len")))
    config = config_from_args(spec, fields)
    spec, rest = fold_family_options(spec, fields)
    return spec, {dotted: field_value(config, dotted) for dotted, _ in rest}


def add_price_options(p: argparse.ArgumentParser) -> None:
    """--price-per-hour and --currency: the estimate's cost in money (device-hours x price)."""
    p.add_argument(
        "--price-per-hour",
        type=float,
        metavar="PRICE",
        help="price of one device-hour (a GPU, a TPU chip), e.g. 2.50: adds the cost, "
        "device-hours x PRICE, to the report or table",
    )
    p.add_argument("--currency", default="USD", help="the price's currency, as printed (default USD)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["sweep"]:
            p = argparse.ArgumentParser(
                prog="python -m lra_lab.preflight sweep",
                epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            p.add_argument("grid")
            p.add_argument("--preset", default="paper")
            p.add_argument("--target", required=True)
            p.add_argument("--tasks", nargs="+")
            p.add_argument("--variants", nargs="+")
            p.add_argument("--group-seeds", choices=("on", "off"), default="off")
            p.add_argument("--python", default=sys.executable)
            p.add_argument("--no-cache", action="store_true")
            p.add_argument(
                "--jobs",
                type=int,
                default=1,
                help="compilations at a time (each a child process: about one core and 3.5 GB)",
            )
            p.add_argument("--out", type=Path, help="write <out>/<grid>_<preset>_<target>.md")
            add_price_options(p)
            a = p.parse_args(argv[1:])
            targets.parse(a.target)
            check_price(a.price_per_hour)
            if a.jobs < 1:
                raise PreflightError(f"--jobs {a.jobs}: need >= 1 (compilations at a time)")
            check_python(a.python)
            if a.out:
                check_can_write(a.out, folder=True)  # PF8: refused before anything compiles
            from lra_lab.preflight.sweep_table import render, sweep_summary

            with COMPILES.forwarding():
                summary = sweep_summary(
                    a.grid,
                    a.preset,
                    a.target,
                    tasks=a.tasks,
                    variants=a.variants,
                    group_seeds=a.group_seeds == "on",
                    python=a.python,
                    use_cache=not a.no_cache,
                    jobs=a.jobs,
                )
            if a.price_per_hour is not None:  # in the record too: the table is rendered from it alone
                summary.update(price_per_hour=a.price_per_hour, currency=a.currency)
            table = render(summary)
            print(table)
            if a.out:
                from lra.training.run_files import write_json_atomic, write_text_atomic

                a.out.mkdir(parents=True, exist_ok=True)
                subset = "".join(f"_{x}" for x in (a.tasks or []) + (a.variants or []))
                path = a.out / f"{a.grid}_{a.preset}_{a.target.replace(':', '-')}{subset}.md"
                write_text_atomic(path, table)
                write_json_atomic(path.with_suffix(".json"), summary)
                print(f"wrote {path} and its .json")
            return 0
        p = argparse.ArgumentParser(
            prog="python -m lra_lab.preflight",
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            description="Does a config fit a target, and what does a step and a run cost?",
        )
        p.add_argument("--config", metavar="PATH[:OPTIONS]", help="configs/<task>_<attention>.py[:OPTIONS] (required)")
        p.add_argument("--target", required=True, help="cpu, a TPU topology (v5e:2x2) or a GPU (h100, h100x8)")
        p.add_argument("--batch", type=int, help="global batch (default: the config's)")
        p.add_argument("--seeds", type=int, default=1, help="seeds vmapped in one program (default 1)")
        p.add_argument(
            "--set",
            action="append",
            metavar="KEY=VALUE",
            help="old spelling of --config.FIELD=VALUE (any config field, repeatable), e.g. --config.model.max_len=512",
        )
        p.add_argument("--measure-steps", type=int, default=3, help="cpu target: real steps timed (0: none)")
        p.add_argument("--python", default=sys.executable, help="the interpreter that compiles (e.g. a libtpu venv)")
        p.add_argument("--no-cache", action="store_true")
        p.add_argument("--json", type=Path, help="also write the result as JSON")
        p.add_argument(
            "--fit",
            action="store_true",
            help="find the smallest config.microbatches (gradient accumulation, same step) whose step fits "
            "the target's memory (or --memory-budget), compiling 1, 2, ... in turn, and report it",
        )
        p.add_argument(
            "--memory-budget",
            type=float,
            metavar="GIB",
            help="judge the fit against this many GiB per device instead of the target's memory",
        )
        add_price_options(p)
        spec, fields, rest = split_config_args(argv)
        a = p.parse_args(rest)
        spec, overrides = config_overrides(spec, fields, a.set)
        if a.seeds < 1:
            raise PreflightError(f"--seeds {a.seeds}: need >= 1")
        check_price(a.price_per_hour)
        check_python(a.python)
        if a.json:
            check_can_write(a.json)  # PF8: refused before anything compiles
        if a.memory_budget is not None and not a.memory_budget > 0:
            raise PreflightError(f"--memory-budget {a.memory_budget}: need a positive number of GiB")
        budget = int(a.memory_budget * GIB) if a.memory_budget else None
        with COMPILES.forwarding():
            r = (fit_microbatches if a.fit else preflight)(
                spec,
                a.target,
                batch=a.batch,
                seeds=a.seeds,
                measure_steps=a.measure_steps,
                python=a.python,
                use_cache=not a.no_cache,
                overrides=overrides,
                memory_budget=budget,
            )
        print("\n".join(report_lines(r, a.price_per_hour, a.currency)))
        if a.json:
            from lra.training.run_files import write_json_atomic

            a.json.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(a.json, r)
    except (PreflightError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:  # an output that cannot be written (full disk, read-only, a file in the way)
        print(f"error: {describe(e)}", file=sys.stderr)
        return EXIT_STORAGE
    except (Interrupted, KeyboardInterrupt) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(
            f"interrupted by {signal.Signals(signum).name}: stopped "
            f"{', '.join(COMPILES.interrupted) or 'the compilation'}"
            "; nothing of it was cached or written (rerun the same command)",
            file=sys.stderr,
        )
        return 128 + signum
    return 0 if r.get("status") == "ok" or r.get("resource_exhausted") else 1


if __name__ == "__main__":
    raise SystemExit(main())
