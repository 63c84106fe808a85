"""Records that prove their code (issue 53): tree ids computed as git does, seals and corrections, and
the audit's labels for a record whose code is not its commit's, that ran on uncommitted code, or that
was edited after it was written; each on a small git history built here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from git_history import REGISTRY_CLASSES
from git_history import commit as _commit
from git_history import git as _git
from lra.training import provenance
from lra_lab.reproduce import audit, record_evidence

REGISTRY = (
    REGISTRY_CLASSES
    + """
def _judge(root):
    return "{judge}"

def papers():
    return {{"p": Paper((Claim("a", "rule A", _judge, ("rec/a.json",)),))}}
"""
)
CLAIMS = {"p/a": ("rec/a.json",)}


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "lra" / "reproduce").mkdir(parents=True)
    (repo / "configs").mkdir()
    (repo / "lra" / "__init__.py").write_text("")
    (repo / "lra" / "reproduce" / "__init__.py").write_text("")
    (repo / "lra" / "reproduce" / "registry.py").write_text(REGISTRY.format(judge="v1"))
    (repo / "configs" / "base.py").write_text("STEPS = 10\n")
    _git(repo, "init", "-q")
    return repo


def test_tree_ids_are_gits_own(repo):
    """Names that sort differently as a file and as a folder, an executable, a symlink, an ignored
    file and a folder holding only ignored files: the ids equal ``git rev-parse HEAD:lra``."""
    lra = repo / "lra"
    (repo / ".gitignore").write_text("__pycache__/\n*.egg-info/\n.lock\n")
    for name in ("a.py", "a-b.py", "a0.py", "b.txt"):
        (lra / name).write_text(f"# {name}\n")
    (lra / "a").mkdir()
    (lra / "a" / "x.py").write_bytes(b"x = 1\r\n\x00binary")
    (lra / "run.sh").write_text("#!/bin/sh\n")
    (lra / "run.sh").chmod(0o755)
    os.symlink("a.py", lra / "link.py")
    (lra / "__pycache__").mkdir()
    (lra / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00")
    (lra / "lra.egg-info").mkdir()
    (lra / "lra.egg-info" / "PKG-INFO").write_text("ignored")
    (lra / ".lock").write_text("")
    (lra / "only_cache" / "__pycache__").mkdir(parents=True)
    (lra / "only_cache" / "__pycache__" / "z.pyc").write_bytes(b"\x00")
    _commit(repo, "tree")
    assert provenance.code_trees(repo) == {
        "lra": _git(repo, "rev-parse", "HEAD:lra"),
        "configs": _git(repo, "rev-parse", "HEAD:configs"),
    }
    (lra / "a0.py").write_text("# changed\n")
    assert provenance.code_trees(repo)["lra"] != _git(repo, "rev-parse", "HEAD:lra")


def test_uncommitted_code_stores_the_digest_of_its_diff(repo):
    _commit(repo, "clean")
    assert "diff_sha256" not in provenance.code_evidence(repo)
    (repo / "configs" / "base.py").write_text("STEPS = 20\n")
    first = provenance.code_evidence(repo)
    assert first["configs"] != _git(repo, "rev-parse", "HEAD:configs") and first["diff_sha256"]
    (repo / "configs" / "new.py").write_text("X = 1\n")  # an untracked file is part of what ran
    assert provenance.code_evidence(repo)["diff_sha256"] != first["diff_sha256"]


def test_a_seal_finds_an_edit_and_a_correction_is_a_separate_file(tmp_path):
    record = tmp_path / "r.json"
    record.write_text(json.dumps({"git_commit_start": "abc", "accuracy": 0.5}))
    assert provenance.seal_state(record)[0] == provenance.UNSEALED
    provenance.seal(record)
    assert provenance.seal_state(record)[0] == provenance.SEALED
    path = provenance.write_correction(record, {"git_commit_start": "def"}, who="a reviewer", why="typo in the commit")
    assert provenance.seal_state(record)[0] == provenance.SEALED  # the record itself is untouched
    assert json.loads(record.read_text())["git_commit_start"] == "abc"
    assert provenance.corrected(record) == {"git_commit_start": "def", "accuracy": 0.5}
    body = json.loads(path.read_text().split("\n", 1)[1])
    assert body["changes"] == {"git_commit_start": {"from": "abc", "to": "def"}} and body["who"] == "a reviewer"
    with pytest.raises(ValueError):
        provenance.write_correction(record, {"accuracy": 1.0}, who="", why="no name")
    record.write_text(json.dumps({"git_commit_start": "abc", "accuracy": 0.9}))  # edited in place
    state, sentence = provenance.seal_state(record)
    assert state == provenance.EDITED and "r.json was changed after it was written" in sentence
    with pytest.raises(ValueError, match="corrects another version"):
        provenance.read_corrections(record)


def test_write_record_stores_code_trees_and_seals(tmp_path, monkeypatch):
    from lra.training import provenance
    from lra_lab.experiments.records import write_record

    monkeypatch.setattr(provenance, "_start", None)
    provenance.mark_start()
    out = tmp_path / "m" / "record.json"
    write_record(out, {"value": 1})
    data = json.loads(out.read_text())
    assert set(data["code_start"]) >= {"lra", "configs"} and data["code_start"]["lra"]
    assert data["code_start"]["lra"] == provenance.code_trees()["lra"] or "diff_sha256" in data["code_start"]
    assert provenance.seal_state(out)[0] == provenance.SEALED


def _record(repo: Path, seal: bool = True, **fields) -> Path:
    (repo / "rec").mkdir(exist_ok=True)
    path = repo / "rec" / "a.json"
    path.write_text(json.dumps(fields))
    if seal:
        provenance.seal(path)
    return path


def _label(repo: Path, tmp_path: Path) -> audit.Registration:
    return audit.audit(repo, CLAIMS, tmp_path / "cache")["p/a"]


def test_a_record_whose_code_is_its_commits_is_pre_registered_without_older_evidence(repo, tmp_path):
    rules = _commit(repo, "register")
    _record(repo, git_commit_start=rules, code_start=provenance.code_evidence(repo))
    _commit(repo, "record")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.PRE_REGISTERED and reg.old_evidence == ()
    assert "lra/reproduce/registry.py" in reg.fingerprint  # this history's layout


def test_a_record_from_before_code_trees_keeps_its_label_and_says_so(repo, tmp_path):
    rules = _commit(repo, "register")
    _record(repo, seal=False, git_commit_start=rules)
    _commit(repo, "record")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.PRE_REGISTERED
    assert reg.old_evidence == ("1 of 1 records: record predates code-tree hashes", "1 of 1 records: unsealed")
    assert "p/a" in audit.older_evidence_summary({"p/a": reg})


def test_a_record_that_ran_on_uncommitted_code_is_never_pre_registered(repo, tmp_path):
    rules = _commit(repo, "register")
    (repo / "configs" / "base.py").write_text("STEPS = 99\n")  # edited, not committed, when the run starts
    code = provenance.code_evidence(repo)
    _git(repo, "checkout", "--", "configs")
    _record(repo, git_commit_start=rules + "-dirty", code_start=code)
    _commit(repo, "record")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.EXPLORATORY and reg.short == "exploratory (ran on uncommitted code)"
    assert "ran on uncommitted code: its configs/ tree is not" in reg.reasons[0]


def test_dirty_outside_the_code_is_not_uncommitted_code(repo, tmp_path):
    rules = _commit(repo, "register")
    _record(repo, git_commit_start=rules + "-dirty", code_start=provenance.code_evidence(repo))  # e.g. a doc edited
    _commit(repo, "record")
    assert _label(repo, tmp_path).label == audit.PRE_REGISTERED


def test_an_old_dirty_record_is_labelled_uncommitted_code(repo, tmp_path):
    rules = _commit(repo, "register")
    _record(repo, seal=False, git_commit_start=rules + "-dirty")
    _commit(repo, "record")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.EXPLORATORY and "ran on uncommitted code (a dirty tree" in reg.reasons[0]


def test_a_declared_commit_whose_files_were_others_is_caught(repo, tmp_path):
    rules = _commit(repo, "register")
    (repo / "lra" / "extra.py").write_text("X = 2\n")  # the copy that ran had a file the commit lacks
    code = provenance.code_evidence(repo)
    (repo / "lra" / "extra.py").unlink()
    code.pop("diff_sha256", None)  # a machine without git computes no diff
    _record(repo, git_commit_start=rules + "-declared", code_start=code)
    _commit(repo, "record")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.EXPLORATORY
    assert f"the code that ran is not its commit's: its lra/ tree is not that of {rules[:7]}" in reg.reasons[0]


def test_a_record_edited_after_writing_is_named_and_a_correction_is_applied(repo, tmp_path):
    rules = _commit(repo, "register")
    path = _record(repo, git_commit_start="0" * 40 + "-declared", code_start=provenance.code_evidence(repo))
    provenance.write_correction(
        path, {"git_commit_start": rules + "-declared"}, who="t", why="the typed commit was wrong"
    )
    _commit(repo, "record and its correction")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.PRE_REGISTERED
    assert any("git_commit_start corrected by t" in n and "the typed commit was wrong" in n for n in reg.notes)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "git_commit_start": rules}))  # a hand edit instead of a correction
    _commit(repo, "edit in place")
    reg = _label(repo, tmp_path)
    assert reg.label == audit.EXPLORATORY and reg.short == "exploratory (record edited after it was written)"
    assert any("a.json was changed after it was written" in r for r in reg.reasons)


def test_corrected_commit_ignores_a_damaged_correction(tmp_path):
    record = tmp_path / "r.json"
    record.write_text(json.dumps({"git_commit_start": "abc"}))
    path = provenance.write_correction(record, {"git_commit_start": "def"}, who="t", why="w")
    path.write_text(path.read_text().replace('"def"', '"fed"'))
    commit, _, notes = record_evidence.corrected_commit(record, "abc", "git_commit_start")
    assert commit == "abc" and "not applied" in notes[0]
