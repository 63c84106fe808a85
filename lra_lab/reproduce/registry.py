"""The registry: every paper with its claims, in the README's order (``papers``, ``find``).

The claim classes are in ``claims`` (re-exported here for the command lines that read both).
"""

from __future__ import annotations

from lra_lab.reproduce.claims import (  # noqa: F401  (re-exported)
    CONSTRUCTION,
    EMPIRICAL,
    HOLDS_BY_CONSTRUCTION,
    INCOMPLETE,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    REPO,
    REPRODUCED,
    VERDICTS,
    Claim,
    Outcome,
    Paper,
    not_testable,
)


def papers() -> dict[str, Paper]:
    """Every paper with its claims, in the README's order (imported lazily: modules are small)."""
    from lra_lab.reproduce import agglomerative, cheap_linear, clustered, convluna, dispersed

    return {m.PAPER.key: m.PAPER for m in (convluna, clustered, agglomerative, dispersed, cheap_linear)}


def find(paper_key: str, claim_id: str | None = None) -> tuple[Paper, list[Claim]]:
    """The paper and the selected claims; unknown names raise KeyError listing the valid ones."""
    all_papers = papers()
    if paper_key not in all_papers:
        raise KeyError(f"unknown paper {paper_key!r}; valid: {', '.join(all_papers)}")
    paper = all_papers[paper_key]
    return paper, [paper.claim(claim_id)] if claim_id else list(paper.claims)
