"""README numbers equal the records they cite (scripts/check_readme_numbers.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_readme_numbers", ROOT / "scripts" / "check_readme_numbers.py")
checker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checker)


def test_readme_numbers_match_their_records():
    count, problems = checker.check()
    assert not problems, "\n".join(problems)
    assert count >= 8  # the headline and the memory-degradation results are tied


def test_a_wrong_number_is_caught(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"a": {"acc": 0.3575}, "t": 155.4}))
    readme = tmp_path / "README.md"
    readme.write_text("ok 35.8%<!-- rec r.json a.acc % --> and 155 s<!-- rec r.json t -->\n"
                      "wrong 36.8%<!-- rec r.json a.acc % -->\nmissing 1<!-- rec r.json b -->\n")
    count, problems = checker.check(readme, tmp_path)
    assert count == 4 and len(problems) == 2
    assert "README says 36.8" in problems[0] and "README.md:2" in problems[0]
    assert "cannot read b" in problems[1]


def test_scientific_notation_is_checked_to_its_digits(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"d": 1.46e-05, "n": 1426448}))
    readme = tmp_path / "README.md"
    readme.write_text("ok 1.5e-05<!-- rec r.json d --> and 1,426,448<!-- rec r.json n -->\n"
                      "wrong 1.3e-05<!-- rec r.json d -->\nwrong 2e-04<!-- rec r.json d -->\n")
    count, problems = checker.check(readme, tmp_path)
    assert count == 4 and len(problems) == 2, problems
    assert "README says 1.3e-05" in problems[0] and "README says 2e-04" in problems[1]
