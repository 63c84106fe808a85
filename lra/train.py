"""Train, evaluate and log a run: ``python -m lra.train --config configs/X.py[:OPTIONS]``.

The command line only: the loop is lra.training. ``--config.seeds=0,1,2,3,4`` trains five seeds in one program, each
in its own ``seed<k>/`` workdir. Exit codes: lra.errors. This command (not a library call) keeps JAX's persistent
compilation cache, one folder per machine (:func:`machine_key`), so a resume loads its compiled steps:
``LRA_COMPILATION_CACHE=DIR`` moves it from ``$XDG_CACHE_HOME/lra/jax``, ``=off`` turns it off, a set
``JAX_COMPILATION_CACHE_DIR`` is left as JAX uses it (docs/running.md, "Resume").
"""

from __future__ import annotations

if __name__ == "__main__":  # before jax loads: glibc reads its allocator settings at process start
    from lra.cpu_speed import reexec_with_fast_allocator

    reexec_with_fast_allocator()

import hashlib  # noqa: E402
import os
import platform
import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lra.errors import EXIT_INVALID, describe, exit_code

if TYPE_CHECKING:
    from lra.training import Interrupted, NonFiniteLossError, train_and_evaluate
    from lra.training.loop import evaluate_split
    from lra.training.step import make_steps

__all__ = ["Interrupted", "NonFiniteLossError", "train_and_evaluate", "make_steps", "evaluate_split"]
_LAZY = {  # imported on first use (PEP 562): --help and a bad flag answer before jax loads
    "Interrupted": "lra.training",
    "NonFiniteLossError": "lra.training",
    "train_and_evaluate": "lra.training",
    "make_steps": "lra.training.step",
    "evaluate_split": "lra.training.loop",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ENV = "LRA_COMPILATION_CACHE"
OFF = ("", "0", "off", "none", "false")
_ISA_FLAG = re.compile(r"^(sse4|avx|fma|f16c|amx|asimd|sve|neon|bf16|i8mm|fphp)")  # CPU features LLVM's codegen reads


def cpu_identity() -> tuple[str, list[str]]:
    """(the CPU as LLVM identifies it, its instruction-set flags) from /proc/cpuinfo; elsewhere (processor, [])."""
    try:
        text = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return platform.processor(), []
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    ident = " ".join(fields.get(k, "") for k in ("vendor_id", "cpu family", "model", "CPU implementer", "CPU part"))
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    return " ".join(ident.split()), sorted(f for f in flags if _ISA_FLAG.match(f))


def machine_key() -> str:
    """A folder name for this machine's compiled programs: ``<arch>-<12 hex digits>``."""
    import jaxlib

    cpu, isa = cpu_identity()
    text = "|".join([jaxlib.__version__, platform.machine(), cpu, *isa])
    return f"{platform.machine()}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def cache_dir(environ: dict[str, str] | None = None) -> Path | None:
    """The folder a run's compiled programs go to, or None (off, or JAX's own setting rules)."""
    env = os.environ if environ is None else environ
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    chosen = env.get(ENV)
    if chosen is not None and chosen.strip().lower() in OFF:
        return None
    if chosen:
        root = Path(chosen).expanduser()
    else:
        root = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lra" / "jax"
    return root / machine_key()


def enable() -> Path | None:
    """Turn JAX's persistent compilation cache on; the folder, or None (a run never fails for its cache)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def quiet_library_errors() -> None:
    """A failed write is reported once, as an ``error:`` line, not as tracebacks from every worker thread."""
    import logging as pylogging

    class _FromWorkers(pylogging.Filter):
        def __init__(self, path_part: str):
            super().__init__()
            self.path_part = path_part

        def filter(self, record: pylogging.LogRecord) -> bool:
            return record.levelno < pylogging.ERROR or self.path_part not in record.pathname

    class _NoMetadataNotice(pylogging.Filter):
        """Integrity-format-1 checkpoints lack orbax's metadata file; its warnings say nothing the seal misses."""

        def filter(self, record: pylogging.LogRecord) -> bool:
            return not str(record.msg).startswith("Metadata file does not exist")

    pylogging.getLogger("absl").addFilter(_FromWorkers("orbax"))
    pylogging.getLogger("absl").addFilter(_NoMetadataNotice())
    for name in ("asyncio", "concurrent.futures"):
        pylogging.getLogger(name).addFilter(_FromWorkers(""))
    default_hook = sys.unraisablehook  # tensorstore's callbacks after orbax closed its loop

    def hook(unraisable: Any) -> None:
        value = unraisable.exc_value
        if not (isinstance(value, RuntimeError) and str(value) == "Event loop is closed"):
            default_hook(unraisable)

    sys.unraisablehook = hook
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited")


def main(argv: list[str], parsed: dict[str, Any]) -> None:
    from absl import flags, logging

    from lra.training import Interrupted, train_and_evaluate
    from lra.training.runs import seed_workdirs, set_command_line

    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint at INFO
    quiet_library_errors()
    enable()  # JAX's persistent compilation cache

    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}", EXIT_INVALID)
    config = parsed["config"]
    workdir = Path(flags.FLAGS.workdir) if flags.FLAGS.workdir else None
    set_command_line(sys.argv)  # refusals print a seed's own command built from this one
    try:
        results = train_and_evaluate(config, workdir, start_over=flags.FLAGS.start_over, profile=flags.FLAGS.profile)
        from lra.reports.listops_baseline import beside_baseline

        for result in results if isinstance(results, list) else [results]:  # ListOps: beside its floor
            line = beside_baseline(config, result["test_accuracy"])
            if line:
                print(line, flush=True)
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
    except (ValueError, RuntimeError, OSError) as e:  # every class has its code (lra.errors)
        try:
            code = exit_code(e)
        except TypeError:
            raise e from None  # a bug, not a run error: keep the traceback
        _fail(describe(e), code)


def _help(argv: list[str]) -> None:
    """``--help``: what the command does, its flags and the presets; exit 0 before --config is read."""
    from absl import flags

    from lra.defaults import PRESETS

    print(__doc__.strip(), "\n")
    print(
        "--config PATH[:OPTIONS]: the config file, e.g. configs/listops_transformer.py:cpu (required). "
        f"Presets (after the colon): {', '.join(PRESETS)}; family options too, e.g. "
        "configs/listops_convluna.py:cpu,mem=16,reference. Any config field: --config.FIELD=VALUE "
        "(fields: lra/defaults.py); a family option as a field too: "
        "--config.model.attention_kwargs.memory_size=16 is :memory_size=16.\n"
    )
    print(flags.FLAGS.module_help(sys.modules[__name__]) if __name__ in sys.modules else "", flush=True)
    sys.exit(0)


def parse_flags(argv: list[str], parsed: dict[str, Any]) -> list[str]:
    """``--config`` and ``--config.FIELD=VALUE`` into ``parsed["config"]``, locked; absl reads the other flags."""
    from absl import flags

    from lra.config_args import config_from_args, split_config_args
    from lra.errors import InputError

    if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
        _help(argv)
    # The arguments first, then the config file (which loads jax): a mistyped flag is answered at once.
    try:
        spec, overrides, rest = split_config_args(argv)
    except InputError as e:
        _fail(str(e), EXIT_INVALID)
    try:
        remaining = flags.FLAGS(rest)
    except flags.Error as e:  # absl's own errors (an unknown flag, a bad --profile type) name the flag
        _fail(str(e), EXIT_INVALID)
    if len(remaining) > 1:
        _fail(f"unexpected arguments: {' '.join(remaining[1:])}", EXIT_INVALID)
    try:
        if spec is None:
            raise InputError("--config is required, e.g. --config configs/listops_transformer.py:smoke")
        config = config_from_args(spec, overrides)
    except InputError as e:
        _fail(str(e), EXIT_INVALID)
    config.lock()
    parsed["config"] = config
    return remaining


def _define_flags() -> None:
    from absl import flags

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
        "<workdir>/profile (summary: python -m lra_lab.bench.profile_summary <that folder>)",
    )


if __name__ == "__main__":
    from functools import partial

    from absl import app

    _define_flags()
    _parsed: dict[str, Any] = {}  # the config parse_flags builds, for main
    app.run(partial(main, parsed=_parsed), flags_parser=partial(parse_flags, parsed=_parsed))
