"""What a record proves about the code that made it: its code trees against its commit, and its seal.

A record names the commit its run started from, but a name can be typed in (``-declared``) or sit on
uncommitted edits (``-dirty``). Records written since issue 53 also store ``code_start``: the git tree
ids of the ``lra/`` and ``configs/`` files on disk when the run began (lra.training.provenance), and a
seal beside them (lra.training.provenance). For one record, :func:`check` says:

- the commit's trees (``git rev-parse <commit>:lra``) equal the stored ones: the declared commit is
  the code that ran, whatever was typed in, and a ``-dirty`` flag from edits outside the code does
  not matter;
- they differ and the tree was dirty: **ran on uncommitted code**, never pre-registered;
- they differ on a clean or declared commit: the code that ran is not the commit it names;
- the record no longer matches its seal: **edited after it was written**, named;
- a record from before both (no ``code_start``, no seal) **predates code-tree hashes**: its commit is
  taken as recorded, and the audit says which labels rest on that older evidence. A ``-dirty``
  record of that age ran on uncommitted code that nothing can recover, and is labelled so.

A correction (lra.training.provenance.write_correction) of a commit field is applied, and named.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from lra.training import provenance
from lra.training.provenance import CODE_FOLDERS

UNCOMMITTED = "ran on uncommitted code"
NOT_ITS_COMMIT = "the code that ran is not its commit's"
PREDATES = "record predates code-tree hashes"
COMMIT_FIELDS = ("git_commit_start", "git_commit")


@dataclasses.dataclass(frozen=True)
class RecordEvidence:
    problems: tuple[str, ...] = ()  # each makes its claim exploratory
    old: tuple[str, ...] = ()  # what the record lacks (its label rests on older evidence), not a fault
    notes: tuple[str, ...] = ()  # said, changes nothing (a correction applied)


def _tree(root: Path, commit: str, folder: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", f"{commit}:{folder}"],
                          capture_output=True, text=True, timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else None


def corrected_commit(path: Path, commit: str | None, field: str) -> tuple[str | None, str, tuple[str, ...]]:
    """The record's commit after its corrections (a correction of ``field`` wins), which field, and a
    note per correction applied; a correction that is itself damaged is a note and is not applied."""
    if not provenance.correction_paths(path):
        return commit, field, ()
    try:
        bodies = provenance.read_corrections(path)
    except ValueError as e:  # IntegrityError is a ValueError
        return commit, field, (f"its correction is not applied: {e}",)
    notes = []
    for body in bodies:
        for name, change in body["changes"].items():
            if name == field.split(" ")[0] and isinstance(change.get("to"), str):
                commit = change["to"]
            notes.append(f"{name} corrected by {body['who']} on {body['date'][:10]} ({body['why']})")
    return commit, field, tuple(notes)


def check(root: Path, path: Path, commit: str) -> RecordEvidence:
    """The evidence of the record at ``path`` that it ran ``commit`` (as recorded: maybe ``-dirty`` or
    ``-declared``) and was not edited since."""
    problems: list[str] = []
    old: list[str] = []
    state, sentence = provenance.seal_state(path)
    if state in (provenance.EDITED, provenance.SEAL_DAMAGED):
        problems.append(sentence)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    code = data.get("code_start") if isinstance(data, dict) else None
    base = commit.removesuffix("-declared").removesuffix("-dirty")
    if isinstance(code, dict):
        differ = [f for f in CODE_FOLDERS if code.get(f) != _tree(root, base, f)]
        if differ and (commit.endswith("-dirty") or code.get("diff_sha256")):
            problems.append(f"{UNCOMMITTED}: its {', '.join(differ)}/ tree is not {base[:7]}'s "
                            f"(diff sha256 {str(code.get('diff_sha256'))[:12]})")
        elif differ:
            problems.append(f"{NOT_ITS_COMMIT}: its {', '.join(differ)}/ tree is not that of {base[:7]}, "
                            "the commit it names")
    else:
        if commit.endswith("-dirty"):
            problems.append(f"{UNCOMMITTED} (a dirty tree on {base[:7]}, before code trees were recorded: "
                            "what ran is not recoverable)")
        old.append(PREDATES + (" (its commit was typed in by hand and cannot be checked)"
                               if commit.endswith("-declared") else ""))
    if state == provenance.UNSEALED:
        old.append("unsealed")
    return RecordEvidence(tuple(problems), tuple(old))
