"""A small git history built in a test (the audit's, the record evidence's and the fingerprint's tests):
git in a folder, a commit of everything, and the registry classes a fake ``lra.reproduce.registry``
declares before its claims (the layout before the laboratory moved out of lra/, which the audit still reads)."""

from __future__ import annotations

import subprocess
from pathlib import Path

# The head of a fake registry module: the two classes the audit reads (its claims follow in each test).
REGISTRY_CLASSES = """
import dataclasses

@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    rule: str
    judge: object
    records: tuple
    testable: bool = True

@dataclasses.dataclass(frozen=True)
class Paper:
    claims: tuple
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    """Commit everything in ``repo``; its hash."""
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")
