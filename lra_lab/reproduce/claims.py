"""Claims and papers: what a paper states, how we test it on a laptop, and the rule, fixed in advance.

The classes each paper's module declares its claims with; ``registry`` collects the papers (apart, so that
the paper modules and the registry that imports them are no circle; moved here unchanged, issue 55).

A ``Claim``'s ``judge`` reads committed records (paths relative to the repository root) and returns
an ``Outcome``: the verdict, our number with its spread, the statistic, and any missing runs. The
rule is written in ``rule`` (words, shown in reports) and implemented by ``judge`` (code); both are
declared before the runs they judge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
PARTLY = "partly"
NOT_TESTABLE = "not testable here"
INCOMPLETE = "incomplete"
# An implementation check, not an empirical reproduction: the claim follows from how the code is
# built (a lookup reads a fixed k x k matrix; a count the module was written to match), so its test
# could only fail through a bug. Its judge's "reproduced" is reported under this name.
HOLDS_BY_CONSTRUCTION = "holds by construction"
# Neither the effect nor its absence shown: a judge's NOT_REPRODUCED whose detail begins "inconclusive"
# (the registered rules of Figure 2's equivalence tests say so in words) is counted as this kind, apart
# from "not reproduced" (evidence against the claim). The judge's outcome itself is unchanged.
INCONCLUSIVE = "inconclusive"
VERDICTS = (REPRODUCED, HOLDS_BY_CONSTRUCTION, NOT_REPRODUCED, INCONCLUSIVE, PARTLY, NOT_TESTABLE, INCOMPLETE)
EMPIRICAL, CONSTRUCTION = "empirical", "construction"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the records say about one claim."""

    verdict: str
    ours: str = ""  # our number(s) with spread, e.g. "39.1 +- 2.3% (5 seeds)"
    statistic: str = ""  # the test and its value, e.g. "paired t, one-sided p = 0.012"
    missing: tuple[str, ...] = ()  # records (or runs) that do not exist yet
    detail: str = ""  # one or two sentences on what the numbers show

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}; one of {VERDICTS}")
        if self.verdict == INCOMPLETE and not self.missing:
            raise ValueError("an incomplete outcome must list what is missing")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of a paper and the laptop-scale experiment that tests it."""

    id: str  # e.g. "table1-listops"
    where: str  # the table, figure or section, e.g. "Table 1"
    statement: str  # the claim in one sentence
    paper_numbers: str  # what the paper reports
    experiment: str  # the laptop-scale test: configs, presets, steps, seeds or a benchmark
    rule: str  # the verdict rule in words, fixed before the runs
    judge: Callable[[Path], Outcome]  # repo root -> outcome, from committed records
    commands: tuple[str, ...] = ()  # what produces the records (run in order from the repo root)
    records: tuple[str, ...] = ()  # the committed records it reads (relative to the repo root)
    cpu_minutes: float | None = None  # rough cost of the commands on a 2-core CPU
    testable: bool = True  # False: "not testable here"; ``experiment`` says what would test it
    kind: str = EMPIRICAL  # CONSTRUCTION: an implementation check (HOLDS_BY_CONSTRUCTION, never "reproduced")
    # root -> the commands that produce only the records still missing (None: all of ``commands``).
    # Committed records count as finished: a fresh clone never retrains (and re-exports) them.
    plan: Callable[[Path], tuple[str, ...]] | None = None
    # Why the rule could not fail at the scale it runs, said in its row (e.g. "faster from some N on" on a
    # grid where a crossover is near certain); empty: it could.
    cannot_fail: str = ""
    # The rule as data (lra_lab.reproduce.rules.Registration): its digest is the rule signature and
    # ``judge`` is its kind's shared judge. None: the old form, the judge's source is the signature.
    registration: Any = None

    def commands_needed(self, root: Path = REPO) -> tuple[str, ...]:
        return self.plan(root) if self.plan is not None else self.commands

    def outcome(self, root: Path = REPO) -> Outcome:
        if not self.testable:
            return self.judge(root)
        missing = tuple(r for r in self.records if not (root / r).exists())
        if missing:
            return Outcome(INCOMPLETE, missing=missing)
        try:
            outcome = self.judge(root)
            if self.kind == CONSTRUCTION and outcome.verdict == REPRODUCED:
                return dataclasses.replace(outcome, verdict=HOLDS_BY_CONSTRUCTION)
            if outcome.verdict == NOT_REPRODUCED and outcome.detail.lower().startswith(INCONCLUSIVE):
                return dataclasses.replace(outcome, verdict=INCONCLUSIVE)
            return outcome
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as e:
            # A record with a field missing, of the wrong type or with short rows: this claim is
            # incomplete, named, and every other claim (other papers' too) is still judged.
            return Outcome(INCOMPLETE, missing=(f"a record of {self.id} is damaged ({type(e).__name__}: {e}); "
                                                f"rerun its commands to rebuild it: {', '.join(self.records)}",))


@dataclasses.dataclass(frozen=True)
class Paper:
    key: str  # the command-line name, e.g. "convluna"
    title: str
    citation: str  # authors, venue, arXiv id
    claims: tuple[Claim, ...]

    def claim(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"unknown claim {claim_id!r} of paper {self.key!r}; valid: "
                       + ", ".join(c.id for c in self.claims))


def not_testable(claim_id: str, where: str, statement: str, paper_numbers: str, needs: str,
                 command: str) -> Claim:
    """A claim this machine cannot test: ``needs`` says which data and hardware would."""
    def judge(_root: Path) -> Outcome:
        return Outcome(NOT_TESTABLE, detail=needs)

    return Claim(claim_id, where, statement, paper_numbers, experiment=needs,
                 rule="none: the data or the hardware it needs is not available here",
                 judge=judge, commands=(command,) if command else (), testable=False)
