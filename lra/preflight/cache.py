"""Compilations' results, keyed by what determines them: the config, the target, the seed count and
the compiler versions (jax, jaxlib, libtpu). A second call with the same key answers from disk."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

from lra.training.run_files import write_json_atomic


def default_dir() -> Path:
    return Path(os.environ.get("LRA_PREFLIGHT_CACHE", Path.home() / ".cache" / "lra" / "preflight"))


def versions() -> dict[str, str]:
    out = {}
    for package in ("jax", "jaxlib", "libtpu", "jax-cuda12-plugin"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def key(config_json: dict[str, Any], target: str, seeds: int, measure_steps: int) -> str:
    blob = json.dumps({"config": config_json, "target": target, "seeds": seeds, "measure": measure_steps,
                       "versions": versions(), "format": 1}, sort_keys=True, default=str)
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
