"""Each registered family's config for each task, built from the registry (``lra.attention.FAMILIES``).

``configs/<task>.py:family=NAME[,options]`` and the thin ``configs/<task>_<family>.py`` files (kept because records and
docs name them) both call :func:`family_config`: a family's settings are written once, in its registration."""

from __future__ import annotations

from pathlib import Path

import ml_collections

from lra import attention
from lra.defaults import make_config
from lra.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FAMILY_OPTION = "family"  # configs/<task>.py:family=NAME


def family_config(task: str, name: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """The config of family ``name`` on ``task`` with the option string ``arg`` (``lra.defaults.make_config``)."""
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
    """(config file, leading option) for ``name`` on ``task``: its own file and ``""``, else ``family=NAME``."""
    own = CONFIGS / f"{task}_{attention.family(name).stem}.py"
    return (own, "") if own.is_file() else (CONFIGS / f"{task}.py", f"{FAMILY_OPTION}={name}")
