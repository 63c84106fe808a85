"""The floor plan holds: no module of lra/ imports one of a higher layer (docs/design.md, Layout).

Layers, low to high; a module may import its own layer and the layers beneath it:

-1. ``lra.errors``: the suite's error classes (``InputError`` and the run errors, one exit code each), raised by
   every layer; ``lra.console``: sizes, times and a bar or plain lines, shown by every layer; ``lra.cpu_speed``:
   the bit-identical CPU speed settings, which the training loop and the commands that start runs opt into.
   ``lra.papers``: what each paper fixes (plain data), read by every layer.
0. ``lra.attention`` and ``lra.data``, apart: neither imports the other (nor anything above).
1. ``lra.model``, ``lra.defaults``, ``lra.config_fields``, ``lra.config_args`` (the override grammar),
   ``lra.family_configs``
   (each family's configs, from the registry) and
   ``lra.reference`` (its ``__init__``: what ``:reference`` changes in a config, imported by ``lra.defaults``).
2. ``lra.training``.
3. What uses training: ``lra.bench``, ``lra.reports``, ``lra.experiments``, ``lra.reproduce``,
   ``lra.preflight``, and ``lra.reference.published_code`` / ``lra.reference.init_effect``
   (experiments: they build models and read runs).
4. The command lines: ``lra.train``, ``lra.evaluate``, ``lra.diagnose``, every ``__main__``, and
   ``lra.data.prepare`` / ``lra.data.download`` (``python -m lra.data prepare|download``, which
   read the task defaults of ``lra.defaults``).

Every ``import`` statement counts, at module level or inside a function (the lazy imports that
keep start-up light are still dependencies). A module that matches no layer fails too: a new
module is placed on the floor plan here, and in docs/design.md, when it is added.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent

# (layer name, rank, module prefixes); a module belongs to the entry with its longest matching prefix.
LAYERS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    (
        "errors, console output, CPU speed settings and paper data",
        -1,
        ("lra.errors", "lra.console", "lra.cpu_speed", "lra.papers"),
    ),
    ("attention", 0, ("lra.attention",)),
    ("data", 0, ("lra.data",)),
    (
        "model and config",
        1,
        ("lra.model", "lra.defaults", "lra.config_fields", "lra.config_args", "lra.family_configs", "lra.reference"),
    ),
    ("training", 2, ("lra.training",)),
    (
        "bench, reports, experiments, reproduce, preflight",
        3,
        (
            "lra.bench",
            "lra.reports",
            "lra.experiments",
            "lra.reproduce",
            "lra.preflight",
            "lra.reference.published_code",
            "lra.reference.init_effect",
        ),
    ),
    ("commands", 4, ("lra.train", "lra.evaluate", "lra.diagnose", "lra.data.prepare", "lra.data.download")),
)
COMMANDS = LAYERS[-1]


class Import(NamedTuple):
    source: str  # the importing module, dotted
    target: str  # the imported module (or the package whose attribute is imported), dotted
    where: str  # path:line


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> tuple[str, int, tuple[str, ...]] | None:
    """The layer of a dotted module name; ``__main__`` modules are command lines."""
    if module.rsplit(".", 1)[-1] == "__main__":
        return COMMANDS
    best, best_len = None, -1
    for entry in LAYERS:
        for prefix in entry[2]:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = entry, len(prefix)
    return best


def _exists(module: str, root: Path) -> bool:
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(root: Path) -> Iterator[Import]:
    """Every import of an lra module by a module under ``root``/lra, top level or lazy."""
    for path in sorted((root / "lra").rglob("*.py")):
        source = module_name(path, root)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "lra":
                        yield Import(source, alias.name, where)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolved against this module's package
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] != "lra":
                    continue
                for alias in node.names:  # `from lra.x import y`: y is a module when lra/x/y.py exists
                    sub = f"{module}.{alias.name}"
                    yield Import(source, sub if _exists(sub, root) else module, where)


def violations(root: Path) -> list[str]:
    """One line per import that reaches up (or sideways between attention and data), and per
    module that is on no layer."""
    found = []
    unplaced = sorted(
        {m for m in (module_name(p, root) for p in (root / "lra").rglob("*.py")) if m != "lra" and layer(m) is None}
    )
    found += [f"{m} is on no layer of tests/test_layering.py: place it there and in docs/design.md" for m in unplaced]
    for imp in imports(root):
        if imp.target == "lra":
            continue
        src, dst = layer(imp.source), layer(imp.target)
        if imp.source == "lra" or src is None or dst is None:
            if imp.source == "lra":
                found.append(f"{imp.where}: the root package lra imports {imp.target}: it holds no code")
            continue
        if dst[1] > src[1] or (dst[1] == src[1] == 0 and dst is not src):
            found.append(
                f"{imp.where}: {imp.source} (layer {src[1]}, {src[0]}) imports {imp.target} "
                f"(layer {dst[1]}, {dst[0]})"
            )
    return found


def test_no_lower_layer_imports_a_higher_one():
    problems = violations(REPO)
    assert not problems, "the floor plan is broken:\n" + "\n".join(problems)


def test_every_layer_is_there():
    """The prefixes name real modules (a rename that leaves a layer empty is caught)."""
    for name, _, prefixes in LAYERS:
        for prefix in prefixes:
            assert _exists(prefix, REPO), f"layer {name!r} names {prefix}, which does not exist"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_fails_on_an_upward_import(tmp_path):
    """A tiny tree with each kind of wrong import: the check names every one of them."""
    _write(
        tmp_path,
        {
            "lra/__init__.py": "",
            "lra/attention/__init__.py": "",
            "lra/attention/base.py": "def f():\n    from lra.training import loop  # lazy still counts\n",
            "lra/data/__init__.py": "from lra.attention import base\n",
            "lra/model.py": "import lra.attention.base\nfrom lra.data import types\n",
            "lra/data/types.py": "",
            "lra/training/__init__.py": "",
            "lra/training/loop.py": "from ..reports import tables\nfrom lra.model import x\n",
            "lra/reports/__init__.py": "",
            "lra/reports/tables.py": "from lra.train import main\n",
            "lra/train.py": "from lra.reports import tables\n",
            "lra/newcomer.py": "",
        },
    )
    problems = violations(tmp_path)
    assert any(
        p.startswith("lra/attention/base.py:2: lra.attention.base (layer 0") and "lra.training.loop" in p
        for p in problems
    ), problems
    assert any(p.startswith("lra/data/__init__.py:1:") and "imports lra.attention.base" in p for p in problems)
    assert any(p.startswith("lra/training/loop.py:1:") and "imports lra.reports.tables" in p for p in problems)
    assert any(p.startswith("lra/reports/tables.py:1:") and "imports lra.train (layer 4" in p for p in problems)
    assert any(p.startswith("lra.newcomer is on no layer") for p in problems)
    assert len(problems) == 5, problems  # model -> attention, data; training -> model; train -> reports: fine
