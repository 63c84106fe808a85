"""Their PyTorch model classes, loaded and built as their ``lra_run.py`` builds them for the paper.

Loads ``lra/layers.py`` and ``lra/models.py`` of a checkout of github vladyorsh/lra_efficient_transformers
with inert stand-ins for the Lightning/TensorFlow training stack they import (nothing of it runs), and
names the comparisons (:data:`CASES`: our ``configs/<task>_<luna|convluna>.py:reference`` against their
class). Used by :mod:`lra_lab.reference.published_code`; torch is needed only to build a model.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

AUTHORS_REPO = "github.com/vladyorsh/lra_efficient_transformers"
# Modules their lra/models.py and lra/utils.py import for training and logging only.
_TRAINING_STACK = (
    "lightning",
    "lightning.pytorch",
    "lightning.pytorch.utilities",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric",
    "lightning.fabric.utilities",
    "lightning.fabric.utilities.rank_zero",
    "torchmetrics",
    "tensorflow_datasets",
    "tensorflow",
    "matplotlib",
    "matplotlib.pyplot",
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One comparison: our config file (with ``:reference``) against their model class."""

    config: str  # configs/<config>.py
    family: str  # luna | convluna
    task: str  # listops | matching

    @property
    def name(self) -> str:
        return f"{self.config}:reference"


CASES = (
    Case("listops_luna", "luna", "listops"),
    Case("listops_convluna", "convluna", "listops"),
    Case("matching_luna", "luna", "matching"),
    Case("matching_convluna", "convluna", "matching"),
)


class _InertMeta(type):
    """Attributes of an inert class are inert classes too (``pl.callbacks.TQDMProgressBar``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _InertMeta(name, (), {"__init__": lambda self, *a, **k: None})


class _Inert(types.ModuleType):
    """A stand-in module: every attribute is an inert class (a base class, a decorator target)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return sys.modules.get(f"{self.__name__}.{name}") or _InertMeta(name, (), {"__init__": lambda s, *a, **k: None})


def _importable(top: str) -> bool:
    try:
        return top not in sys.modules and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def load_authors_models(repo: Path) -> types.ModuleType:
    """Their ``lra/models.py`` (with ``lra/layers.py``), imported as package ``authors_lra``."""
    package = repo / "lra"
    if not (package / "models.py").is_file() or not (package / "layers.py").is_file():
        raise FileNotFoundError(
            f"{repo} is not a checkout of {AUTHORS_REPO}: no lra/models.py and lra/layers.py "
            f"(git clone it, then pass its folder to --authors-repo)"
        )
    for name in _TRAINING_STACK:
        if name not in sys.modules and not _importable(name.split(".")[0]):
            sys.modules[name] = _Inert(name)
    spec = importlib.util.spec_from_file_location(
        "authors_lra", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if not (package / "__init__.py").exists():  # a namespace-style folder: an empty package
        spec = importlib.util.spec_from_loader("authors_lra", loader=None, is_package=True)
        assert spec is not None  # a name and is_package are all a spec needs
        module = importlib.util.module_from_spec(spec)
        module.__path__ = [str(package)]
    else:
        assert spec is not None  # a .py file path always has a spec
        module = importlib.util.module_from_spec(spec)
    sys.modules["authors_lra"] = module
    if spec.loader is not None:
        spec.loader.exec_module(module)
    return importlib.import_module("authors_lra.models")


def authors_commit(repo: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def build_authors_model(models: types.ModuleType, case: Case, config: Any, vocab_size: int, num_classes: int) -> Any:
    """Their model as ``lra_run.py`` builds it for the paper (``--biases True``, layernorm, learned
    packing temperature, ``--use_mem_repr True`` for ConvLuna, ``--use_cls True``)."""
    m, kw = config.model, attention_options(config)
    args = dict(
        classes=num_classes,
        num_embeddings=vocab_size,
        seq_len=config.data.max_len,
        hidden_dim=m.emb_dim,
        qkv_dim=m.qkv_dim,
        mlp_dim=m.mlp_dim,
        num_heads=m.num_heads,
        num_blocks=m.num_layers,
        internal_dropout_rate=m.dropout_rate,
        output_dropout_rate=0.0,
        affine=True,
        use_cls=True,
        norm_type="layernorm",
        mem_size=kw.memory_size,
    )
    if case.family == "luna":
        cls = models.LunaMatcher if case.task == "matching" else models.LunaClassifier
        return cls(**args)
    cls = models.SimplifiedConvLunaMatcher if case.task == "matching" else models.SimplifiedConvLunaClassifier
    return cls(
        **args,
        kernel=kw.kernel_size,
        stride=kw.stride,
        pool=kw.filter == "maxpool",
        temperature_pack="learn",
        temperature_unpack="learn",
        use_mem_repr=True,
    )


def attention_options(config: Any) -> types.SimpleNamespace:
    """The attention's family options: their defaults, then the config's kwargs."""
    from lra import attention as registry

    defaults = registry.option_defaults(config.model.attention)
    return types.SimpleNamespace(**{**defaults, **dict(config.model.attention_kwargs)})
