"""Verdict kinds that say what a test could show (issue 53): "inconclusive" counted apart from "not
reproduced", a rule that could not fail said in its row, the test set's binomial noise beside each
accuracy row, and a page's sentence that counts claims of a kind checked against the generated table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lra_lab.reproduce import doc_numbers, registry, report, sampling_noise
from lra_lab.reproduce.registry import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Claim, Outcome, Paper


def _claim(outcome: Outcome, records: tuple[str, ...] = (), **kw) -> Claim:
    return Claim("c", "Table 1", "s", "p", "e", "rule", lambda root: outcome, records=records, **kw)


def test_a_judges_inconclusive_not_reproduced_is_counted_as_inconclusive(tmp_path):
    inconclusive = Outcome(NOT_REPRODUCED, detail="inconclusive: neither equivalence nor a difference is shown")
    assert _claim(inconclusive).outcome(tmp_path).verdict == INCONCLUSIVE
    against = Outcome(NOT_REPRODUCED, detail="memory size moves accuracy by at least 2 points")
    assert _claim(against).outcome(tmp_path).verdict == NOT_REPRODUCED
    paper = Paper("x", "X", "cite", (_claim(inconclusive),))
    text = report.index({"x": (paper, {"c": paper.claims[0].outcome(tmp_path)})})
    assert "| inconclusive |" in text and "1 inconclusive" in text and "not reproduced |" not in text.split("|---|")[-1]


def test_the_registered_fig2_claim_is_inconclusive_with_its_judge_unchanged():
    claim = registry.find("convluna", "confirm-fig2-memory-size")[1][0]
    assert claim.judge(registry.REPO).verdict == NOT_REPRODUCED
    assert claim.outcome(registry.REPO).verdict == INCONCLUSIVE


def _runs(root: Path, row: str, accuracies: list[float], num_test: int = 1000) -> tuple[str, ...]:
    out = []
    for seed, acc in enumerate(accuracies):
        folder = root / "runs" / row / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"variant": row, "test_accuracy": acc}))
        (folder / "config.json").write_text(json.dumps({"data": {"num_test": num_test}}))
        out.append(f"runs/{row}/seed{seed}/result.json")
    return tuple(out)


def test_each_accuracy_row_gets_the_wilson_interval_of_its_test_set(tmp_path):
    records = _runs(tmp_path, "A", [0.40, 0.42]) + _runs(tmp_path, "B", [0.5], num_test=100)
    rows = sampling_noise.rows(tmp_path, records)
    assert [(r, round(m, 3), n) for r, m, n, _ in rows] == [("A", 0.41, 1000), ("B", 0.5, 100)]
    low, high = rows[0][3]
    # Wilson by hand: (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    z, p, n = 1.959963984540054, 0.41, 1000
    centre, half = p + z * z / (2 * n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    assert low == pytest.approx((centre - half) / (1 + z * z / n)) and high == pytest.approx(
        (centre + half) / (1 + z * z / n)
    )
    assert rows[1][3][1] - rows[1][3][0] > 3 * (high - low)  # 100 examples: a far wider interval
    paper = Paper("x", "X", "cite", (_claim(Outcome(REPRODUCED, ours="41%"), records),))
    text = report.paper_report(paper, {"c": paper.claims[0].outcome(tmp_path)}, [], root=tmp_path)
    assert "| A [38.0, 44.1]; B [40.4, 59.6] |" in text and "*Test-set noise.* Test-set noise: binomial" in text


def test_a_rule_that_could_not_fail_says_so_in_its_row(tmp_path):
    claim = _claim(Outcome(REPRODUCED, ours="faster from N=1024"), cannot_fail="a crossover is near certain")
    paper = Paper("x", "X", "cite", (claim,))
    outcomes = {"c": claim.outcome(tmp_path)}
    assert "could not fail at this scale (see its report); faster from N=1024" in report.index({"x": (paper, outcomes)})
    assert "*Could not fail at this scale.* a crossover is near certain" in report.paper_report(paper, outcomes, [])
    fig4 = registry.find("clustered", "fig4-cost")[1][0]
    assert "8,192" in fig4.cannot_fail


TABLE = """| paper | claim | where | verdict | registration | ours |
|---|---|---|---|---|---|
| [alpha](alpha/report.md) | `c1` | T1 | inconclusive | pre-registered at abc | x |
| [alpha](alpha/report.md) | `c2` | T2 | not reproduced | exploratory (rule written after the data) | x |
| [beta](beta/report.md) | `c3` | T3 | reproduced | pre-registered at abc | x |
"""


def test_a_sentence_counting_claims_of_a_kind_is_checked(tmp_path):
    (tmp_path / "table.md").write_text(TABLE)
    page = tmp_path / "README.md"
    page.write_text(
        "Two<!-- count table.md pre-registered --> claims are pre-registered, "
        '2<!-- count table.md inconclusive "not reproduced" --> were not shown, '
        "1<!-- count table.md inconclusive paper=alpha --> of alpha's is inconclusive.\n"
        "wrong: 3<!-- count table.md exploratory -->\n"
        "bad kind: 1<!-- count table.md refuted -->\n"
    )
    count, problems = doc_numbers.check_counts(page, tmp_path)
    assert count == 5 and len(problems) == 2, problems
    assert "README.md:2: the page says 3 exploratory, table.md gives 1" in problems[0]
    assert "unknown kind 'refuted'" in problems[1]
    assert doc_numbers.count_of(tmp_path / "table.md", ["inconclusive", "not reproduced"], "beta") == 0
