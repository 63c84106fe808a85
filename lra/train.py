"""Train, evaluate and log a run: ``python -m lra.train --config configs/X.py[:OPTIONS]``.

The command line only: the loop is lra.training (its package docstring is the map).
``--config.seeds=0,1,2,3,4`` trains five seeds in one program, each in its own ``seed<k>/``
workdir. Exit codes: lra.training.run_errors.
"""

from __future__ import annotations

if __name__ == "__main__":  # before jax loads: glibc reads its allocator settings at process start
    from lra.training.cpu_speed import reexec_with_fast_allocator

    reexec_with_fast_allocator()

import sys  # noqa: E402
import warnings
from pathlib import Path
from typing import Any

from lra.training import Interrupted, NonFiniteLossError, train_and_evaluate
from lra.training.run_errors import EXIT_INVALID, describe, exit_code
from lra.training.seeds import seed_workdirs, set_command_line
from lra.training.steps import evaluate_split, make_steps

__all__ = ["Interrupted", "NonFiniteLossError", "train_and_evaluate", "make_steps", "evaluate_split"]


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def quiet_library_errors() -> None:
    """Orbax, asyncio and thread pools log a failed write (a full disk) from their worker threads,
    each with a traceback; the run reports it once, as an ``error:`` line naming the path."""
    import logging as pylogging

    class _FromWorkers(pylogging.Filter):
        def __init__(self, path_part: str):
            super().__init__()
            self.path_part = path_part

        def filter(self, record: pylogging.LogRecord) -> bool:
            return record.levelno < pylogging.ERROR or self.path_part not in record.pathname

    pylogging.getLogger("absl").addFilter(_FromWorkers("orbax"))
    for name in ("asyncio", "concurrent.futures"):
        pylogging.getLogger(name).addFilter(_FromWorkers(""))
    # tensorstore's callbacks, finishing after orbax closed its event loop, report it as unraisable
    default_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        value = unraisable.exc_value
        if not (isinstance(value, RuntimeError) and str(value) == "Event loop is closed"):
            default_hook(unraisable)

    sys.unraisablehook = hook
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited")


def main(argv: list[str]) -> None:
    from absl import flags, logging

    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint at INFO
    quiet_library_errors()

    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}", EXIT_INVALID)
    config = flags.FLAGS.config
    workdir = Path(flags.FLAGS.workdir) if flags.FLAGS.workdir else None
    set_command_line(sys.argv)  # refusals print a seed's own command built from this one
    try:
        results = train_and_evaluate(config, workdir, start_over=flags.FLAGS.start_over, profile=flags.FLAGS.profile)
        if isinstance(results, list) and len(results) > 1:  # a bundle: its summary line
            from lra.reports.compare import mean_std_line

            print(
                mean_std_line(
                    f"{config.variant} on {config.task}, test accuracy", [100 * r["test_accuracy"] for r in results]
                ),
                flush=True,
            )
    except Interrupted as e:
        where = ", ".join(str(w) for w in seed_workdirs(config, workdir))
        then = ("checkpoint saved in" if e.saved else "nothing needed saving in") + f" {where}"
        print(f"{e}; {then}. Rerun the same command to resume.", file=sys.stderr, flush=True)
        sys.exit(exit_code(e))
    except (ValueError, RuntimeError, OSError) as e:  # every class has its code (lra.training.run_errors)
        try:
            code = exit_code(e)
        except TypeError:
            raise e from None  # a bug, not a run error: keep the traceback
        _fail(describe(e), code)


def _help(argv: list[str]) -> None:
    """``--help``: what the command does, its flags and the presets; exit 0 (absl's required --config
    would otherwise turn it into an error)."""
    from absl import flags

    from lra.defaults import PRESETS

    print(__doc__.strip(), "\n")
    print(
        f"Presets (after the colon): {', '.join(PRESETS)}; family options too, e.g. "
        "configs/listops_convluna.py:cpu,mem=16,reference. Any config field: --config.FIELD=VALUE "
        "(fields: lra/defaults.py).\n"
    )
    print(flags.FLAGS.module_help(sys.modules[__name__]) if __name__ in sys.modules else "", flush=True)
    sys.exit(0)


def check_overrides(argv: list[str]) -> str | None:
    """Every ``--config.FIELD=VALUE`` checked against the config it overrides, before absl parses
    them: one line naming the field, the nearest valid names, and for a family option given as a
    field the short form after the colon (None: all fine, or the config itself cannot be built,
    which parse_flags reports)."""
    from lra import attention as registry
    from lra.defaults import OPTION_ALIASES, _cast_like, existing_field, load_config_file

    spec = _config_arg(argv)
    if not spec or not Path(spec.split(":", 1)[0]).is_file():
        return None
    path, _, options = spec.partition(":")
    try:
        config = load_config_file(path).get_config(options or None)
    except Exception:  # noqa: BLE001 -- the config file's own error is reported by parse_flags, with its text
        return None
    for i, arg in enumerate(argv):
        if not arg.startswith("--config."):
            continue
        dotted, sep, value = arg[len("--config.") :].partition("=")
        if not sep:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        try:
            node = existing_field(config, dotted)
            _cast_like(node[dotted.split(".")[-1]], value, dotted)
        except ValueError as e:
            leaf = dotted.split(".")[-1]
            family = OPTION_ALIASES.get(leaf, leaf)
            hint = ""
            if family in registry.option_names(config.model.attention):
                short = ",".join(filter(None, [options, f"{leaf}={value}"]))
                hint = f"; {leaf} is an option of the {config.model.attention} family: --config {path}:{short}"
            return f"--config.{dotted}={value}: {e}{hint}"
    return None


FAMILY_FIELD = "--config.model.attention_kwargs."


def fold_family_options(argv: list[str]) -> list[str]:
    """``--config.model.attention_kwargs.memory_size=8`` is the family option ``memory_size=8``: it is
    moved after the config's colon (``configs/X.py:cpu,memory_size=8``), the one place family options
    are read (the variant's name and default workdir follow it), so both spellings train one model.
    An option the family does not have is left for :func:`check_overrides` to name."""
    from lra import attention as registry
    from lra.defaults import OPTION_ALIASES, load_config_file

    spec = _config_arg(argv)
    folded = [a for a in argv if a.startswith(FAMILY_FIELD) and "=" in a]
    if not spec or not folded or not Path(spec.split(":", 1)[0]).is_file():
        return argv
    path, _, options = spec.partition(":")
    try:
        family = load_config_file(path).get_config(options or None).model.attention
    except Exception:  # noqa: BLE001 -- the config file's own error is reported by parse_flags, with its text
        return argv
    known = set(registry.option_names(family))
    moved = [a for a in folded if OPTION_ALIASES.get(k := a[len(FAMILY_FIELD) :].split("=", 1)[0], k) in known]
    if not moved:
        return argv
    new_spec = ",".join(filter(None, [options, *(a[len(FAMILY_FIELD) :] for a in moved)]))
    out = []
    for i, arg in enumerate(argv):
        if arg in moved:
            continue
        if arg.startswith("--config="):
            arg = f"--config={path}:{new_spec}"
        elif i > 0 and argv[i - 1] == "--config":
            arg = f"{path}:{new_spec}"
        out.append(arg)
    return out


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing, with a bad flag, config file or config field as one ``error:`` line (exit 2)."""
    from absl import flags

    if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
        _help(argv)
    argv = fold_family_options(argv)
    problem = check_overrides(argv)
    if problem:
        _fail(problem, EXIT_INVALID)
    try:
        rest = flags.FLAGS(argv)
    except flags.Error as e:  # ml_collections puts the config file's traceback in the message
        missing = config_file_problem(None, _config_arg(argv))
        if missing:
            _fail(missing, EXIT_INVALID)
        lines = [line for line in str(e).splitlines() if line.strip()]
        if any(line.startswith("Traceback") for line in lines):
            lines = [lines[0].rstrip(":"), lines[-1]]
        _fail(": ".join(lines), EXIT_INVALID)
    except (AttributeError, KeyError) as e:  # ml_collections: a --config.<field> the config lacks
        name = str(e).strip("\"'")
        given = [a.split("=")[0] for a in argv if a.startswith("--config.") and name in a.split("=")[0].split(".")]
        _fail(
            f"{given[0] if given else 'a --config override'}: the config has no field {name!r} "
            f"(fields: lra/defaults.py)",
            EXIT_INVALID,
        )
    except (ValueError, TypeError, OSError) as e:  # the config file or its options
        flag = flags.FLAGS["config"]
        missing = config_file_problem(flag.value, getattr(flag, "_config_filename", None) or _config_arg(argv))
        _fail(missing or f"--config: {e}", EXIT_INVALID)
    config_flag: Any = flags.FLAGS["config"]  # ml_collections' config flag (untyped) adds config_filename
    missing = config_file_problem(config_flag.value, config_flag.config_filename)
    if missing:
        _fail(missing, EXIT_INVALID)
    return rest


def _config_arg(argv: list[str]) -> str | None:
    """The value of --config on the command line (--config=X or --config X)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def config_file_problem(config: Any, filename: str | None) -> str | None:
    """A --config file that could not be loaded (a misspelt path), as one line naming it and the
    nearest config files; None when there is nothing to say. ml_collections defers that error to
    the first use of the config, where it would read as a write failure of the run (exit 4)."""
    from ml_collections.config_flags.config_flags import _ErrorConfig

    path = Path((filename or "").split(":", 1)[0])
    if filename and not path.is_file():
        import difflib

        folder = path.parent if path.parent.is_dir() else Path("configs")
        names = sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []
        close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
        hint = (
            f"did you mean {', '.join(str(folder / n) for n in close)}?"
            if close
            else "the configs are configs/<task>_<attention>.py, e.g. configs/listops_transformer.py:smoke"
        )
        return f"--config {path}: no such file; {hint}"
    if isinstance(config, _ErrorConfig):  # it exists, so loading it failed for another reason
        error = object.__getattribute__(config, "_error")
        return f"--config {path}: {str(error).strip().splitlines()[-1].strip()}"
    return None


def _define_flags() -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "Config file, e.g. configs/listops_transformer.py:cpu", lock_config=True
    )
    flags.DEFINE_string(
        "workdir",
        None,
        "Run directory (default: runs/<task>_<variant>[_<preset>]/seed<k>); with "
        "several --config.seeds, the parent of their seed<k>/ directories.",
    )
    flags.DEFINE_bool(
        "start_over",
        False,
        "Delete the workdir's previous run (checkpoints, result, metrics, "
        "config) and train from step 0; needed when that run cannot be resumed. With several "
        "--config.seeds it deletes every seed's run (each lock is taken first); to start one seed "
        "over, use the seed's own command, which a refusal prints.",
    )
    flags.DEFINE_string(
        "profile",
        None,
        "START:COUNT: a jax.profiler trace of steps START+1..START+COUNT in "
        "<workdir>/profile (summary: python -m lra.bench.profile_summary <that folder>)",
    )
    flags.mark_flags_as_required(["config"])


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main, flags_parser=parse_flags)
