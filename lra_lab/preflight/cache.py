"""Compilations' results, keyed by what determines them: the config, the target, the seed count and
the compiler versions (jax, jaxlib, libtpu). A second call with the same key answers from disk."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from functools import cache
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


@cache
def _versions_json(python: str) -> str:
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not resolve(): a venv python is a symlink
        return json.dumps(versions(), sort_keys=True)
    out = subprocess.run(
        [
            python,
            "-c",
            "import json; from lra_lab.preflight.cache import versions; "
            "print(json.dumps(versions(), sort_keys=True))",
        ],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "{}"


def versions_of(python: str) -> dict[str, str]:
    """The compiler packages of the interpreter that compiles (``--python``, e.g. a libtpu venv): the
    parent's own install may have no libtpu, and the key must change when the compiler does."""
    return json.loads(_versions_json(python))


# The sources whose code the compiled step is made of: a change to any of them (a model edit that
# changes the parameter count, a new attention) must not be answered from an older entry (PF3).
STEP_SOURCES = (
    "lra/model.py",
    "lra/defaults.py",
    "lra/attention",
    "lra/reference_config.py",
    "lra/training/step.py",
    "lra/training/hosts.py",
    "lra_lab/preflight/compile_step.py",
    "lra_lab/bench/hlo_launches.py",
    "lra/data/__init__.py",
)
REPO = Path(__file__).resolve().parents[2]


@cache
def code_digest(root: Path = REPO) -> str:
    """SHA-256 over the step's sources (every .py under STEP_SOURCES, sorted by path)."""
    h = hashlib.sha256()
    for entry in STEP_SOURCES:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def key(config_json: dict[str, Any], target: str, seeds: int, measure_steps: int, python: str = sys.executable) -> str:
    blob = json.dumps(
        {
            "config": config_json,
            "target": target,
            "seeds": seeds,
            "measure": measure_steps,
            "versions": versions_of(python),
            "code": code_digest(),
            "format": 2,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


# What a result of each status must hold to be used (a cut or hand-edited entry is recompiled, PF2).
REQUIRED = {"ok": ("num_params", "devices", "global_batch", "dtype", "memory", "cost"), "error": ("stage", "error")}
SEAL = "sha256"


def _digest(result: dict[str, Any]) -> str:
    body = {k: v for k, v in result.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def load(directory: Path, k: str) -> dict[str, Any] | None:
    """The cached result, or None (absent, damaged, incomplete or not matching its seal: compile
    again, with a warning for an entry that was there but could not be trusted)."""
    path = directory / f"{k}.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    problem = None
    if not isinstance(data, dict) or data.get("status") not in REQUIRED:
        problem = "not a compile result"
    elif any(field not in data for field in REQUIRED[data["status"]]):
        problem = "fields missing"
    elif data.get(SEAL) != _digest(data):
        problem = "its SHA-256 seal does not match (edited or damaged)"
    if problem:
        print(f"warning: preflight cache entry {path}: {problem}; compiling again", file=sys.stderr, flush=True)
        return None
    return {k2: v for k2, v in data.items() if k2 != SEAL}


def store(directory: Path, k: str, result: dict[str, Any]) -> None:
    """Write ``result`` sealed with the SHA-256 of its content (checked by :func:`load`)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(directory / f"{k}.json", {**result, SEAL: _digest(result)})
