"""Pre-registration checked by git: was each claim's rule committed before the records it judges?

A claim's **rule signature** is a digest of what decides its verdict: the rule in words, the
judge's source (and, for a judge built by a factory such as ``_beats(winner, loser)``, the values
it closes over) and the records it reads. Its **rule commit** is where the current signature
began: walking back over the commits that touched ``lra_lab/reproduce`` (first parent, newest first),
each commit's registry is imported from ``git archive`` in a child process and the claim's
signature compared; the oldest commit of the unbroken run of equal signatures is the rule commit.
So a rule edited after its data (words or code) gets a new, later rule commit, and git decides.
A signature that differs from ``HEAD``'s (an uncommitted edit) has no rule commit.

Each record's **run commit** is where the data came from: ``git_commit_start`` of a run's
``result.json`` (the commit when the run began, recorded since issue 37), else the ``git_commit``
field of any other record. A claim is **pre-registered** when its rule commit is an ancestor of
(or equal to) every record's run commit. It is **exploratory** when any record's commit does not
descend from the rule commit (the data existed first), when a run recorded only its end commit
(the start is unknown: a run may have begun before the rule), or when a record carries no commit
at all. A ``-declared`` commit (a copy of the tree without ``.git``, e.g. on a cloud GPU machine, was told which
commit its files are: ``LRA_GIT_COMMIT``) counts as that commit. Without git history (an export, a
tarball) or with a shallow one (``git clone --depth 1``) the audit says "cannot tell" and labels nothing.

What each record proves about its code (lra_lab.reproduce.record_evidence, issue 53): a record written
since code trees were recorded is checked against its commit's trees (``git rev-parse <commit>:lra``):
a record that **ran on uncommitted code** (the trees differ on a ``-dirty`` commit), whose code is
not its declared commit's, or that was **edited after it was written** (its seal) makes its claim
exploratory. A ``-dirty`` record from before code trees ran on code nothing can recover: exploratory
too. Older records (no trees, no seal) keep their labels; the audit says which labels rest on them.

What a claim's judge runs (lra_lab.reproduce.fingerprint): the files its judge's code ran (traced) and
imports; a change to one after the claim's first record is named, and a pre-registered claim stays so
only when the same-outcome check shows the change behaviour-preserving on its records.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lra.training.run_files import commit_base, record_commit
from lra_lab.reproduce import record_evidence
from lra_lab.reproduce.fingerprint import TREE_REGISTRY

PRE_REGISTERED = "pre-registered"
EXPLORATORY = "exploratory"
NO_RECORDS = "no records yet"
NO_HISTORY = "no git history"
NOT_COMMITTED = "rule not committed"

# Run in a child with an old tree first on sys.path: only APIs every registry version has.
_SIGNATURE_SNIPPET = TREE_REGISTRY + r"""
import hashlib, inspect, json

def _code(fn):
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return getattr(getattr(fn, "__code__", None), "co_code", b"").hex()

def signature(claim):
    registration = getattr(claim, "registration", None)
    if registration is not None:  # the new form: the rule as data, its digest the signature
        payload = json.dumps({"rule": claim.rule, "registration": registration.digest(),
                              "records": list(claim.records), "testable": claim.testable}, sort_keys=True)
        form = "data-from-source" if registration.first_form == "source" else "data"
        return form + ":" + hashlib.sha256(payload.encode()).hexdigest()
    judge = claim.judge
    cells = []
    for cell in getattr(judge, "__closure__", None) or ():
        value = cell.cell_contents
        cells.append(_code(value) if callable(value) else repr(value))
    payload = json.dumps({"rule": claim.rule, "judge": _code(judge), "closure": cells,
                          "records": list(claim.records), "testable": claim.testable}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()

out = {f"{key}/{claim.id}": signature(claim) for key, paper in registry.papers().items() for claim in paper.claims}
print(json.dumps(out))
"""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)


def has_history(root: Path) -> bool:
    try:
        return _git(root, "rev-parse", "--verify", "HEAD").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def history_gap(root: Path) -> str | None:
    """Why git here cannot answer which commit came first (None: it can): no repository (an export,
    a tarball), or a shallow clone (``git clone --depth 1``), whose history stops short, so a rule
    commit or a run commit "not in this history" would say nothing (issue 52 RP1)."""
    if not has_history(root):
        return "no git history here (an export or a tarball): run in a clone of the repository"
    try:
        shallow = _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    except (OSError, subprocess.SubprocessError):
        shallow = False
    if shallow:
        return "a shallow clone: its history stops short; `git fetch --unshallow`, then rerun"
    return None


def signatures_of_tree(tree: Path) -> dict[str, str]:
    """Every claim's signature in the lra package under ``tree`` (a child process imports it)."""
    proc = subprocess.run(
        [sys.executable, "-c", _SIGNATURE_SNIPPET, str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the registry under {tree} did not import: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def signatures_at(root: Path, commit: str, cache: Path | None = None) -> dict[str, str] | None:
    """The signatures at ``commit`` (None: its registry does not import); cached per commit."""
    path = cache / f"{commit}.json" if cache else None
    if path and path.exists():
        try:
            return json.loads(path.read_text()) or None
        except ValueError:
            pass
    from lra_lab.reproduce.fingerprint import extract_packages

    with tempfile.TemporaryDirectory(prefix="lra_audit_") as tmp:
        if not extract_packages(root, commit, Path(tmp) / "tree"):
            result = None
        else:
            try:
                result = signatures_of_tree(Path(tmp) / "tree")
            except (RuntimeError, ValueError, subprocess.SubprocessError):
                result = None
    if path:
        from lra.training.run_files import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, result or {})
    return result


DATA_PREFIX = "data:"  # a signature of a rule registered as data (lra_lab.reproduce.rules)
MIGRATED_PREFIX = "data-from-source:"  # ... registered first in the old form (its judge's source), then migrated


def form_of(signature: str) -> str:
    """The rule's form from its signature: ``source`` (the old form: the judge's source is the
    signature), ``data`` (the new form: the registration's digest) or ``data-from-source``."""
    return signature.partition(":")[0] if signature.startswith(("data:", "data-from-source:")) else "source"


@dataclasses.dataclass(frozen=True)
class Migration:
    """Where a rule moved from the old form (source) to the new (data): ``since``, the oldest commit
    with its data signature; ``last_source``, the newest with its source signature (the judge the
    audit compares with the judge now on the claim's records)."""

    since: str
    last_source: str


def rule_commits(
    root: Path, current: dict[str, str], cache: Path | None = None, migrations: dict[str, Migration] | None = None
) -> dict[str, str | None]:
    """claim key -> the commit where its current signature began (None: not committed as it is now).

    A rule migrated from the old form to data (its signature ``data-from-source:``) began where its
    source-form signature began: when the run of its data signature ends at a commit whose signature
    is of the source form, the walk goes on with that signature, and ``migrations`` gets the commits
    on either side of the move. Once: a rule edited in the source form before the move begins there."""
    log = _git(root, "log", "--first-parent", "--format=%H", "HEAD", "--", "lra_lab/reproduce", "lra/reproduce")
    commits = log.stdout.split()
    found: dict[str, str | None] = {key: None for key in current}
    target = dict(current)
    open_keys = set(current)
    for commit in commits:  # newest first
        sigs = signatures_at(root, commit, cache) or {}
        for key in list(open_keys):
            sig, since = sigs.get(key), found[key]
            if sig == target[key]:
                found[key] = commit
            elif (target[key].startswith(MIGRATED_PREFIX) and sig is not None and form_of(sig) == "source"
                  and since is not None):
                if migrations is not None:
                    migrations[key] = Migration(since=since, last_source=commit)
                target[key] = sig  # the source-form rule it was migrated from: where that one began
                found[key] = commit
            else:
                open_keys.discard(key)  # the run of equal signatures ends here (or never began)
        if not open_keys:
            break
    return found


_ANCESTRY: dict[tuple[str, str, str], bool] = {}  # answers about existing commits: they never change


def is_ancestor(root: Path, older: str, newer: str) -> bool | None:
    """Whether ``older`` is an ancestor of (or equal to) ``newer``; None when either is unknown here."""
    key = (str(root), older, newer)
    if key not in _ANCESTRY:
        for c in (older, newer):
            if _git(root, "cat-file", "-e", f"{c}^{{commit}}").returncode != 0:
                return None  # not kept: the commit may be brought here later
        _ANCESTRY[key] = _git(root, "merge-base", "--is-ancestor", older, newer).returncode == 0
    return _ANCESTRY[key]


# What makes a claim exploratory, by the words of its reasons (the first that matches names the label).
_EXPLORATORY_KINDS = (
    (
        (
            "not after the rule",
            "only its end commit",
            "no commit recorded",
            "not in this repository's history",
            "unreadable",
            "not a JSON object",
        ),
        "rule written after the data",
    ),
    (("ran on uncommitted code",), "ran on uncommitted code"),
    (("the code that ran is not its commit's",), "code not its commit's"),
    (("changed after it was written", "seal"), "record edited after it was written"),
    (("NOT behaviour-preserving", "could not be run"), "judge's code changed after the data"),
)


def why_exploratory(reasons: tuple[str, ...]) -> str:
    for words, kind in _EXPLORATORY_KINDS:
        if any(w in r for r in reasons for w in words):
            return kind
    return "rule written after the data"


@dataclasses.dataclass(frozen=True)
class Registration:
    key: str  # paper/claim
    label: str  # PRE_REGISTERED, EXPLORATORY, NO_RECORDS, NO_HISTORY, NOT_COMMITTED
    rule_commit: str | None
    reasons: tuple[str, ...] = ()  # why exploratory: one per failing record (a few named, then a count)
    # what the label rests on that later records prove and these do not (lra_lab.reproduce.record_evidence):
    # e.g. "70 of 70 records predate code-tree hashes"; and notes (a correction applied)
    old_evidence: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # lra_lab.reproduce.fingerprint: the files the judge runs, and each one's changes after the first record
    fingerprint: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    # the rule's form: "source" (old form: the judge's source is the signature), "data" (new form: the
    # registration's digest, lra_lab.reproduce.rules), or "data-from-source" (registered as source, migrated)
    form: str = ""
    migration: Migration | None = None

    @property
    def form_words(self) -> str:
        """Which form the rule was registered in, in words (the audit's column)."""
        if self.form == "data":
            return "data (its registration's digest)"
        if self.form == "data-from-source":
            moved = f" at {self.migration.since[:7]}" if self.migration else ""
            return f"old form (its judge's source), moved to data{moved}"
        return "old form (its judge's source)" if self.form == "source" else ""

    @property
    def short(self) -> str:
        commit = f" at {self.rule_commit[:7]}" if self.rule_commit else ""
        return {
            PRE_REGISTERED: f"pre-registered{commit}",
            EXPLORATORY: f"exploratory ({why_exploratory(self.reasons)})",
            NO_RECORDS: f"rule fixed{commit}, no records yet",
            NO_HISTORY: "cannot tell (no git history)",
            NOT_COMMITTED: "rule not committed as it is now",
        }[self.label]


def judge_registration(root: Path, key: str, rule_commit: str | None, records: Iterable[str]) -> Registration:
    """The label of one claim from its rule commit and the records that exist."""
    present = [r for r in records if (root / r).exists()]
    if rule_commit is None:
        return Registration(key, NOT_COMMITTED, None)
    if not present:
        return Registration(key, NO_RECORDS, rule_commit)
    reasons = []
    old_counts: dict[str, int] = {}
    notes: list[str] = []
    for rel in present:
        commit, field = record_commit(root / rel)
        commit, field, corrections = record_evidence.corrected_commit(root / rel, commit, field)
        notes += [f"{rel}: {n}" for n in corrections]
        if commit is None:
            reasons.append(f"{rel}: {field}")
            continue
        base = commit_base(commit)  # -declared: sent files, told their commit; -dirty: counts as its commit
        after = is_ancestor(root, rule_commit, base)
        if after is None:
            reasons.append(f"{rel}: its {field} {commit[:12]} is not in this repository's history")
        elif not after:
            reasons.append(f"{rel}: ran at {base[:7]}, not after the rule's commit {rule_commit[:7]}")
        elif field != "git_commit_start":
            reasons.append(f"{rel}: only its end commit is recorded (the run may have started before the rule)")
        evidence = record_evidence.check(root, root / rel, commit)  # its code trees and its seal
        reasons += [f"{rel}: {problem}" for problem in evidence.problems]
        for what in evidence.old:
            old_counts[what] = old_counts.get(what, 0) + 1
    old_evidence = tuple(f"{n} of {len(present)} records: {what}" for what, n in old_counts.items())
    if reasons:
        shown = reasons[:3] + ([f"and {len(reasons) - 3} more"] if len(reasons) > 3 else [])
        return Registration(key, EXPLORATORY, rule_commit, tuple(shown), old_evidence, tuple(notes))
    return Registration(key, PRE_REGISTERED, rule_commit, (), old_evidence, tuple(notes))


def current_signatures(root: Path) -> dict[str, str]:
    return signatures_of_tree(root)


def audit(
    root: Path, claims: Mapping[str, Iterable[str]] | None = None, cache: Path | None = None
) -> dict[str, Registration]:
    """Every claim's Registration (``claims``: key -> its record paths; default: the registry's)."""
    if claims is None:
        from lra_lab.reproduce.registry import papers

        claims = {f"{k}/{c.id}": c.records for k, p in papers().items() for c in p.claims}
    gap = history_gap(root)
    if gap is not None:
        return {key: Registration(key, NO_HISTORY, None, (gap,)) for key in claims}
    current = current_signatures(root)
    migrations: dict[str, Migration] = {}
    commits = rule_commits(root, {k: current[k] for k in claims if k in current}, cache, migrations)
    regs = {
        key: dataclasses.replace(judge_registration(root, key, commits.get(key), records),
                                 form=form_of(current[key]) if key in current else "",
                                 migration=migrations.get(key))
        for key, records in claims.items()
    }
    from lra_lab.reproduce import fingerprint

    return fingerprint.apply(root, regs, {k: tuple(r) for k, r in claims.items()}, cache,
                             {k: m.last_source for k, m in migrations.items()})


def default_cache() -> Path:
    return Path(os.environ.get("LRA_AUDIT_CACHE", Path.home() / ".cache" / "lra" / "audit"))


def audit_table(registrations: dict[str, Registration]) -> str:
    """The labels (why, and what older evidence each rests on), then each claim's fingerprint."""
    lines = ["| claim | registration | rule registered as | why | rests on older evidence |", "|---|---|---|---|---|"]
    for key, reg in registrations.items():
        lines.append(
            f"| `{key}` | {reg.short} | {reg.form_words} | {'; '.join(reg.reasons + reg.notes).replace('|', '/')} | "
            f"{'; '.join(reg.old_evidence)} |"
        )
    lines += [
        "",
        "Fingerprints: the files each claim's judge runs (lra_lab.reproduce.fingerprint), "
        "and those changed after its first record.",
        "",
        "| claim | files | changed after its first record |",
        "|---|---|---|",
    ]
    for key, reg in registrations.items():
        files = ", ".join(reg.fingerprint)
        lines.append(f"| `{key}` | {files} | {'; '.join(reg.changed)} |")
    return "\n".join(lines)


def older_evidence_summary(registrations: dict[str, Registration]) -> str:
    """Which labels rest on records written before code trees and seals (their commits as recorded)."""
    old = [k for k, r in registrations.items() if r.old_evidence and r.label in (PRE_REGISTERED, EXPLORATORY)]
    pre = [k for k in old if registrations[k].label == PRE_REGISTERED]
    if not old:
        return "every label rests on records with code-tree hashes and seals"
    return (
        f"{len(old)} labels rest on records that predate code-tree hashes and seals (their commits taken as "
        f"recorded, not checked against the code that ran), {len(pre)} of them pre-registered: " + ", ".join(pre)
    )


def forms_summary(registrations: dict[str, Registration]) -> str:
    """Which claims were registered in the old form (the judge's source as signature) and which as data."""
    by_form: dict[str, list[str]] = {}
    for key, reg in registrations.items():
        by_form.setdefault(reg.form or "unknown", []).append(key)
    source, moved, data = (by_form.get(f, []) for f in ("source", "data-from-source", "data"))
    return (
        f"rules registered in the old form (the judge's source as signature): {len(source) + len(moved)}, "
        f"{len(moved)} of them since moved to data (lra_lab.reproduce.rules; their outcomes compared with the "
        f"source-form judge's on their records): {', '.join(moved) or 'none'}; registered as data (the "
        f"registration's digest as signature): {len(data)}: {', '.join(data) or 'none'}"
    )


def as_json(registrations: dict[str, Registration]) -> dict[str, Any]:
    return {k: dataclasses.asdict(v) for k, v in registrations.items()}
