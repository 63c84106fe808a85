"""Compilations' results, keyed by what determines them: the config, the target, the seed count and
the compiler versions (jax, jaxlib, libtpu). A second call with the same key answers from disk."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from lra.training.run_files import write_json_atomic


def default_dir() -> Path:
    return Path(os.environ.get("LRA_PREFLIGHT_CACHE", Path.home() / ".cache" / "lra" / "preflight"))


PACKAGES = ("jax", "jaxlib", "libtpu", "jax-cuda12-plugin")


def versions() -> dict[str, str]:
    """The compiler packages installed for this interpreter."""
    out = {}
    for package in PACKAGES:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


@lru_cache(maxsize=None)
def _versions_json(python: str) -> str:
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not resolve(): a venv python is a symlink
        return json.dumps(versions(), sort_keys=True)
    out = subprocess.run([python, "-c", "import json; from lra.preflight.cache import versions; "
                                        "print(json.dumps(versions(), sort_keys=True))"],
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "{}"


def versions_of(python: str) -> dict[str, str]:
    """The compiler packages of the interpreter that compiles (``--python``, e.g. a libtpu venv): the
    parent's own install may have no libtpu, and the key must change when the compiler does."""
    return json.loads(_versions_json(python))


def key(config_json: dict[str, Any], target: str, seeds: int, measure_steps: int,
        python: str = sys.executable) -> str:
    blob = json.dumps({"config": config_json, "target": target, "seeds": seeds, "measure": measure_steps,
                       "versions": versions_of(python), "format": 1}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def load(directory: Path, k: str) -> dict[str, Any] | None:
    try:
        data = json.loads((directory / f"{k}.json").read_text())
    except (OSError, ValueError):
        return None  # absent or damaged: compile again
    return data if isinstance(data, dict) and data.get("status") in ("ok", "error") else None


def store(directory: Path, k: str, result: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(directory / f"{k}.json", result)
