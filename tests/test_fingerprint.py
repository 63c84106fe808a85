"""A claim's fingerprint covers the helpers its judge runs (lra_lab.reproduce.fingerprint): a helper changed
after the claim's data is named, and the claim stays pre-registered only when the same-outcome check
shows the change behaviour-preserving; on a small git history built here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from git_history import REGISTRY_CLASSES
from git_history import commit as _commit
from git_history import git as _git
from lra_lab.reproduce import audit, fingerprint

REGISTRY = (
    "\nfrom lra import helper\n"
    + REGISTRY_CLASSES
    + """
def _judge(root):
    from lra.reader import read
    return helper.verdict(read(root / "rec/a.json"))

def papers():
    return {"p": Paper((Claim("a", "rule A", _judge, ("rec/a.json",)),))}
"""
)
HELPER = """
from lra.constants import THRESHOLD

def verdict(value):
    return {body}
"""
CLAIMS = {"p/a": ("rec/a.json",)}


def _helper(repo: Path, body: str) -> None:
    (repo / "lra" / "helper.py").write_text(HELPER.format(body=body))


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "lra").mkdir(parents=True)
    (repo / "lra_lab" / "reproduce").mkdir(parents=True)  # the layout since issue 55 (test_audit: the one before)
    for init in ("lra/__init__.py", "lra_lab/__init__.py", "lra_lab/reproduce/__init__.py"):
        (repo / init).write_text("")
    (repo / "lra_lab" / "reproduce" / "registry.py").write_text(REGISTRY)
    reader = "import json\n\ndef read(path):\n    return json.loads(path.read_text())['x']\n"
    (repo / "lra" / "reader.py").write_text(reader)
    (repo / "lra" / "constants.py").write_text("THRESHOLD = 0.5\n")
    (repo / "lra" / "unused.py").write_text("Y = 1\n")
    _helper(repo, "'reproduced' if value > THRESHOLD else 'not reproduced'")
    _git(repo, "init", "-q")
    return repo


def _record(repo: Path, commit: str, x: float = 0.7) -> None:
    (repo / "rec").mkdir(exist_ok=True)
    (repo / "rec" / "a.json").write_text(json.dumps({"x": x, "git_commit_start": commit}))


def test_the_fingerprint_holds_what_the_judge_runs_and_imports_not_the_rest(repo, tmp_path):
    rules = _commit(repo, "register")
    _record(repo, rules)
    _commit(repo, "record")
    reg = audit.audit(repo, CLAIMS, tmp_path / "cache")["p/a"]
    assert reg.label == audit.PRE_REGISTERED and reg.changed == ()
    # the helper and the reader ran; the constant is read from a module the helper imports
    expected = {"lra/helper.py", "lra/reader.py", "lra/constants.py", "lra_lab/reproduce/registry.py"}
    assert expected <= set(reg.fingerprint)
    assert "lra/unused.py" not in reg.fingerprint


def test_every_module_running_the_judge_loads_is_in_its_fingerprint(repo):
    """The traced fingerprint contains each lra module the judge's process has loaded once it has judged."""
    _record(repo, "0" * 40)
    snippet = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
        "from lra_lab.reproduce import registry; "
        "registry.papers()['p'].claims[0].judge(Path(sys.argv[1])); "
        "print(sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('lra')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", snippet, str(repo)],
        capture_output=True,
        text=True,
        check=True,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    files = {str(Path(f).relative_to(repo)) for f in eval(loaded.stdout)}  # noqa: S307 (a list of paths we printed)
    entry = fingerprint.run_judges(repo, repo, ["p/a"], profile=True)["claims"]["p/a"]
    assert files <= set(fingerprint.claim_files(repo, entry["ran"], entry["judge_file"], entry["paper_file"]))


def test_a_helper_changed_after_the_data_is_named_and_judged_by_the_same_outcome_check(repo, tmp_path):
    rules = _commit(repo, "register")
    _record(repo, rules)
    first = _commit(repo, "record")
    _helper(repo, "('reproduced' if value > THRESHOLD else 'not reproduced') + ''")  # a refactor: same outcome
    refactor = _commit(repo, "refactor the helper")
    reg = audit.audit(repo, CLAIMS, tmp_path / "cache")["p/a"]
    assert reg.label == audit.PRE_REGISTERED
    assert reg.changed == (f"lra/helper.py changed in {refactor[:7]} ({_git(repo, 'show', '-s', '--format=%cs')})",)
    assert any(
        "shown behaviour-preserving by check same-outcome-on-its-records" in n and rules[:7] in n for n in reg.notes
    )
    assert first  # the record's commit is not the rule's: the first record's commit is the old code
    (repo / "lra" / "constants.py").write_text("THRESHOLD = 0.9\n")  # changes the verdict on this record
    changed = _commit(repo, "raise the threshold")
    reg = audit.audit(repo, CLAIMS, tmp_path / "cache")["p/a"]
    assert reg.label == audit.EXPLORATORY
    assert f"lra/constants.py changed in {changed[:7]}" in reg.reasons[-1]
    assert "NOT behaviour-preserving by check same-outcome-on-its-records" in reg.reasons[-1]


def test_module_closure_follows_import_time_imports_only(repo):
    closure = fingerprint.module_closure(repo, ["lra.helper"])
    assert set(closure) == {"lra", "lra.helper", "lra.constants"}
    everything = fingerprint.module_closure(repo, ["lra_lab.reproduce.registry"], import_time_only=False)
    assert {"lra.reader", "lra.helper"} <= set(everything)  # the judge's function-level import counts there
