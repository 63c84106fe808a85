"""Masked-copy task (Fast Transformers with Clustered Attention, arXiv:2007.04825, App. C.2): full vs
clustered vs improved clustered.

Trains a small model per variant and writes ``results.json`` and ``results.md`` (with this exact
command and the settings) to ``--out``. The defaults (L=31, 800 steps; full, clustered-4,
clustered-16, i-clustered-4) take a few minutes on a 2-core CPU:

    python scripts/masked_copy.py
    python scripts/masked_copy.py --config.seq_len=63 --variants clustered:8 improved_clustered:8
    python scripts/masked_copy.py --variants clustered:clusters=8 improved_clustered:clusters=8,topk=4

Settings: ``--config.FIELD=VALUE`` (or ``--config.FIELD VALUE``) sets one field of the task's config
(listed below with its default) through the suite's one setter, as for ``python -m lra.train``: the
field must exist (a misspelt one names the nearest) and the value is cast to the field's type
(``--config.steps=1.5`` is refused: one ``error:`` line, exit 2). ``--seq-len 63`` (each field's name
with dashes) is the old spelling of ``--config.seq_len=63``: the same field through the same setter,
so every recorded command runs as it did, and a call in either spelling makes the same record and
resumes the other's. Given twice, in either spelling, the last one counts.

Variants (``--variants``, ``--swap-eval``: several models each, so flags of their own): after the
colon, the number of clusters C, or the family's options as a config's short form takes them
(``clustered:clusters=8`` is ``clustered:8``: the same variant, label, record and numbers).

A call that is killed keeps its finished variants in ``<out>/partial.jsonl``; the same command
resumes from them (``--restart`` discards them).
"""

from __future__ import annotations

if __name__ == "__main__":  # before jax loads: the faster allocator is set up at process start (lra.cpu_speed)
    from lra.cpu_speed import reexec_with_fast_allocator

    reexec_with_fast_allocator()

import argparse
import pathlib
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from lra.config_args import as_old_spelling, split_config_args
from lra.config_fields import apply_override
from lra.errors import InputError, WorkdirLockedError, describe, exit_code
from lra_lab.experiments import masked_copy

# --config.FIELD=VALUE as the parser reads it: rewritten in place (lra.config_args.as_old_spelling) to this
# hidden flag, so both spellings land in one list in the order given.
_FIELD_FLAG = "--_config_field"


class _Override(argparse.Action):
    """Appends (spelling as given, field, value text) to ``overrides``: ``--config.F=V`` and the old ``--f V``."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if option_string == _FIELD_FLAG:
            field, _, text = str(values).partition("=")
            given = f"--config.{values}"
        else:
            field, text, given = self.const, str(values), f"{option_string} {values}"
        namespace.overrides = [*namespace.overrides, (given, field, text)]


def _parser() -> argparse.ArgumentParser:
    config = masked_copy.settings_config()
    fields = ", ".join(f"{name}={value}" for name, value in config.items())
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog=f"--config.FIELD fields (defaults): {fields}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = masked_copy.Settings()
    parser.add_argument(
        "--variants",
        nargs="+",
        default=list(defaults.variants),
        help="softmax, clustered:C, improved_clustered:C; or the family's options as a config's short "
        "form takes them, clustered:clusters=C (the same variant as clustered:C) (default: %(default)s)",
    )
    parser.add_argument(
        "--swap-eval",
        nargs="+",
        default=[],
        help="also evaluate the trained softmax variant with each of clustered:C, improved_clustered:C "
        "(the paper's Table 1: train with one, evaluate with another)",
    )
    parser.add_argument("--out", default="results/masked_copy", help="output folder (default: %(default)s)")
    parser.add_argument(
        "--restart", action="store_true", help="discard the finished variants of an interrupted call in --out"
    )
    parser.add_argument(_FIELD_FLAG, action=_Override, dest="overrides", default=[], help=argparse.SUPPRESS)
    old = parser.add_argument_group("old spellings", "--FIELD-NAME VALUE sets --config.FIELD_NAME=VALUE")
    for name in config:
        old.add_argument(
            "--" + name.replace("_", "-"),
            action=_Override,
            const=name,
            dest="overrides",
            default=[],
            metavar=name.upper(),
            help=f"old spelling of --config.{name}",
        )
    return parser


def settings_from_args(argv: Sequence[str]) -> tuple[masked_copy.Settings, pathlib.Path, bool]:
    """(settings, --out, --restart) of a command line; an InputError naming the flag otherwise."""
    if split_config_args(argv)[0] is not None:  # also refuses --config. and a --config.FIELD with no value
        raise InputError("--config: masked copy has no config file; set its fields with --config.FIELD=VALUE")
    args = _parser().parse_args(as_old_spelling(argv, _FIELD_FLAG))
    config = masked_copy.settings_config()
    for given, field, text in args.overrides:
        if field in masked_copy.MODEL_LISTS:
            flag = "--" + field.replace("_", "-")
            raise InputError(f"{given}: name them with {flag} SPEC [SPEC ...] (a variant's options hold commas)")
        try:
            apply_override(config, field, text)
        except InputError as e:
            raise InputError(f"{given}: {e}") from None
    settings = masked_copy.settings_from_config(config, tuple(args.variants), tuple(args.swap_eval))
    return settings, pathlib.Path(args.out), args.restart


def main(argv: list[str] | None = None) -> None:
    given = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "scripts/masked_copy.py", *given])
    try:
        settings, out, restart = settings_from_args(given)
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
