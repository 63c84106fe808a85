"""The floor plan holds: the library (``lra/``) and the laboratory beside it (``lra_lab/``), each in
layers, no import reaching up and no circle (docs/design.md, Layout; issue 55).

Layers, low to high; a module may import its own layer and the layers beneath it.

The library, ``lra/``, what a user imports and extends:

-1. ``lra.errors``: the suite's error classes (``InputError`` and the run errors, one exit code each), raised by
   every layer; ``lra.console``: sizes, times and a bar or plain lines, shown by every layer; ``lra.cpu_speed``:
   the bit-identical CPU speed settings, which the training loop and the commands that start runs opt into.
   ``lra.papers``: what each paper fixes (plain data), read by every layer.
0. ``lra.attention`` and ``lra.data``, apart: neither imports the other (nor anything above).
1. ``lra.model``, ``lra.defaults``, ``lra.config_fields``, ``lra.config_args`` (the override grammar),
   ``lra.family_configs`` (each family's configs, from the registry) and ``lra.reference_config``
   (what ``:reference`` changes in a config, applied by ``lra.defaults``).
2. ``lra.training`` and ``lra.memory_stats`` (the memory families' statistics, which the loop logs).
3. ``lra.reports``: tables, statistics, the trivial baseline, figures.
4. The library's command lines: ``lra.train``, ``lra.evaluate`` and ``lra.data.prepare``
   (``python -m lra.data prepare|download``, which reads the task defaults of ``lra.defaults``).

The laboratory, ``lra_lab/``, which uses the library and is never imported by it:

5. ``lra_lab.reports`` (curves, comparisons, diagnostics), ``lra_lab.diagnose``, ``lra_lab.experiments``
   (grids, small studies, records) and ``lra_lab.reference`` (the published code beside ours).
6. ``lra_lab.bench`` and ``lra_lab.preflight``.
7. ``lra_lab.reproduce``: the claims, judged from the records the layers below write.
8. Entry points: every ``__main__`` module and every ``if __name__ == "__main__":`` block (the
   program Python runs there is not the module others import, so such a block may import anything).

Every ``import`` statement counts, at module level or inside a function (the lazy imports that
keep start-up light are still dependencies). A module that matches no layer fails too: a new
module is placed on the floor plan here, and in docs/design.md, when it is added. No two modules
may import each other, directly or through others (a circle). Each package's side is its folder:
every module under ``lra/`` is on a library layer, every one under ``lra_lab/`` on a laboratory one.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
LIBRARY, LABORATORY = "lra", "lra_lab"  # the two packages, each a folder at the repository's root
PACKAGES = (LIBRARY, LABORATORY)

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
        (
            "lra.model",
            "lra.defaults",
            "lra.config_fields",
            "lra.config_args",
            "lra.family_configs",
            "lra.reference_config",
        ),
    ),
    ("training", 2, ("lra.training", "lra.memory_stats")),
    ("reports", 3, ("lra.reports",)),
    ("the library's command lines", 4, ("lra.train", "lra.evaluate", "lra.data.prepare")),
    (
        "laboratory: reports, experiments and the published-code check",
        5,
        ("lra_lab.reports", "lra_lab.diagnose", "lra_lab.experiments", "lra_lab.reference"),
    ),
    ("laboratory: bench and preflight", 6, ("lra_lab.bench", "lra_lab.preflight")),
    ("laboratory: reproduce", 7, ("lra_lab.reproduce",)),
    ("entry points", 8, ()),
)
LIBRARY_TOP = 4  # ranks up to here are the library; above, the laboratory
ENTRY_POINTS = LAYERS[-1]
MAIN = "__main__"


class Import(NamedTuple):
    source: str  # the importing module, dotted (``<module>.__main__`` inside its ``if __name__ == "__main__":``)
    target: str  # the imported module (or the package whose attribute is imported), dotted
    where: str  # path:line


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> tuple[str, int, tuple[str, ...]] | None:
    """The layer of a dotted module name; ``__main__`` modules (and blocks) are entry points."""
    if module.rsplit(".", 1)[-1] == MAIN:
        return ENTRY_POINTS
    best, best_len = None, -1
    for entry in LAYERS:
        for prefix in entry[2]:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = entry, len(prefix)
    return best


def side(rank: int) -> str:
    return "library" if rank <= LIBRARY_TOP else "laboratory"


def _exists(module: str, root: Path) -> bool:
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == MAIN
    )


def _modules(root: Path) -> Iterator[Path]:
    """Every module file of the two packages under ``root``."""
    for package in PACKAGES:
        yield from sorted((root / package).rglob("*.py"))


def imports(root: Path) -> Iterator[Import]:
    """Every import of an lra or lra_lab module by a module of either under ``root``, top level or lazy."""
    for path in _modules(root):
        source = module_name(path, root)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        main_block = {id(n) for block in tree.body if _is_main_guard(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            importer = f"{source}.{MAIN}" if id(node) in main_block and not source.endswith(MAIN) else source
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PACKAGES:
                        yield Import(importer, alias.name, where)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolved against this module's package
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] not in PACKAGES:
                    continue
                for alias in node.names:  # `from lra.x import y`: y is a module when lra/x/y.py exists
                    sub = f"{module}.{alias.name}"
                    yield Import(importer, sub if _exists(sub, root) else module, where)


@functools.lru_cache(maxsize=8)
def all_imports(root: Path) -> tuple[Import, ...]:
    """:func:`imports`, read once per tree (three tests read the package's)."""
    return tuple(imports(root))


def violations(root: Path) -> list[str]:
    """One line per import that reaches up (or sideways between attention and data), and per
    module that is on no layer."""
    found = []
    unplaced = sorted(
        {m for m in (module_name(p, root) for p in _modules(root)) if m not in PACKAGES and layer(m) is None}
    )
    found += [f"{m} is on no layer of tests/test_layering.py: place it there and in docs/design.md" for m in unplaced]
    for imp in all_imports(root):
        if imp.target in PACKAGES:
            continue
        src, dst = layer(imp.source), layer(imp.target)
        if imp.source in PACKAGES or src is None or dst is None:
            if imp.source in PACKAGES:
                found.append(f"{imp.where}: the root package {imp.source} imports {imp.target}: it holds no code")
            continue
        if dst[1] > src[1] or (dst[1] == src[1] == 0 and dst is not src):
            found.append(
                f"{imp.where}: {imp.source} (layer {src[1]}, {src[0]}; {side(src[1])}) imports {imp.target} "
                f"(layer {dst[1]}, {dst[0]}; {side(dst[1])})"
            )
    return found


def graph(root: Path) -> dict[str, dict[str, str]]:
    """module -> {imported module: where}, entry points left out (nothing imports them)."""
    edges: dict[str, dict[str, str]] = {}
    for imp in all_imports(root):
        if imp.source.endswith(MAIN) or imp.target in (*PACKAGES, imp.source):
            continue
        edges.setdefault(imp.source, {}).setdefault(imp.target, imp.where)
    return edges


def circles(root: Path, known: dict[tuple[str, str], str] | None = None) -> list[str]:
    """One line per circle of imports (a strongly connected set of modules, Tarjan's algorithm),
    with the imports that close it; the ``known`` imports are left out."""
    known = known or {}
    edges = {a: {b: w for b, w in out.items() if (a, b) not in known} for a, out in graph(root).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursive: the import graph is shallow (tens of modules deep at most)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    lines = []
    for component in sorted(found):
        members = set(component)
        closing = [f"{a} -> {b} ({w})" for a in component for b, w in sorted(edges.get(a, {}).items()) if b in members]
        lines.append(f"a circle of {len(component)} modules: " + "; ".join(closing))
    return lines


def test_no_lower_layer_imports_a_higher_one():
    problems = violations(REPO)
    assert not problems, "the floor plan is broken:\n" + "\n".join(problems)


def test_no_circle_of_imports():
    """No module imports itself through others."""
    problems = circles(REPO)
    assert not problems, "import circles:\n" + "\n".join(problems)


def test_each_side_is_its_folder():
    """The library is ``lra/`` and the laboratory ``lra_lab/``: seen from the root, not only from this list."""
    wrong = []
    for path in _modules(REPO):
        module = module_name(path, REPO)
        entry = layer(module)
        if module in PACKAGES or entry is None or entry is ENTRY_POINTS:
            continue
        expected = LIBRARY if entry[1] <= LIBRARY_TOP else LABORATORY
        if module.split(".")[0] != expected:
            wrong.append(f"{module} is on layer {entry[1]} ({side(entry[1])}) but lives in {module.split('.')[0]}/")
    assert not wrong, "\n".join(wrong)


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


def test_the_check_fails_when_the_library_imports_the_laboratory(tmp_path):
    """Library -> laboratory fails (lazily too), laboratory -> library does not; an entry point's block
    imports anything."""
    _write(
        tmp_path,
        {
            "lra/__init__.py": "",
            "lra/defaults.py": "def f():\n    from lra_lab.reference import published_code\n",
            "lra/reports/__init__.py": "",
            "lra/reports/check.py": "from lra_lab.reproduce import registry\n",
            "lra/reports/old.py": "import sys\nif __name__ == '__main__':\n    from lra_lab.reproduce import x\n",
            "lra_lab/reference/__init__.py": "",
            "lra_lab/reference/published_code.py": "from lra import defaults\n",
            "lra_lab/bench/__init__.py": "",
            "lra_lab/bench/seed_saves.py": "from lra_lab.reproduce.registry import x\n",
            "lra_lab/reproduce/__init__.py": "",
            "lra_lab/reproduce/registry.py": "from lra_lab.bench import seed_saves\nfrom lra.reports import check\n",
        },
    )
    problems = violations(tmp_path)
    assert any(
        p.startswith("lra/defaults.py:2: lra.defaults (layer 1, model and config; library) imports")
        and "lra_lab.reference.published_code" in p
        and "laboratory)" in p
        for p in problems
    ), problems
    assert any(p.startswith("lra/reports/check.py:1:") and "lra_lab.reproduce.registry" in p for p in problems)
    assert any(p.startswith("lra_lab/bench/seed_saves.py:1:") and "lra_lab.reproduce.registry" in p for p in problems)
    assert len(problems) == 3, problems  # old.py's __main__ block, published_code -> defaults: fine


def test_the_check_fails_on_a_circle(tmp_path):
    """Two modules importing each other (one lazily), and three in a ring: each circle is named with
    the imports that close it; a known import is left out, and an entry point's block closes none."""
    _write(
        tmp_path,
        {
            "lra/__init__.py": "",
            "lra/data/__init__.py": "",
            "lra/data/gen.py": "import sys\nif __name__ == '__main__':\n    from lra.data.write import main\n",
            "lra/data/write.py": "from lra.data.gen import generate\n",
            "lra/data/a.py": "def f():\n    from lra.data import b\n",
            "lra/data/b.py": "from lra.data.a import f\n",
            "lra_lab/bench/__init__.py": "",
            "lra_lab/bench/x.py": "from lra_lab.bench import y\n",
            "lra_lab/bench/y.py": "from lra_lab.bench import z\n",
            "lra_lab/bench/z.py": "from lra_lab.bench import x\n",
        },
    )
    found = circles(tmp_path, known={})
    assert len(found) == 2, found
    ring = "a circle of 3 modules: lra_lab.bench.x -> lra_lab.bench.y (lra_lab/bench/x.py:1)"
    assert found[1].startswith(ring), found
    assert "lra.data.a -> lra.data.b (lra/data/a.py:2)" in found[0] and "lra.data.b -> lra.data.a" in found[0]
    assert circles(tmp_path, known={("lra_lab.bench.z", "lra_lab.bench.x"): "why"}) == found[:1]
