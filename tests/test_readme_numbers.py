"""README and docs/ numbers equal the records they cite (lra_lab/reproduce/doc_numbers.py, run by
scripts/check_readme_numbers.py)."""

from __future__ import annotations

import json
from pathlib import Path

from lra_lab.reproduce import doc_numbers as checker

ROOT = Path(__file__).resolve().parent.parent


def test_readme_numbers_match_their_records():
    count, problems = checker.check()
    assert not problems, "\n".join(problems)
    assert count >= 3  # the main job's accuracy and timings


def test_readme_and_docs_numbers_match_their_records():
    count, problems = checker.check_all()
    assert not problems, "\n".join(problems)
    assert count >= 60  # the memory degradation, the published-code check, the initialisation, ...
    docs = [p.relative_to(ROOT).as_posix() for p in checker.pages()]
    assert docs[0] == "README.md" and "docs/results.md" in docs and "docs/reference.md" in docs


def test_readme_verdict_counts_match_the_generated_table():
    """The README's per-paper counts equal results/reproductions/README.md (update them as runs land)."""
    count, problems = checker.check_all_verdicts()
    assert not problems, "\n".join(problems)
    assert count >= 6  # at least the "all" row


def test_a_wrong_number_is_caught(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"a": {"acc": 0.3575}, "t": 155.4}))
    readme = tmp_path / "README.md"
    readme.write_text(
        "ok 35.8%<!-- rec r.json a.acc % --> and 155 s<!-- rec r.json t -->\n"
        "wrong 36.8%<!-- rec r.json a.acc % -->\nmissing 1<!-- rec r.json b -->\n"
    )
    count, problems = checker.check(readme, tmp_path)
    assert count == 4 and len(problems) == 2
    assert "says 36.8" in problems[0] and problems[0].startswith("README.md:2:")
    assert "cannot read b" in problems[1]


def test_a_wrong_number_in_a_docs_page_is_caught(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"a": {"acc": 0.3575}}))
    (tmp_path / "README.md").write_text("ok 35.8%<!-- rec r.json a.acc % -->\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("ok 35.8%<!-- rec r.json a.acc % -->\n")
    (tmp_path / "docs" / "b.md").write_text("text\n\nwrong 35.6%<!-- rec r.json a.acc % -->\n")
    count, problems = checker.check_all(tmp_path)
    assert count == 3 and len(problems) == 1, problems
    assert problems[0].startswith("docs/b.md:3:") and "says 35.6" in problems[0]


def test_scientific_notation_is_checked_to_its_digits(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"d": 1.46e-05, "n": 1426448}))
    readme = tmp_path / "README.md"
    readme.write_text(
        "ok 1.5e-05<!-- rec r.json d --> and 1,426,448<!-- rec r.json n -->\n"
        "wrong 1.3e-05<!-- rec r.json d -->\nwrong 2e-04<!-- rec r.json d -->\n"
    )
    count, problems = checker.check(readme, tmp_path)
    assert count == 4 and len(problems) == 2, problems
    assert "says 1.3e-05" in problems[0] and "says 2e-04" in problems[1]


GENERATED = """# Reproductions

| paper | claim | where | verdict | ours |
|---|---|---|---|---|
| [alpha](alpha/report.md) | `c1` | Table 1 | reproduced | 35.9% |
| [alpha](alpha/report.md) | `c2` | Table 2 | not reproduced | a | b |
| [alpha](alpha/report.md) | `c3` | Figure 1 | incomplete | missing 5 record(s) |
| [beta](beta/report.md) | `c1` | Table 1 | not testable here |  |

Totals: 1 incomplete, 1 not reproduced, 1 not testable here, 1 reproduced.
"""


def _verdict_page(rows: str) -> str:
    return (
        "intro\n\n<!-- verdicts gen/README.md -->\n"
        "| paper | claims | reproduced | partly | not reproduced | incomplete | not testable here | scale |\n"
        "|---|---|---|---|---|---|---|---|\n" + rows + "\nafter the table 7\n"
    )


def test_verdict_counts_are_checked_against_the_generated_table(tmp_path):
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "README.md").write_text(GENERATED)
    readme = tmp_path / "README.md"
    readme.write_text(
        _verdict_page(
            "| [alpha](gen/alpha/report.md): the first | 3 | 1 | 0 | 1 | 1 | 0 | CPU 2 |\n"
            "| [beta](gen/beta/report.md) | 1 | 0 | 0 | 0 | 0 | 1 | |\n"
            "| all | 4 | 1 | 0 | 1 | 1 | 1 | |\n"
        )
    )
    count, problems = checker.check_verdicts(readme, tmp_path)
    assert count == 18 and not problems, problems


def test_a_stale_verdict_count_and_a_missing_paper_are_caught(tmp_path):
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "README.md").write_text(GENERATED)
    readme = tmp_path / "README.md"
    # alpha's claim c3 has landed as "partly" in the README but not in the generated table; beta has no row
    readme.write_text(
        _verdict_page(
            "| [alpha](gen/alpha/report.md) | 3 | 1 | 1 | 1 | 0 | 0 | |\n" "| all | 4 | 1 | 0 | 1 | 1 | 1 | |\n"
        )
    )
    count, problems = checker.check_verdicts(readme, tmp_path)
    assert len(problems) == 3, problems
    assert problems[0].startswith("README.md:6:") and "alpha partly: the page says 1" in problems[0]
    assert "alpha incomplete: the page says 0" in problems[1] and "gives 1" in problems[1]
    assert "no row for beta" in problems[2]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(_verdict_page("| [gamma](g.md) | 1 | 1 | 0 | 0 | 0 | 0 | |\n"))
    _, problems = checker.check_all_verdicts(tmp_path)
    assert any(p.startswith("docs/x.md:6:") and "no paper 'gamma'" in p for p in problems), problems


def test_readme_stays_within_its_line_budget_and_its_run_numbers_are_the_current_presets():
    """Issue 51: the front door stays short, and every README number read from a run is a run of the
    command README gives, as the current code builds it."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= checker.README_MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"
    count, problems = checker.check_records_of()
    assert not problems, "\n".join(problems)
    assert count >= 1  # the main job's record


def _run_page(tmp_path, *, config_change=None, extra_lines=0, tie=True):
    record = ROOT / "results/runs/laptop_main/listops_convluna-16-reference_laptop/seed0"
    run = tmp_path / "results/runs/x/seed0"
    run.mkdir(parents=True)
    config = json.loads((record / "config.json").read_text())
    if config_change:
        config.update(config_change)
    (run / "config.json").write_text(json.dumps(config))
    (run / "result.json").write_text(json.dumps({"test_accuracy": 0.45}))
    tied = "<!-- record-of configs/listops_convluna.py:laptop,reference results/runs/x/seed0 -->\n" if tie else ""
    readme = tmp_path / "README.md"
    number = "45.0%<!-- rec results/runs/x/seed0/result.json test_accuracy % -->\n"
    readme.write_text(number + tied + "x\n" * extra_lines)
    return checker.check_records_of(readme, tmp_path)


def test_a_run_of_another_preset_an_untied_run_number_and_a_long_readme_are_caught(tmp_path):
    assert _run_page(tmp_path / "ok") == (1, [])
    _, problems = _run_page(tmp_path / "steps", config_change={"num_train_steps": 3000})
    assert len(problems) == 1 and "num_train_steps: the record has 3000" in problems[0], problems
    assert "README.md:2:" in problems[0] and "laptop,reference now gives 4000" in problems[0]
    count, problems = _run_page(tmp_path / "untied", tie=False)
    assert count == 0 and len(problems) == 1 and "no record-of comment" in problems[0], problems
    _, problems = _run_page(tmp_path / "long", extra_lines=checker.README_MAX_LINES)
    assert len(problems) == 1 and "over its budget" in problems[0], problems
