"""Check that every number the README and the docs/ pages tie to a record equals that record.

A number is tied to its record by an HTML comment right after it (invisible when rendered)::

    ended at 35.8%<!-- rec results/runs/.../result.json test_accuracy % --> test accuracy

``rec PATH KEY [%|MiB]``: PATH is a JSON file in the repository (from its root, whichever page the
number is on), KEY a dotted path into it, ``%`` means the record holds a fraction that the page
prints in percent, ``MiB`` a byte count that the page prints in MiB (2^20 bytes). The number is
the last one before the comment on its line; it must equal the record rounded to the page's digits.

A table of verdict counts is tied to the generated table of reproductions by a comment on the
line above it::

    <!-- verdicts results/reproductions/README.md -->
    | paper | claims | reproduced | partly | not reproduced | incomplete | not testable here |
    |---|---|---|---|---|---|---|
    | [convluna](results/reproductions/convluna/report.md) | 9 | 0 | 1 | 1 | 5 | 2 |
    | all | 23 | 5 | 2 | 2 | 6 | 8 |

Each row names a paper (the link text, as in the generated table's first column) or ``all``;
each column headed by a verdict (or ``claims``) must hold the number of that paper's claims with
that verdict (or all its claims). Other columns are free text. Every paper of the generated table
needs a row.

A number read from a run of a documented command is tied to the code as it is now by a comment
naming the command's config and the run::

    <!-- record-of configs/listops_convluna.py:laptop,reference results/runs/laptop_main/.../seed0 -->

The run's ``config.json`` must equal the config that the current code builds from that spec, field
by field: a change to the preset (or to any default it uses) fails the check until the run is
redone and its record committed. On README.md every ``rec`` number read from a run under
``results/runs/`` must lie in a run named by such a comment, and README.md stays within
:data:`README_MAX_LINES` lines (the front door: the rest belongs in docs/).

A sentence that counts claims of a kind ties its number to the generated table the same way::

    15<!-- count results/reproductions/README.md exploratory --> claims are exploratory, and
    two<!-- count results/reproductions/README.md inconclusive "not reproduced" paper=convluna --> ...

``count SOURCE KIND... [paper=NAME]``: the number (digits, or a word up to twenty) before the marker
must equal the claims of SOURCE's table with any of the KINDs (a verdict, or "exploratory" /
"pre-registered"; quote a kind with spaces), over all papers or the one named.

Pages checked: README.md and every docs/*.md.

    python scripts/check_readme_numbers.py          # exit 1 and one line per mismatch
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lra_lab.reproduce.claims import VERDICTS as REPRODUCE_VERDICTS

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!--\s*rec\s+(\S+)\s+(\S+)(?:\s+(%|MiB))?\s*-->")
SCALE = {"%": 100.0, "MiB": 1 / 2**20, None: 1.0}  # the unit the page prints the record's number in
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
VERDICTS_MARKER = re.compile(r"^\s*<!--\s*verdicts\s+(\S+)\s*-->\s*$")
# The verdict columns of a README table, plus the registration counts: "exploratory" (the audit's
# column of the generated table, lra_lab.reproduce.audit, says the rule came after the data) and
# "pre-registered" (git shows the rule committed before every record).
REGISTRATIONS = ("exploratory", "pre-registered")
VERDICTS = (*REPRODUCE_VERDICTS, *REGISTRATIONS)
ALL_ROWS = ("all", "total", "all papers")
RECORD_OF = re.compile(r"<!--\s*record-of\s+(\S+)\s+(\S+)\s*-->")
README_MAX_LINES = 150
RUN_RECORDS = "results/runs/"
# config.json fields that say where a run read its data, not what it computed
_LOCAL_FIELDS = ("data_dir", "data.cache_dir", "data.tfds_dir")


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose numbers are checked: README.md and docs/*.md."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def _where(page: Path, root: Path, lineno: int) -> str:
    try:
        name = page.relative_to(root).as_posix()
    except ValueError:
        name = page.name
    return f"{name}:{lineno}"


def _lookup(record: Any, key: str) -> Any:
    for part in key.split("."):
        record = record[int(part)] if isinstance(record, list) else record[part]
    return record


def check(readme: Path = ROOT / "README.md", root: Path = ROOT) -> tuple[int, list[str]]:
    """One page: (number of tied numbers, problems); a problem names the line, the number and the record."""
    problems, count = [], 0
    for lineno, line in enumerate(readme.read_text().splitlines(), 1):
        for m in MARKER.finditer(line):
            count += 1
            path, key, unit = m.group(1), m.group(2), m.group(3)
            shown = NUMBER.findall(line[: m.start()])
            where = _where(readme, root, lineno)
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
            expected = round(value * SCALE[unit], digits)
            if abs(float(text) - expected) > 0.5 * 10**-digits * (1 + 1e-9) + 1e-12 * (not exponent):
                shown_expected = f"{expected:.{max(digits, 0)}f}" if not exponent else f"{value:.2e}"
                problems.append(f"{where}: the page says {text}, {path} {key} gives {shown_expected}")
    return count, problems


def _every_page(check_page: Callable[[Path, Path], tuple[int, list[str]]], root: Path) -> tuple[int, list[str]]:
    count = 0
    problems: list[str] = []
    for page in pages(root):
        n, p = check_page(page, root)
        count, problems = count + n, problems + p
    return count, problems


def check_all(root: Path = ROOT) -> tuple[int, list[str]]:
    """Every page of :func:`pages`: (tied numbers in all, problems)."""
    return _every_page(check, root)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _paper(cell: str) -> str:
    link = re.match(r"\[([^\]]+)\]", cell.strip())
    return (link.group(1) if link else cell).strip().strip("*").strip().lower()


def verdict_counts(table: Path) -> dict[str, Counter]:
    """Per paper of the generated table (``python -m lra_lab.reproduce``): verdict -> number of claims."""
    counts: dict[str, Counter] = {}
    header: list[str] | None = None
    for line in table.read_text().splitlines():
        if not line.lstrip().startswith("|"):
            header = None  # a table ends at the first line that is not a row
            continue
        cells = _cells(line)
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        if "paper" in header and "verdict" in header:
            paper, verdict = _paper(cells[header.index("paper")]), cells[header.index("verdict")].lower()
            counts.setdefault(paper, Counter())[verdict] += 1
            if "registration" in header:
                for label in REGISTRATIONS:
                    if cells[header.index("registration")].lower().startswith(label):
                        counts[paper][label] += 1
    return counts


def check_verdicts(readme: Path = ROOT / "README.md", root: Path = ROOT) -> tuple[int, list[str]]:
    """One page's verdict tables: (numbers checked, problems)."""
    problems, count = [], 0
    lines = readme.read_text().splitlines()
    for start, line in enumerate(lines):
        m = VERDICTS_MARKER.match(line)
        if not m:
            continue
        source = m.group(1)
        where = _where(readme, root, start + 1)
        try:
            truth = verdict_counts(root / source)
        except OSError as e:
            problems.append(f"{where}: cannot read {source}: {e}")
            continue
        if not truth:
            problems.append(f"{where}: {source} has no table of verdicts")
            continue
        rows = []
        for lineno in range(start + 2, len(lines) + 1):
            if not lines[lineno - 1].lstrip().startswith("|"):
                break
            rows.append((lineno, _cells(lines[lineno - 1])))
        if len(rows) < 3:
            problems.append(f"{where}: no table right below the verdicts marker")
            continue
        header = [c.lower() for c in rows[0][1]]
        columns = {i: h for i, h in enumerate(header) if h in VERDICTS or h == "claims"}
        if not columns:
            problems.append(f"{where}: the table has no column headed by a verdict or 'claims'")
        seen = set()
        for lineno, cells in rows[2:]:
            paper = _paper(cells[0])
            if paper in ALL_ROWS:
                expected = sum(truth.values(), Counter())
            elif paper in truth:
                expected = truth[paper]
                seen.add(paper)
            else:
                problems.append(f"{_where(readme, root, lineno)}: {source} has no paper {paper!r}")
                continue
            for i, verdict in columns.items():
                want = (
                    sum(n for v, n in expected.items() if v not in REGISTRATIONS)
                    if verdict == "claims"
                    else expected[verdict]
                )
                got = cells[i] if i < len(cells) else ""
                count += 1
                if got != str(want):
                    problems.append(
                        f"{_where(readme, root, lineno)}: {paper} {verdict}: the page says "
                        f"{got or 'nothing'}, {source} gives {want}"
                    )
        for paper in sorted(set(truth) - seen):
            problems.append(f"{where}: no row for {paper} ({source} has {sum(truth[paper].values())} claims)")
    return count, problems


def check_all_verdicts(root: Path = ROOT) -> tuple[int, list[str]]:
    """Every page's verdict tables: (numbers checked in all, problems)."""
    return _every_page(check_verdicts, root)


def config_problems(spec: str, run_dir: Path) -> list[str]:
    """How ``run_dir/config.json`` differs from the config the current code builds from ``spec``
    (``configs/X.py:OPTIONS``, relative to the repository); [] when they are equal."""
    from lra.defaults import LEGACY_FIELDS, load_config_file
    from lra.training.run_files import config_to_dict, flatten_config

    path, _, options = spec.partition(":")
    try:
        recorded = flatten_config(json.loads((run_dir / "config.json").read_text()))
    except (OSError, ValueError) as e:
        return [f"cannot read {run_dir}/config.json: {e}"]
    current = flatten_config(config_to_dict(load_config_file(ROOT / path).get_config(options or None)))
    # a field added since the run, at the value that reproduces what the run did, is no difference
    for key, value in LEGACY_FIELDS.items():
        if key not in recorded and current.get(key) == value:
            recorded[key] = value
    fields = sorted(k for k in set(recorded) | set(current) if k not in _LOCAL_FIELDS)
    return [
        f"{k}: the record has {recorded.get(k, 'nothing')!r}, {spec} now gives {current.get(k, 'nothing')!r}"
        for k in fields
        if recorded.get(k) != current.get(k)
    ]


def check_records_of(page: Path = ROOT / "README.md", root: Path = ROOT) -> tuple[int, list[str]]:
    """One page's ``record-of`` comments: (runs checked, problems). On README.md, also every ``rec``
    number read from ``results/runs/`` that no ``record-of`` run holds, and the line budget."""
    problems, runs = [], []
    lines = page.read_text().splitlines()
    for lineno, line in enumerate(lines, 1):
        for m in RECORD_OF.finditer(line):
            spec, run = m.group(1), m.group(2).rstrip("/")
            runs.append(run)
            for why in config_problems(spec, root / run):
                problems.append(f"{_where(page, root, lineno)}: {run} is not a run of the current {spec}: {why}")
    if page.name == "README.md" and page.parent == root:
        if len(lines) > README_MAX_LINES:
            problems.append(
                f"README.md: {len(lines)} lines, over its budget of {README_MAX_LINES}: move detail to docs/"
            )
        for lineno, line in enumerate(lines, 1):
            for m in MARKER.finditer(line):
                path = m.group(1)
                if path.startswith(RUN_RECORDS) and not any(path.startswith(run + "/") for run in runs):
                    problems.append(
                        f"{_where(page, root, lineno)}: {path} is a run record that no record-of comment "
                        f"ties to a documented command (<!-- record-of CONFIG_SPEC RUN_DIR -->)"
                    )
    return len(runs), problems


def check_all_records_of(root: Path = ROOT) -> tuple[int, list[str]]:
    """Every page's ``record-of`` comments and README.md's budget: (runs checked, problems)."""
    return _every_page(check_records_of, root)


COUNT_MARKER = re.compile(r"<!--\s*count\s+(.+?)\s*-->")
NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
}
COUNT_NUMBER = re.compile(r"\b(\d[\d,]*|" + "|".join(NUMBER_WORDS) + r")\b", re.IGNORECASE)


def count_of(table: Path, kinds: list[str], paper: str | None = None) -> int:
    """The claims of the generated table ``table`` with any of ``kinds`` (verdicts or registrations),
    over all papers or ``paper``'s; KeyError naming an unknown kind or paper."""
    unknown = [k for k in kinds if k not in VERDICTS]
    if unknown:
        raise KeyError(f"unknown kind {unknown[0]!r}; one of {', '.join(VERDICTS)}")
    counts = verdict_counts(table)
    if paper is not None and paper not in counts:
        raise KeyError(f"{table.name} has no paper {paper!r}")
    chosen = [counts[paper]] if paper is not None else list(counts.values())
    return sum(c[k] for c in chosen for k in kinds)


def check_counts(page: Path = ROOT / "README.md", root: Path = ROOT) -> tuple[int, list[str]]:
    """One page's counting sentences (``count`` markers): (numbers checked, problems)."""
    import shlex

    problems, count = [], 0
    for lineno, line in enumerate(page.read_text().splitlines(), 1):
        for m in COUNT_MARKER.finditer(line):
            count += 1
            where = _where(page, root, lineno)
            try:
                source, *args = shlex.split(m.group(1))
            except ValueError as e:
                problems.append(f"{where}: cannot read the count marker: {e}")
                continue
            paper = next((a.split("=", 1)[1].lower() for a in args if a.startswith("paper=")), None)
            kinds = [a.lower() for a in args if not a.startswith("paper=")]
            shown = COUNT_NUMBER.findall(line[: m.start()])
            if not shown or not kinds:
                problems.append(f"{where}: a count marker needs a number before it and a kind")
                continue
            text = shown[-1].lower().replace(",", "")
            got = NUMBER_WORDS[text] if text in NUMBER_WORDS else int(text)
            try:
                want = count_of(root / source, kinds, paper)
            except (OSError, KeyError) as e:
                problems.append(f"{where}: cannot count {' + '.join(kinds)} in {source}: {e}")
                continue
            if got != want:
                problems.append(
                    f"{where}: the page says {shown[-1]} {' + '.join(kinds)}"
                    f"{f' of {paper}' if paper else ''}, {source} gives {want}"
                )
    return count, problems


def check_all_counts(root: Path = ROOT) -> tuple[int, list[str]]:
    """Every page's counting sentences: (numbers checked in all, problems)."""
    return _every_page(check_counts, root)


def main() -> int:
    count, problems = check_all()
    vcount, vproblems = check_all_verdicts()
    rcount, rproblems = check_all_records_of()
    ccount, cproblems = check_all_counts()
    vcount, vproblems = vcount + ccount, vproblems + cproblems
    for p in problems + vproblems + rproblems:
        print(p)
    print(f"{count} numbers in README.md and docs/*.md tied to records, {len(problems)} mismatched")
    print(
        f"{vcount} verdict counts checked against the generated table of reproductions, " f"{len(vproblems)} mismatched"
    )
    print(f"{rcount} runs checked against the current code's config of their command, {len(rproblems)} problems")
    return 1 if problems or vproblems or rproblems else 0
