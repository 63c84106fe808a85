"""A claim's fingerprint: every file of the library and the laboratory its judge can run, and what
changed after its data.

The rule signature (lra_lab.reproduce.audit) covers a judge's own source, its rule in words and its record
list; a judge also calls helpers in other modules (statistics in ``evidence``, record readers in
``lra.reports``), and a change there can change a verdict as surely as an edit of the judge. The
fingerprint is the set of files the judge's code can reach: the module that defines the judge, the
module that registers the claim and ``registry.py`` (which runs it), and every ``lra`` or ``lra_lab``
module these import, transitively, at any depth and wherever the import statement sits (a function-level import
counts: it runs when the function does), plus each package's ``__init__.py``. It is read from the
source (the import statements), so it covers every path the judge may take, not only the one today's
records take; a test checks it contains every such module that running the judge loads. A tree from
before the laboratory moved out of ``lra/`` (issue 55) is read in its own layout.

A change to a fingerprint file after the claim's first record (its earliest start commit) is named:
which file, in which commits, on which dates. Such a claim stays pre-registered only when a
**behaviour-preservation check** (:data:`CHECKS`) shows the change did not change the outcome: the
check runs the claim's judge from the tree of its first record's commit and from the current tree, each
in a child process, on the same committed records, and compares the two outcomes byte for byte.
Otherwise the claim is exploratory, and the audit says which files changed and that no check covers it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path

PACKAGES = ("lra", "lra_lab")  # the library and the laboratory (lra/reproduce/ until the split of issue 55)
REGISTRY_MODULES = ("lra_lab.reproduce.registry", "lra.reproduce.registry")  # now, and before the split


def registry_file(root: Path) -> str:
    """The registry's file under ``root`` (relative), in the layout of that tree (before the split or after)."""
    for module in REGISTRY_MODULES:
        path = _module_file(root, module)
        if path is not None:
            return path.relative_to(root).as_posix()
    return "lra_lab/reproduce/registry.py"


def extract_packages(root: Path, commit: str, dest: Path) -> bool:
    """The packages of :data:`PACKAGES` that ``commit`` has, from ``git archive``, under ``dest``
    (False: git could not give them). A commit from before the split has only ``lra``."""
    listed = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", commit, "--", *PACKAGES],
                            capture_output=True, text=True, timeout=120)
    present = [name for name in listed.stdout.split() if name in PACKAGES]
    if listed.returncode != 0 or not present:
        return False
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit, *present],
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        return False
    dest.mkdir(parents=True, exist_ok=True)
    tar_path = dest / "tree.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(dest, filter="data")
    tar_path.unlink()
    return True


def _module_file(root: Path, module: str) -> Path | None:
    parts = module.split(".")
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _import_time_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """The nodes that run when the module is imported: all but the bodies of functions."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo += [c for c in ast.iter_child_nodes(node)
                 if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


@functools.lru_cache(maxsize=4096)
def _parsed(path: str, mtime_ns: int, size: int) -> ast.AST:
    """A file's syntax tree, parsed once per version of the file (every claim's closure reads the same files)."""
    return ast.parse(Path(path).read_text(), path)


def _imports(path: Path, module: str, import_time_only: bool = False) -> set[str]:
    """The ``lra`` and ``lra_lab`` modules a file imports (``from lra.x import y``: ``lra.x`` and, when ``y`` is a
    module, ``lra.x.y``; relative imports resolved against ``module``): anywhere in it, or
    (``import_time_only``) outside function bodies, the ones its import runs."""
    try:
        stat = path.stat()
        tree = _parsed(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, SyntaxError, ValueError):
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in (_import_time_nodes(tree) if import_time_only else ast.walk(tree)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def module_closure(root: Path, modules: Iterable[str], import_time_only: bool = True) -> dict[str, Path]:
    """module -> file of every ``lra`` module reachable from ``modules`` by imports (with the
    ``__init__.py`` of each package on the way), under the tree ``root``: the imports that run when
    a module is imported (``import_time_only``), or all, function-level ones too."""
    found: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        module = todo.pop()
        if module in found:
            continue
        path = _module_file(root, module)
        if path is None:
            continue  # a name imported from a module, not a module
        found[module] = path
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += sorted(_imports(path, module, import_time_only))
    return found


def module_name(relpath: str) -> str:
    """``lra_lab/reproduce/evidence.py`` -> ``lra_lab.reproduce.evidence`` (``__init__.py``: the package)."""
    return relpath.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def claim_files(root: Path, ran: Iterable[str], judge_file: str | None, paper_file: str | None) -> list[str]:
    """The fingerprint's files (relative to ``root``, sorted): the files whose code ran while the judge
    judged (``ran``), the judge's and the paper's modules, ``registry.py``, and every module these
    import when they are imported (module-level imports: constants a judge reads come from there)."""
    start = {*ran, *(f for f in (judge_file, paper_file) if f), registry_file(root)}
    closure = module_closure(root, [module_name(f) for f in start])
    return sorted({*start, *(p.relative_to(root).as_posix() for p in closure.values())})


# The start of every child that imports a tree's registry (the audit's and the fingerprint's): the tree
# (argv[1]) first on sys.path, and its registry in the tree's own layout; an installed lra_lab must not
# stand in for a tree from before the split, which had the laboratory in lra/reproduce.
TREE_REGISTRY = r"""
import importlib, os, sys
tree = os.path.realpath(sys.argv[1])
sys.path.insert(0, tree)
new_layout = os.path.isdir(os.path.join(tree, "lra_lab"))
registry = importlib.import_module("lra_lab.reproduce.registry" if new_layout else "lra.reproduce.registry")
if not os.path.realpath(registry.__file__).startswith(tree + os.sep):
    raise SystemExit(f"the registry imported is not the tree's: {registry.__file__}")
"""


# Run in a child with a tree first on sys.path: for each claim, its judge's module and, for the claims
# asked, the judge's outcome as JSON (the old tree's Outcome, whatever its fields, compared as text) and
# the lra files whose code ran while it judged (a trace hook sees every Python call and module body).
_SNIPPET = TREE_REGISTRY + r"""
import dataclasses, json
root, wanted, profile = sys.argv[2], set(json.loads(sys.argv[3])), sys.argv[4] == "1"
from pathlib import Path
pkgs = tuple(os.path.join(tree, p) + os.sep for p in ("lra", "lra_lab"))
out = {}
papers = registry.papers()
papers_of = {id(m.PAPER): m for m in list(sys.modules.values()) if getattr(m, "PAPER", None) is not None}
for key, paper in papers.items():
    for claim in paper.claims:
        name = f"{key}/{claim.id}"
        judge = claim.judge
        mod = papers_of.get(id(paper))
        entry = {"judge_file": getattr(getattr(judge, "__code__", None), "co_filename", None),
                 "paper_file": getattr(mod, "__file__", None)}
        if name in wanted:
            ran = set()
            seen = set()
            def hook(frame, event, arg, ran=ran, seen=seen):
                name = frame.f_code.co_filename
                if name not in seen:
                    seen.add(name)
                    f = os.path.realpath(name)
                    if f.startswith(pkgs):
                        ran.add(f)
                return None  # no line events: only each Python call is seen
            if profile:
                sys.settrace(hook)
            try:
                outcome = judge(Path(root))
                entry["outcome"] = (json.dumps(dataclasses.asdict(outcome), sort_keys=True)
                                    if dataclasses.is_dataclass(outcome) else repr(outcome))
            except Exception as e:
                entry["outcome"] = f"error: {type(e).__name__}: {e}"
            finally:
                sys.settrace(None)
            entry["ran"] = sorted(os.path.relpath(f, tree) for f in ran)
        for field in ("judge_file", "paper_file"):
            if entry[field]:
                entry[field] = os.path.relpath(os.path.realpath(entry[field]), tree)
        out[name] = entry
print(json.dumps({"claims": out}))
"""


def run_judges(tree: Path, root: Path, claims: Iterable[str] = (), profile: bool = False) -> dict:
    """In a child importing the ``lra`` under ``tree``: for every claim the file of its judge and, for
    ``claims``, the outcome of its judge on the records under ``root`` (JSON text) and (``profile``)
    the lra files whose code ran while it judged, relative to ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", _SNIPPET, str(tree), str(root), json.dumps(sorted(claims)),
                           "1" if profile else "0"], capture_output=True, text=True, timeout=900, env=env, cwd=str(root))
    if proc.returncode != 0:
        raise RuntimeError(f"the judges under {tree} did not run: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=120)


@dataclasses.dataclass(frozen=True)
class Change:
    path: str
    commits: tuple[tuple[str, str], ...]  # (commit, date), newest first

    def sentence(self) -> str:
        latest = ", ".join("uncommitted edits" if c == "uncommitted" else f"{c[:7]} ({d})" for c, d in self.commits[:2])
        more = f" and {len(self.commits) - 2} earlier" if len(self.commits) > 2 else ""
        return f"{self.path} changed in {latest}{more}"


# Within one audit (:func:`apply` clears them): git's answers per (commit, file), and the files with
# uncommitted edits. Claims share their first commits and most of their files, so each is asked once.
_LOGS: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
_DIRTY: dict[str, set[str]] = {}


def _dirty(root: Path) -> set[str]:
    """The tracked files whose working copy differs from HEAD (``git diff --name-only HEAD``)."""
    key = str(root)
    if key not in _DIRTY:
        proc = _git(root, "diff", "--name-only", "HEAD")
        _DIRTY[key] = set(proc.stdout.splitlines()) if proc.returncode == 0 else set()
    return _DIRTY[key]


def changes_since(root: Path, commit: str, files: Iterable[str]) -> list[Change]:
    """Each of ``files`` changed in a commit after ``commit`` (up to HEAD), with those commits; a file
    with uncommitted changes says so (commit ``uncommitted``)."""
    out = []
    for path in files:
        key = (str(root), commit, path)
        if key not in _LOGS:
            log = _git(root, "log", "--format=%H %cs", f"{commit}..HEAD", "--", path)
            _LOGS[key] = [(c, d) for c, _, d in (line.partition(" ") for line in log.stdout.splitlines() if line.strip())]
        commits = list(_LOGS[key])
        if path in _dirty(root):
            commits.insert(0, ("uncommitted", "now"))
        if commits:
            out.append(Change(path, tuple(commits)))
    return out


def records_digest(root: Path, records: Iterable[str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(records):
        path = root / rel
        h.update(rel.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"<absent>") + b"\0")
    return h.hexdigest()


def outcomes_at(root: Path, commit: str | None, claims: list[str], cache: Path | None = None) -> dict[str, str]:
    """claim -> its judge's outcome (JSON text) from the code at ``commit`` (None: the tree as it is
    now) on the records under ``root``; a claim the code there lacks is absent. Cached per commit (a
    committed tree never changes) and per the claims' inputs."""
    key = hashlib.sha256(json.dumps([commit, sorted(claims)]).encode()).hexdigest()[:20]
    path = cache / "outcomes" / f"{key}.json" if cache and commit else None
    if path and path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    if commit is None:
        result = run_judges(root, root, claims)
    else:
        with tempfile.TemporaryDirectory(prefix="lra_preserve_") as tmp:
            if not extract_packages(root, commit, Path(tmp) / "tree"):
                return {}
            try:
                result = run_judges(Path(tmp) / "tree", root, claims)
            except (RuntimeError, ValueError, subprocess.SubprocessError):
                return {}
    outcomes = {k: v["outcome"] for k, v in result["claims"].items() if "outcome" in v}
    if path:
        from lra.training.run_files import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, outcomes)
    return outcomes


@dataclasses.dataclass(frozen=True)
class Preservation:
    """The result of a behaviour-preservation check of one claim."""

    check: str  # its name in CHECKS
    old: str  # the commit of the old code
    preserved: bool
    sentence: str


SAME_OUTCOME = "same-outcome-on-its-records"


def same_outcome_on_its_records(root: Path, wanted: dict[str, tuple[str, tuple[str, ...]]], now: dict[str, str],
                                cache: Path | None = None) -> dict[str, Preservation]:
    """For each claim in ``wanted`` (claim -> (old commit, its records)): do the judge at the old commit
    and the judge now (``now``: the current tree's outcomes) give byte-identical outcomes on the same
    records? One child per old commit runs all its claims' judges."""
    by_commit: dict[str, list[str]] = {}
    for claim, (old, _records) in wanted.items():
        by_commit.setdefault(old, []).append(claim)
    out = {}
    for old, claims in by_commit.items():
        digest = records_digest(root, [r for c in claims for r in wanted[c][1]])
        then = outcomes_at(root, old, sorted(claims), cache / digest[:16] if cache else None)
        for claim in claims:
            n = len(wanted[claim][1])
            if claim not in then:
                out[claim] = Preservation(SAME_OUTCOME, old, False, f"the judge at {old[:7]} could not be run")
            elif claim not in now:
                out[claim] = Preservation(SAME_OUTCOME, old, False, "the judge as it is now could not be run")
            elif then[claim] == now[claim]:
                out[claim] = Preservation(SAME_OUTCOME, old, True, (
                    f"shown behaviour-preserving by check {SAME_OUTCOME}: the judge at {old[:7]} and the judge now "
                    f"give byte-identical outcomes on its {n} records"))
            else:
                out[claim] = Preservation(SAME_OUTCOME, old, False, (
                    f"NOT behaviour-preserving by check {SAME_OUTCOME}: the judge at {old[:7]} and the judge now "
                    f"give different outcomes on its {n} records"))
    return out


# The registry of behaviour-preservation checks the audit may run and name: name -> the check.
CHECKS = {SAME_OUTCOME: same_outcome_on_its_records}


def first_record_commit(root: Path, records: Iterable[str]) -> str | None:
    """The earliest commit (by commit date) any of ``records`` started from, among those this history
    has (None: none has one)."""
    from lra.training.run_files import commit_base, record_commit

    best: tuple[int, str] | None = None
    for rel in records:
        commit, _ = record_commit(root / rel)
        if not commit:
            continue
        base = commit_base(commit)
        proc = _git(root, "show", "-s", "--format=%ct %H", f"{base}^{{commit}}")
        if proc.returncode != 0 or not proc.stdout.strip():
            continue
        when, full = proc.stdout.split()
        if best is None or int(when) < best[0]:
            best = (int(when), full)
    return best[1] if best else None


def _inputs(root: Path, claims: dict[str, tuple[str, ...]]) -> list[str]:
    """Every file in the folders of the claims' records (a judge reads a run's config.json too)."""
    folders = {(root / r).parent for rs in claims.values() for r in rs}
    return sorted(str(p.relative_to(root)) for d in folders if d.is_dir() for p in d.iterdir() if p.is_file())


def current_judges(root: Path, claims: dict[str, tuple[str, ...]], cache: Path | None = None) -> dict:
    """:func:`run_judges` with the trace, on the tree as it is now, cached on the code's tree ids and
    the bytes of the files beside the claims' records (an unchanged clone reruns nothing)."""
    from lra.training.provenance import code_trees

    key = hashlib.sha256(json.dumps([code_trees(root), sorted(claims)]).encode()
                         + records_digest(root, _inputs(root, claims)).encode()).hexdigest()[:20]
    path = cache / "judges_now" / f"{key}.json" if cache else None
    if path and path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    result = run_judges(root, root, sorted(claims), profile=True)
    if path:
        from lra.training.run_files import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, result)
    return result


def apply(root: Path, registrations: dict, claims: dict[str, tuple[str, ...]], cache: Path | None = None,
          migrations: dict[str, str] | None = None) -> dict:
    """The audit's registrations with each claim's fingerprint (its files), the changes to them after its
    first record, and the label that follows: a pre-registered claim with such a change stays so only
    when a check of :data:`CHECKS` shows the change behaviour-preserving on its records. A rule moved
    from the old form to data (``migrations``: claim -> the last commit of its source form) is checked
    the same way against that commit's judge, records or not: the move must not change its outcome."""
    _LOGS.clear()
    _DIRTY.clear()
    present = {k: tuple(r for r in rs if (root / r).exists()) for k, rs in claims.items()}
    try:
        now = current_judges(root, {k: present[k] for k in claims}, cache)["claims"]
    except (RuntimeError, ValueError, subprocess.SubprocessError) as e:
        return {k: dataclasses.replace(r, notes=(*r.notes, f"fingerprint not computed: {e}"))
                for k, r in registrations.items()}
    outcomes = {k: v["outcome"] for k, v in now.items() if "outcome" in v}
    out = dict(registrations)
    pending: dict[str, tuple[str, tuple[str, ...]]] = {}
    changed: dict[str, list[Change]] = {}
    for key, reg in registrations.items():
        entry = now.get(key)
        if entry is None:
            continue
        files = claim_files(root, entry.get("ran", []), entry.get("judge_file"), entry.get("paper_file"))
        first = first_record_commit(root, present.get(key, ()))
        changes = changes_since(root, first, files) if first else []
        changed[key] = changes
        out[key] = dataclasses.replace(reg, fingerprint=tuple(files),
                                       changed=tuple(c.sentence() for c in changes))
        if changes and first and reg.label == "pre-registered":  # uncommitted changes too: checked as they are
            pending[key] = (first, present[key])
    for key, result in same_outcome_on_its_records(root, pending, outcomes, cache).items():
        reg = out[key]
        if result.preserved:
            out[key] = dataclasses.replace(reg, notes=(*reg.notes, f"changed after its first record; {result.sentence}"))
        else:
            named = "; ".join(c.sentence() for c in changed[key][:3])
            more = f" and {len(changed[key]) - 3} more files" if len(changed[key]) > 3 else ""
            out[key] = dataclasses.replace(reg, label="exploratory", reasons=(
                *reg.reasons, f"{named}{more} after its first record ({result.old[:7]}); {result.sentence}"))
    moved = {k: (old, present.get(k, ())) for k, old in (migrations or {}).items() if k in out}
    with_records = {k: v for k, v in moved.items() if v[1]}
    for key, result in same_outcome_on_its_records(root, with_records, outcomes, cache).items():
        reg = out[key]
        words = f"moved from the old form to data; {result.sentence}"
        if result.preserved:
            out[key] = dataclasses.replace(reg, notes=(*reg.notes, words))
        elif reg.label == "pre-registered":
            out[key] = dataclasses.replace(reg, label="exploratory", reasons=(*reg.reasons, words))
        else:
            out[key] = dataclasses.replace(reg, notes=(*reg.notes, words))
    for key in set(moved) - set(with_records):
        out[key] = dataclasses.replace(out[key], notes=(*out[key].notes, (
            f"moved from the old form to data after {moved[key][0][:7]}; no records yet to compare the two "
            "judges on (tests/test_rules_migration.py compares them on synthetic records)")))
    return out
