"""One override grammar for every command that sets a run's options.

``--config PATH[:short,form]`` (lra.defaults.make_config), then ``--config.a.b=VALUE`` per existing field, cast to its
type; a family option given as a field (``--config.model.attention_kwargs.mem=8``) is folded into the short form, the
one place family options are read. Every refusal is one :class:`~lra.errors.InputError` line."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from lra.config_fields import OPTION_ALIASES, apply_override
from lra.defaults import load_config_file
from lra.errors import InputError

FAMILY_PREFIX = "model.attention_kwargs."
Override = tuple[str, str]  # (dotted field, value text)


def split_config_args(argv: Sequence[str]) -> tuple[str | None, list[Override], list[str]]:
    """``argv`` as (the ``--config`` value, the ``--config.FIELD=VALUE`` overrides, the other arguments)."""
    spec: str | None = None
    overrides: list[Override] = []
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, sep, value = arg.partition("=")
        if name in ("--config", "--config.") or name.startswith("--config."):
            if not sep:
                if i + 1 >= len(args):
                    raise InputError(f"{name} needs a value")
                value, i = args[i + 1], i + 1
            if name == "--config":
                spec = value
            else:
                dotted = name[len("--config.") :]
                if not dotted:
                    raise InputError(f"{arg}: name a field, e.g. --config.learning_rate=0.01")
                earlier = next((v for d, v in overrides if d == dotted), None)
                if earlier is not None and earlier != value:  # never let the last silently win
                    raise InputError(f"--config.{dotted} is given twice ({earlier!r} and {value!r}): give it once")
                overrides.append((dotted, value))
        else:
            rest.append(arg)
        i += 1
    return spec, overrides, rest


def config_from_args(spec: str, overrides: Sequence[Override] = ()) -> ml_collections.ConfigDict:
    """The config ``--config SPEC`` plus the overrides build, or an InputError naming the file, field or value."""
    spec, fields = fold_family_options(spec, overrides)
    path, _, short = spec.partition(":")
    module = load_config_file(_existing_config_file(path))
    try:
        config = module.get_config(short or None)
    except InputError as e:
        raise InputError(f"--config {spec}: {e}") from None
    for dotted, text in fields:
        try:
            apply_override(config, dotted, text)
        except InputError as e:
            hint = _short_form_hint(config, path, short, dotted, text)
            raise InputError(f"--config.{dotted}={text}: {e}{hint}") from None
    return config


def fold_family_options(spec: str, overrides: Sequence[Override]) -> tuple[str, list[Override]]:
    """(``spec`` with each ``model.attention_kwargs.KEY=VALUE`` override appended to its short form, the rest)."""
    path, _, short = spec.partition(":")
    for dotted, value in overrides:
        if dotted.startswith(FAMILY_PREFIX) and any(c in value for c in ",=:"):  # one value, never more options
            raise InputError(
                f"--config.{dotted}={value}: one option's value holds no ',', '=' or ':' (here it would smuggle "
                "more short-form options into the config); give each option as its own --config.FIELD=VALUE"
            )
    family = [f"{d[len(FAMILY_PREFIX) :]}={v}" for d, v in overrides if d.startswith(FAMILY_PREFIX)]
    short = ",".join(filter(None, [short, *family]))
    return (f"{path}:{short}" if short else path), [(d, v) for d, v in overrides if not d.startswith(FAMILY_PREFIX)]


def field_value(config: ml_collections.ConfigDict, dotted: str) -> Any:
    """The value of field ``dotted`` of ``config`` (it exists: apply_override checked it)."""
    node: Any = config
    for part in dotted.split("."):
        node = node[part]
    return node


def as_old_spelling(argv: Sequence[str], flag: str) -> list[str]:
    """``argv`` with each ``--config.FIELD=VALUE`` replaced in place by ``flag FIELD=VALUE`` (an old ``--set``)."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        name, sep, value = args[i].partition("=")
        if name.startswith("--config.") and name != "--config.":
            if not sep:
                if i + 1 >= len(args):
                    raise InputError(f"{name} needs a value")
                value, i = args[i + 1], i + 1
            out += [flag, f"{name[len('--config.') :]}={value}"]
        else:
            out.append(args[i])
        i += 1
    return out


def expand_options(options: Sequence[str]) -> list[Override]:
    """Old spellings' ``key=value`` items (``--set``, ``--options``) as overrides of the same fields."""
    out = []
    for item in options:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"{item!r}: expected key=value")
        out.append((key.strip(), value.strip()))
    return out


def _existing_config_file(path: str) -> Path:
    """``path`` if it is a file; an InputError naming the nearest config files otherwise."""
    file = Path(path)
    if file.is_file():
        return file
    root = Path(__file__).resolve().parent.parent  # the repository (an editable install)
    if not file.is_absolute() and (root / file).is_file():
        raise InputError(
            f"--config {file}: no such file in {Path.cwd()}; config paths are relative to the repository "
            f"root: run from there (cd {root}), where a run's runs/ folder goes too"
        )
    folder = file.parent if file.parent.is_dir() else Path("configs")
    names = sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []
    close = difflib.get_close_matches(file.name, names, n=3, cutoff=0.6)
    hint = (
        f"did you mean {', '.join(str(folder / n) for n in close)}?"
        if close
        else "the configs are configs/<task>_<attention>.py, e.g. configs/listops_transformer.py:smoke"
    )
    raise InputError(f"--config {file}: no such file; {hint}")


def _short_form_hint(config: ml_collections.ConfigDict, path: str, short: str, dotted: str, text: str) -> str:
    """For a family option given at the wrong place (``--config.model.mem=16``): its short form."""
    from lra import attention as registry  # local: keeps config loading light until needed

    leaf = dotted.split(".")[-1]
    if OPTION_ALIASES.get(leaf, leaf) not in registry.option_names(config.model.attention):
        return ""
    spelled = ",".join(filter(None, [short, f"{leaf}={text}"]))
    return f"; {leaf} is an option of the {config.model.attention} family: --config {path}:{spelled}"
