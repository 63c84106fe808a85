"""A config's fields set from command-line text, each cast to its type: :func:`apply_override` and the short form's
family options (:func:`parse_option`). lra.defaults re-exports these, so the defaults hold values only."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import ml_collections

from lra.errors import InputError

OPTION_ALIASES = {  # short option names after the colon -> attention fields
    "mem": "memory_size",
    "clusters": "num_clusters",
    "classes": "num_classes",
}


def parse_value(text: str) -> Any:
    """A command-line value as bool, int, float or str."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def apply_override(config: ml_collections.ConfigDict, dotted: str, text: str) -> None:
    """Set ``config.<dotted>`` from ``text`` cast to the field's type, or fail naming it (or the nearest fields).
    Every command's ``--config.FIELD=VALUE`` comes here, so each checks fields as lra.train does, before it runs."""
    node = existing_field(config, dotted)
    leaf = dotted.split(".")[-1]
    node[leaf] = _cast_like(node[leaf], text, dotted)


def value_text(value: Any) -> str:
    """The text ``--config.FIELD=TEXT`` reads back as ``value`` (the inverse of :func:`apply_override`'s cast)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(value_text(v) for v in value)
    return str(value)  # str(float) is its repr: the same float back


def existing_field(config: ml_collections.ConfigDict, dotted: str) -> ml_collections.ConfigDict:
    """The ConfigDict that holds field ``dotted`` (ValueError naming the nearest fields if none)."""
    import difflib

    node: Any = config
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            where = ".".join(parts[:depth]) or "config"
            names = list(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
            close = difflib.get_close_matches(part, names, n=3, cutoff=0.5)
            raise InputError(
                f"{dotted}: {where} has no field {part!r}"
                + (f"; did you mean {', '.join('.'.join([*parts[:depth], c]) for c in close)}?" if close else "")
            )
        if depth < len(parts) - 1:
            node = node[part]
    return node


def _cast_like(old: Any, text: str, name: str) -> Any:
    if isinstance(old, ml_collections.ConfigDict):
        raise InputError(f"{name} is a group of fields, not a value; set one of {', '.join(sorted(old.keys()))}")
    if isinstance(old, bool):
        if text.strip().lower() not in ("true", "false"):
            raise InputError(f"{name} must be true or false, got {text!r}")
        return text.strip().lower() == "true"
    try:
        if isinstance(old, int):
            return int(text)
        if isinstance(old, float):
            return float(text)
    except ValueError:
        raise InputError(
            f"{name} must be {'an integer' if isinstance(old, int) else 'a number'}, got {text!r}"
        ) from None
    if isinstance(old, tuple):
        return tuple(parse_value(t.strip()) for t in text.split(",") if t.strip())
    if old is None:
        return parse_value(text)
    return text


def parse_option(attention: str, token: str) -> tuple[str, Any]:
    """One ``key=value`` option of family ``attention`` (aliases allowed) as (field, value); fails naming valid ones."""
    from lra import attention as registry  # local: keeps config loading light until needed

    key, value = (part.strip() for part in token.split("=", 1))
    field = OPTION_ALIASES.get(key, key)
    valid_options = set(registry.option_names(attention))
    if field not in valid_options:
        aliases = ", ".join(f"{a}={f}" for a, f in OPTION_ALIASES.items() if f in valid_options)
        raise InputError(
            f"option {key!r} is not an option of attention {attention!r}; valid options: "
            f"{', '.join(sorted(valid_options)) or '(none)'}" + (f"; aliases: {aliases}" if aliases else "")
        )
    parsed = parse_value(value)
    problem = option_type_problem(attention, field, parsed)
    if problem:
        raise InputError(f"option {token.strip()!r} of attention {attention!r}: {problem}")
    return field, parsed


def parse_options(attention: str, text: str, spec: str) -> dict[str, Any]:
    """The options after a family's name in ``spec`` (``linear:chunk_size=256``) as {field: value}, or fail."""
    options: dict[str, Any] = {}
    for token in filter(None, (t.strip() for t in text.split(","))):
        if "=" not in token:
            raise InputError(f"{spec!r}: option {token!r} is not key=value, e.g. {attention}:<option>=<value>")
        try:
            field, value = parse_option(attention, token)
        except InputError as e:
            raise InputError(f"{spec!r}: {e}") from None
        if field in options:
            raise InputError(f"{spec!r}: option {field} is given twice")
        options[field] = value
    return options


_TYPE_NAMES: dict[Any, str] = {int: "int", float: "float", types.NoneType: "None"}


def option_type_problem(attention: str, field: str, value: Any) -> str | None:
    """Why ``value`` cannot be the numeric option ``field`` (None: it can); else ``mem=1.5`` fails deep in jax."""
    from lra import attention as registry  # local: keeps config loading light until needed

    cls = registry.get(attention)
    if field not in {f.name for f in dataclasses.fields(cls)}:
        return None
    hint = typing.get_type_hints(cls)[field]  # the field's real type, not its annotation's text
    kinds = {_TYPE_NAMES.get(t, "other") for t in (typing.get_args(hint) or (hint,))}
    if not kinds <= {"int", "float", "None"}:
        return None  # strings and flags: the family checks its own values
    if value is None and "None" in kinds:
        return None
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if "float" in kinds and numeric:
        return None
    if "int" in kinds and numeric and isinstance(value, int):
        return None
    want = "a number" if "float" in kinds else "an integer"
    return f"{field} must be {want}, got {value!r}" + (" (or None)" if "None" in kinds else "")
