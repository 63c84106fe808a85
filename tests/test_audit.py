"""Pre-registration checked by git (lra_lab.reproduce.audit) on a small history built here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from git_history import REGISTRY_CLASSES
from git_history import commit as _commit
from git_history import git as _git
from lra_lab.reproduce import audit

REGISTRY = (
    REGISTRY_CLASSES
    + """
def _judge(root):
    return "{judge}"

def papers():
    return {{"p": Paper((Claim("a", "{rule_a}", _judge, ("rec/a.json",)),
                        Claim("b", "{rule_b}", _judge, ("rec/b.json",)),
                        Claim("c", "rule C", _judge, ("rec/c.json",))))}}
"""
)


def _registry(repo: Path, rule_a: str = "rule A", rule_b: str = "rule B", judge: str = "v1") -> None:
    (repo / "lra" / "reproduce").mkdir(parents=True, exist_ok=True)
    (repo / "lra" / "__init__.py").write_text("")
    (repo / "lra" / "reproduce" / "__init__.py").write_text("")
    (repo / "lra" / "reproduce" / "registry.py").write_text(REGISTRY.format(rule_a=rule_a, rule_b=rule_b, judge=judge))


def _record(repo: Path, name: str, **fields) -> None:
    (repo / "rec").mkdir(exist_ok=True)
    (repo / "rec" / name).write_text(json.dumps(fields))


CLAIMS = {"p/a": ("rec/a.json",), "p/b": ("rec/b.json",), "p/c": ("rec/c.json",)}


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    return repo


def test_rules_before_their_data_pass_and_rules_edited_after_fail(repo, tmp_path):
    _registry(repo)
    rules = _commit(repo, "register a, b, c")
    _record(repo, "a.json", git_commit_start=rules)  # ran on the registering commit: after the rule
    _record(repo, "b.json", git_commit_start=rules + "-dirty")
    _record(repo, "c.json", git_commit=rules)  # only the end commit: the start is unknown
    _commit(repo, "records")
    _registry(repo, rule_b="rule B, edited after seeing the data")
    edited = _commit(repo, "edit b's rule")
    regs = audit.audit(repo, CLAIMS, tmp_path / "cache")
    assert regs["p/a"].label == audit.PRE_REGISTERED and regs["p/a"].rule_commit == rules
    assert regs["p/b"].label == audit.EXPLORATORY and regs["p/b"].rule_commit == edited
    assert "not after the rule's commit" in regs["p/b"].reasons[0]
    assert regs["p/c"].label == audit.EXPLORATORY and "only its end commit" in regs["p/c"].reasons[0]


def test_a_judge_edited_after_the_data_fails_too_and_new_runs_pass_again(repo, tmp_path):
    _registry(repo)
    rules = _commit(repo, "register")
    _record(repo, "a.json", git_commit_start=rules)
    _commit(repo, "records")
    _registry(repo, judge="v2")  # same words, other code
    new_rules = _commit(repo, "judge changed")
    regs = audit.audit(repo, {"p/a": CLAIMS["p/a"]}, tmp_path / "cache")
    assert regs["p/a"].label == audit.EXPLORATORY and regs["p/a"].rule_commit == new_rules
    _record(repo, "a.json", git_commit_start=new_rules)  # rerun after the new rule
    _commit(repo, "rerun")
    assert audit.audit(repo, {"p/a": CLAIMS["p/a"]}, tmp_path / "cache")["p/a"].label == audit.PRE_REGISTERED


def test_records_without_commits_foreign_commits_and_uncommitted_rules(repo, tmp_path):
    _registry(repo)
    _commit(repo, "register")
    _record(repo, "a.json", accuracy=0.5)
    _record(repo, "b.json", git_commit_start="f" * 40)
    _commit(repo, "records")
    regs = audit.audit(repo, CLAIMS, tmp_path / "cache")
    assert regs["p/a"].label == audit.EXPLORATORY and "no commit recorded" in regs["p/a"].reasons[0]
    assert "not in this repository's history" in regs["p/b"].reasons[0]
    assert regs["p/c"].label == audit.NO_RECORDS
    _registry(repo, rule_a="rule A, not committed")
    assert audit.audit(repo, CLAIMS, tmp_path / "cache")["p/a"].label == audit.NOT_COMMITTED


def test_without_git_history_nothing_is_labelled(tmp_path):
    _registry(tmp_path / "tree")
    regs = audit.audit(tmp_path / "tree", CLAIMS, tmp_path / "cache")
    assert {r.label for r in regs.values()} == {audit.NO_HISTORY}


def test_a_commit_declared_to_a_machine_without_the_history_counts_as_that_commit(repo, tmp_path):
    _registry(repo)
    rules = _commit(repo, "register")
    _record(repo, "a.json", git_commit_start=rules + "-declared")  # made on a copy without .git (LRA_GIT_COMMIT)
    _record(repo, "b.json", git_commit_start="0" * 40 + "-declared")  # a commit this history lacks
    _commit(repo, "records")
    regs = audit.audit(repo, {"p/a": CLAIMS["p/a"], "p/b": CLAIMS["p/b"]}, tmp_path / "cache")
    assert regs["p/a"].label == audit.PRE_REGISTERED
    assert regs["p/b"].label == audit.EXPLORATORY and "not in this repository's history" in regs["p/b"].reasons[0]


def test_a_shallow_clone_cannot_tell_and_the_reports_keep_their_labels(repo, tmp_path):
    """Issue 52 RP1, RP2, RP4: a shallow clone's history cannot place a rule before its records, so
    the audit says "cannot tell" (not "exploratory"), and the reports' determined labels are not
    overwritten with it."""
    from lra.errors import InputError
    from lra_lab.reproduce import report

    _registry(repo)
    _commit(repo, "rules")
    _record(repo, "a.json", git_commit_start=_git(repo, "rev-parse", "HEAD"))
    _commit(repo, "records")
    assert audit.audit(repo, CLAIMS, tmp_path / "cache")["p/a"].label == audit.PRE_REGISTERED
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    regs = audit.audit(shallow, CLAIMS, tmp_path / "cache2")
    assert {r.label for r in regs.values()} == {audit.NO_HISTORY}
    assert "shallow" in regs["p/a"].reasons[0] and regs["p/a"].short.startswith("cannot tell")
    index = shallow / report.OUT / "README.md"
    index.parent.mkdir(parents=True)
    index.write_text("| p/a | pre-registered at abc1234 |\n")
    with pytest.raises(InputError, match="shallow clone.*keep the labels"):
        report._keep_determined_labels(shallow, regs["p/a"])
    without_git = audit.Registration("p/a", audit.NO_HISTORY, None, (audit.history_gap(tmp_path / "cache") or "",))
    with pytest.raises(InputError, match="no git history"):  # RP4: an export without .git
        report._keep_determined_labels(shallow, without_git)
    index.write_text("| p/a | cannot tell (no git history) |\n")  # nothing determined to lose: written
    report._keep_determined_labels(shallow, regs["p/a"])


DATA_REGISTRY = (
    REGISTRY_CLASSES.replace("testable: bool = True\n", "testable: bool = True\n    registration: object = None\n")
    + """
class Reg:  # a rule as data (lra_lab.reproduce.rules.Registration's two fields the audit reads)
    def __init__(self, digest, first_form):
        self._digest, self.first_form = digest, first_form

    def digest(self):
        return self._digest

def _judge(root):
    return "{judge}"

def _data_judge(root):
    return "{data_judge}"

A = {a}
B = Claim("b", "rule B", _data_judge, ("rec/b.json",), registration=Reg("{digest_b}", "data"))

def papers():
    return {{"p": Paper((A, B))}}
"""
)
SOURCE_A = 'Claim("a", "rule A", _judge, ("rec/a.json",))'
DATA_A = 'Claim("a", "rule A", _data_judge, ("rec/a.json",), registration=Reg("d1", "source"))'


def _data_registry(repo: Path, a: str, judge: str = "v1", data_judge: str = "v1", digest_b: str = "b1") -> None:
    _registry(repo)
    text = DATA_REGISTRY.format(a=a, judge=judge, data_judge=data_judge, digest_b=digest_b)
    (repo / "lra" / "reproduce" / "registry.py").write_text(text)


def test_a_rule_moved_from_source_to_data_keeps_its_rule_commit_while_its_outcome_is_unchanged(repo, tmp_path):
    """Issue 53 item 5: a rule registered in the old form (its judge's source) and moved to data keeps
    the commit where the source rule began, is said to be of the old form, and the judge of the last
    source-form commit and the data judge are compared on its records; a data rule's digest is its
    signature: editing the data gives it a new rule commit."""
    claims = {"p/a": ("rec/a.json",), "p/b": ("rec/b.json",)}
    _data_registry(repo, SOURCE_A)
    rules = _commit(repo, "register a in source, b as data")
    _record(repo, "a.json", git_commit_start=rules)
    _record(repo, "b.json", git_commit_start=rules)
    _commit(repo, "records")
    _data_registry(repo, DATA_A)  # a moved to data: same outcome
    moved = _commit(repo, "a as data")
    regs = audit.audit(repo, claims, tmp_path / "cache")
    a = regs["p/a"]
    assert a.label == audit.PRE_REGISTERED and a.rule_commit == rules and a.form == "data-from-source"
    # the newest commit of lra/reproduce (this history's layout) in the source form: the rules'
    # (the records' commit touched no rule)
    assert a.migration == audit.Migration(since=moved, last_source=rules)
    assert "moved to data" in a.form_words and "old form" in a.form_words
    assert any(n.startswith("moved from the old form to data; shown behaviour-preserving") for n in a.notes)
    assert regs["p/b"].form == "data" and regs["p/b"].label == audit.PRE_REGISTERED
    assert "registered as data (the registration's digest as signature): 1: p/b" in audit.forms_summary(regs)
    # a's data judge now decides otherwise; b's data edited after its record
    _data_registry(repo, DATA_A, data_judge="v2", digest_b="b2")
    _commit(repo, "change both")
    regs = audit.audit(repo, claims, tmp_path / "cache")
    assert regs["p/a"].label == audit.EXPLORATORY and regs["p/a"].rule_commit == rules
    assert any("NOT behaviour-preserving" in r for r in regs["p/a"].reasons)
    assert regs["p/b"].label == audit.EXPLORATORY and "not after the rule's commit" in regs["p/b"].reasons[0]
