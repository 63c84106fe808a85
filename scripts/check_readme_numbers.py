"""Check that every number the README ties to a record equals that record.

A README number is tied to its record by an HTML comment right after it (invisible when
rendered)::

    ended at 35.8%<!-- rec results/runs/.../result.json test_accuracy % --> test accuracy

``rec PATH KEY [%]``: PATH is a JSON file in the repository, KEY a dotted path into it, ``%``
means the record holds a fraction that the README prints in percent. The number is the last
one before the comment on its line; it must equal the record rounded to the README's digits.

    python scripts/check_readme_numbers.py          # exit 1 and one line per mismatch
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!--\s*rec\s+(\S+)\s+(\S+)(\s+%)?\s*-->")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def _lookup(record: Any, key: str) -> Any:
    for part in key.split("."):
        record = record[int(part)] if isinstance(record, list) else record[part]
    return record


def check(readme: Path = ROOT / "README.md", root: Path = ROOT) -> tuple[int, list[str]]:
    """(number of tied numbers, problems): a problem names the line, the number and the record."""
    problems, count = [], 0
    for lineno, line in enumerate(readme.read_text().splitlines(), 1):
        for m in MARKER.finditer(line):
            count += 1
            path, key, percent = m.group(1), m.group(2), bool(m.group(3))
            shown = NUMBER.findall(line[: m.start()])
            where = f"{readme.name}:{lineno}"
            if not shown:
                problems.append(f"{where}: no number before the marker for {path} {key}")
                continue
            text = shown[-1].replace(",", "")
            mantissa, _, exponent = text.partition("e")
            digits = (len(mantissa.split(".")[1]) if "." in mantissa else 0) - int(exponent or 0)
            try:
                value = float(_lookup(json.loads((root / path).read_text()), key))
            except (OSError, KeyError, IndexError, ValueError) as e:
                problems.append(f"{where}: cannot read {key} from {path}: {e}")
                continue
            expected = round(value * (100 if percent else 1), digits)
            if abs(float(text) - expected) > 0.5 * 10**-digits * (1 + 1e-9) + 1e-12 * (not exponent):
                shown_expected = f"{expected:.{max(digits, 0)}f}" if not exponent else f"{value:.2e}"
                problems.append(f"{where}: README says {text}, {path} {key} gives {shown_expected}")
    return count, problems


def main() -> int:
    count, problems = check()
    for p in problems:
        print(p)
    print(f"{count} README numbers tied to records, {len(problems)} mismatched")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
