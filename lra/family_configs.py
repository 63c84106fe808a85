"""Each registered family's config for each task, built from the registry (``lra.attention.FAMILIES``).

A family needs no config file of its own: ``configs/<task>.py:family=NAME[,options]`` builds it for
any task, and the thin ``configs/<task>_<family>.py`` files of the families that have them call
:func:`family_config` too (they stay because committed run records, sweeps and docs name them, and
their docstrings list each family's options). So a family's label, options and model settings are
written once, in its registration, and a family registered without files is trained, swept
(:func:`config_spec`) and benchmarked like the others.
"""

from __future__ import annotations

from pathlib import Path

import ml_collections

from lra import attention
from lra.defaults import make_config
from lra.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FAMILY_OPTION = "family"  # configs/<task>.py:family=NAME


def family_config(task: str, name: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """The config of family ``name`` on ``task`` with the option string ``arg`` (presets, family
    options, flags, ``reference``: ``lra.defaults.make_config``), from the family's registration."""
    family = attention.family(name)
    kwargs, model = family.task_settings(task)
    return make_config(task, name, arg, label=family.label, attention_kwargs=kwargs, model=model, flags=family.flags)


def generic_config(task: str, arg: str | None) -> ml_collections.ConfigDict:
    """``configs/<task>.py:family=NAME[,options]``: :func:`family_config` of the family named in ``arg``."""
    tokens = [t.strip() for t in (arg or "").split(",") if t.strip()]
    named = [t for t in tokens if t.partition("=")[0].strip() == FAMILY_OPTION]
    if len(named) != 1:
        raise InputError(
            f"configs/{task}.py needs one {FAMILY_OPTION}=NAME among its options (got {arg!r}); "
            f"registered families: {', '.join(attention.FAMILIES)}"
        )
    rest = ",".join(t for t in tokens if t not in named)
    return family_config(task, named[0].partition("=")[2].strip(), rest)


def config_spec(task: str, name: str) -> tuple[Path, str]:
    """The config file that trains family ``name`` on ``task`` and the option it needs before any
    other: the family's own ``configs/<task>_<stem>.py`` (and ``""``) where it exists, else
    ``configs/<task>.py`` and ``family=NAME``."""
    own = CONFIGS / f"{task}_{attention.family(name).stem}.py"
    return (own, "") if own.is_file() else (CONFIGS / f"{task}.py", f"{FAMILY_OPTION}={name}")
