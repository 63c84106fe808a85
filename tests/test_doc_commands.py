"""Docs whose commands run (issue 29): every shell block in README.md and docs/*.md is marked, and
every block marked ``run`` runs at smoke scale.

The marker is the line directly above the block's opening fence (same indentation)::

    <!-- doc-test: run -->
    <!-- doc-test: skip: REASON -->      REASON: one of SKIP_REASONS

A shell block is a fenced block whose language is bash, sh, shell or console (console: only the
``$ `` lines are commands). A block without a marker, a marker with another reason, and a marker
that is not directly followed by a shell block are each reported as ``file:line``.

Each ``run`` block (test id ``file:line`` of its marker) runs its command lines in order, in one
fresh temporary directory, as subprocesses that must exit 0. The rewrites (:func:`smoke_argv`),
the same every time:

* comments (``#`` at the start of a word) are dropped; ``\\`` continues a line; ``a && b`` runs
  ``a`` then ``b``; pipes, ``;``, ``||``, redirections and programs other than ``python`` are
  refused (mark such a block ``skip``);
* ``python`` / ``python3`` -> this interpreter; ``lra`` is imported from this checkout;
* a config spec (``--config configs/X.py[:OPTIONS]``): the ``paper``, ``cpu`` or ``laptop`` option becomes
  ``smoke`` in place, other options kept in order (``:cpu,reference`` -> ``:smoke,reference``);
  with no preset, ``smoke`` is put first;
* ``--preset paper|cpu`` -> ``--preset smoke``;
  ``--config.num_train_steps=N`` -> at most the smoke preset's 6 steps;
* ``--workdir``: a ``_cpu``/``_laptop``/``_paper`` ending of a path part (lra.train's default
  ``runs/<task>_<variant>_<preset>``) becomes ``_smoke``;
* data: ``$LRA_DATA_DIR`` is the tests' smoke data folder (conftest ``smoke_data_dir``: generated
  ListOps as test_train.py builds it); ``--data_dir`` / ``--config.data_dir`` values point there
  too; ``python -m lra.data prepare pathfinder|pathx`` gets ``--set pathfinder_images=64`` (the
  smoke preset's count; resolution and contour setting stay the command's own);
* paths: ``configs/...`` and ``scripts/...`` resolve against the repository (read only); any other
  relative path stays relative to the temporary directory; an absolute path ``/P`` (and ``~/P``)
  moves to ``<tmp>/root/P`` (``<tmp>/home/P``); ``$LRA_PREFLIGHT_CACHE`` is in the temporary
  directory. Nothing is written inside the repository (checked for every command).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import COMPILATION_CACHE, compilation_cache_dir
from lra_lab.reproduce.doc_numbers import pages as doc_pages

REPO = Path(__file__).resolve().parent.parent

SKIP_REASONS = (
    "needs data",
    "needs gpu",
    "needs tpu",
    "needs torch",
    "needs network",
    "install",
    "hours",
    "slurm",
    "multi-host",
)
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
SMOKE_STEPS = 6  # lra.defaults: the smoke preset's num_train_steps
SMOKE_PATHFINDER_IMAGES = 64  # lra.defaults: the smoke preset's pathfinder_images
PRESETS = ("paper", "cpu", "laptop", "smoke")
COMMAND_TIMEOUT_S = 600

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:(.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    where: str  # "file:line" of the marker (of the fence when unmarked)
    language: str
    lines: tuple[str, ...]  # the block's text, indentation removed
    marker: str | None  # "run", "skip: REASON" or None


def read_blocks(text: str, name: str) -> tuple[list[Block], list[str]]:
    """The shell blocks of one page and the marker problems, each problem naming ``name:line``."""
    lines = text.splitlines()
    blocks, problems = [], []
    pending: tuple[int, str] | None = None  # (line number, body) of a marker awaiting its block
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        fence = _FENCE.match(line)
        marker = _MARKER.match(line)
        if marker:
            if pending:
                problems.append(f"{name}:{pending[0]}: doc-test marker not directly followed by a shell block")
            pending = (number, " ".join(marker.group(1).split()))
            i += 1
            continue
        if not fence:
            if "doc-test:" in line and line.strip().startswith("<!--"):
                problems.append(f"{name}:{number}: malformed doc-test marker {line.strip()!r}")
            if pending:
                problems.append(f"{name}:{pending[0]}: doc-test marker not directly followed by a shell block")
                pending = None
            i += 1
            continue
        indent, ticks, language = fence.group(1), fence.group(2), fence.group(3).lower()
        end = i + 1  # the closing fence: same character, at least as long, nothing else on the line
        closing = re.compile(rf"^\s*{re.escape(ticks[0])}{{{len(ticks)},}}\s*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = tuple(ln[len(indent) :] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1 : end])
        if language in SHELL_LANGUAGES:
            if pending is None:
                problems.append(
                    f"{name}:{number}: ```{language} block without a doc-test marker on the line "
                    f"above (<!-- doc-test: run --> or <!-- doc-test: skip: REASON -->)"
                )
                blocks.append(Block(f"{name}:{number}", language, body, None))
            else:
                kind = pending[1]
                if kind != "run":
                    reason = kind.split(":", 1)[1].strip() if kind.startswith("skip:") else None
                    if reason not in SKIP_REASONS:
                        problems.append(
                            f"{name}:{pending[0]}: unknown doc-test marker {kind!r} (run, or skip: one "
                            f"of {', '.join(SKIP_REASONS)})"
                        )
                blocks.append(Block(f"{name}:{pending[0]}", language, body, kind))
        elif pending:
            problems.append(
                f"{name}:{pending[0]}: doc-test marker not directly followed by a shell block "
                f"(```{language or ''} is not bash/sh/shell/console)"
            )
        pending = None
        i = end + 1
    if pending:
        problems.append(f"{name}:{pending[0]}: doc-test marker not directly followed by a shell block")
    return blocks, problems


def all_blocks(root: Path = REPO) -> tuple[list[Block], list[str]]:
    blocks, problems = [], []
    for page in doc_pages(root):  # README.md and docs/*.md, the pages the number check reads
        found, wrong = read_blocks(page.read_text(), page.relative_to(root).as_posix())
        blocks += found
        problems += wrong
    return blocks, problems


# ---- commands of a block ---------------------------------------------------------------------


class DocCommandError(ValueError):
    """A command line the runner cannot run honestly (mark its block skip, or simplify it)."""


def strip_comment(line: str) -> str:
    """``line`` without its shell comment: ``#`` at the start of a word, outside quotes."""
    quote, previous = None, " "
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and previous.isspace():
            return line[:k].rstrip()
        previous = ch
    return line.rstrip()


def command_lines(block: Block) -> list[str]:
    """The block's command lines: comments dropped, ``\\`` continuations joined, console output
    (lines without ``$ ``) left out."""
    commands, current = [], ""
    for raw in block.lines:
        line = raw
        if block.language == "console" and not current:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        line = strip_comment(line)
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        line = (current + line).strip()
        current = ""
        if line:
            commands.append(line)
    if current.strip():
        commands.append(current.strip())
    return commands


def split_commands(line: str) -> list[list[str]]:
    """One command line as argv lists (``a && b``: two); pipes, ``;``, redirections are refused."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    argvs: list[list[str]] = [[]]
    for token in lexer:
        if token == "&&":
            argvs.append([])
        elif token and set(token) <= set("();<>|&"):
            raise DocCommandError(
                f"shell operator {token!r} in {line!r}: run blocks hold plain commands "
                f"(and '&&'); mark the block skip or split the line"
            )
        else:
            argvs[-1].append(token)
    if any(not argv for argv in argvs):
        raise DocCommandError(f"empty command in {line!r}")
    return argvs


@dataclass(frozen=True)
class Place:
    """Where a rewritten command runs: ``tmp`` is its working directory."""

    repo: Path
    tmp: Path
    data_dir: Path


def _path(value: str, place: Place) -> str:
    if value.startswith(("configs/", "scripts/")):
        return str(place.repo / value)
    if value.startswith("~/"):
        return str(place.tmp / "home" / value[2:])
    if value.startswith("/") and not value.startswith(str(place.tmp)):
        return str(place.tmp / "root" / value.lstrip("/"))
    return value


def _config_spec(value: str, place: Place) -> str:
    path, _, options = value.partition(":")
    names = [o for o in options.split(",") if o.strip()]
    presets = [k for k, o in enumerate(names) if o.strip() in PRESETS]
    if presets:
        for k in presets:
            names[k] = "smoke"
    else:
        names.insert(0, "smoke")
    return f"{_path(path, place)}:{','.join(names)}"


def _workdir(value: str, place: Place) -> str:
    parts = [re.sub(r"_(cpu|laptop|paper)$", "_smoke", part) for part in value.split("/")]
    return _path("/".join(parts), place)


def _value(flag: str | None, value: str, place: Place) -> str:
    if flag == "--config":
        return _config_spec(value, place)
    if flag == "--preset":
        return "smoke"
    if flag == "--config.num_train_steps":
        return str(min(int(value), SMOKE_STEPS))
    if flag in ("--data_dir", "--config.data_dir"):
        return str(place.data_dir)
    if flag == "--workdir":
        return _workdir(value, place)
    return _path(value, place)


def smoke_argv(argv: list[str], place: Place) -> list[str]:
    """One documented command, rewritten to smoke scale (the module docstring lists the rules)."""
    if argv[0] not in ("python", "python3"):
        raise DocCommandError(f"{argv[0]!r}: run blocks hold python commands only; mark the block skip")
    out, args, flag = [sys.executable], argv[1:], None
    for token in args:
        if token.startswith("--") and "=" in token:
            name, _, value = token.partition("=")
            out.append(f"{name}={_value(name, value, place)}")
            flag = None
        elif token.startswith("-"):
            out.append(token)
            flag = token
        else:
            out.append(_value(flag, token, place))
            flag = None
    if (
        args[:3] == ["-m", "lra.data", "prepare"]
        and set(args[3:4]) & {"pathfinder", "pathx"}
        and not any("pathfinder_images=" in a for a in args)
    ):
        out += ["--set", f"pathfinder_images={SMOKE_PATHFINDER_IMAGES}"]
    return out


def writes_nothing_in_repo(argv: list[str], place: Place) -> None:
    """Every absolute path in ``argv`` is this interpreter, the temporary directory, or the
    repository's configs/ and scripts/ (read only)."""
    readable = (place.repo / "configs", place.repo / "scripts")
    for token in argv[1:]:
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        if not value.startswith("/"):
            continue
        path = Path(value.split(":", 1)[0]).resolve()
        if path.is_relative_to(place.repo) and not any(path.is_relative_to(r) for r in readable):
            raise DocCommandError(f"the rewritten command names {path} inside the repository: {shlex.join(argv)}")
    assert not place.tmp.resolve().is_relative_to(place.repo)


def environment(place: Place) -> dict[str, str]:
    """The commands' environment; they share this test run's compilation cache (conftest: never
    killed but by the timeout), so a program a test compiled is loaded."""
    cache = compilation_cache_dir()
    return {
        **os.environ,
        **({COMPILATION_CACHE: cache} if cache else {}),
        "LRA_DATA_DIR": str(place.data_dir),
        "LRA_PREFLIGHT_CACHE": str(place.tmp / "preflight_cache"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(place.repo), os.environ.get("PYTHONPATH", "")) if p),
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",
    }


def _tail(text: str, chars: int = 3000) -> str:
    return text if len(text) <= chars else "..." + text[-chars:]


# ---- the tests ----------------------------------------------------------------------------------

BLOCKS, PROBLEMS = all_blocks()
RUN_BLOCKS = [b for b in BLOCKS if b.marker == "run"]


def test_every_shell_block_is_marked():
    assert not PROBLEMS, "shell blocks in README.md/docs/*.md without a valid doc-test marker:\n" + "\n".join(PROBLEMS)
    assert len(RUN_BLOCKS) >= 5 and any(b.where.startswith("README.md:") for b in RUN_BLOCKS)


def run_block(block: Block, place: Place) -> list[float]:
    """Run ``block``'s commands at smoke scale in ``place.tmp``; each command's seconds. A command
    that cannot be rewritten or exits non-zero fails the test, naming the block."""
    lines = command_lines(block)
    if not lines:
        pytest.fail(f"{block.where}: a run block without commands", pytrace=False)
    try:
        plan = [(line, smoke_argv(argv, place)) for line in lines for argv in split_commands(line)]
        for _, argv in plan:
            writes_nothing_in_repo(argv, place)
    except DocCommandError as e:
        pytest.fail(f"{block.where}: {e}", pytrace=False)
    seconds = []
    for k, (line, argv) in enumerate(plan, 1):
        start = time.monotonic()
        try:
            done = subprocess.run(
                argv, cwd=place.tmp, env=environment(place), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as e:
            pytest.fail(
                f"{block.where}: command {k} ran past {COMMAND_TIMEOUT_S} s: {line}\n"
                f"rewritten: {shlex.join(argv)}\nstderr tail:\n{_tail(str(e.stderr or ''))}",
                pytrace=False,
            )
        seconds.append(time.monotonic() - start)
        print(f"{block.where} command {k}: {seconds[-1]:.1f} s: {shlex.join(argv)}")
        if done.returncode != 0:
            pytest.fail(
                f"{block.where}: command {k} exited {done.returncode}: {line}\n"
                f"rewritten: {shlex.join(argv)}\nstdout tail:\n{_tail(done.stdout, 1500)}\n"
                f"stderr tail:\n{_tail(done.stderr)}",
                pytrace=False,
            )
    return seconds


# The README's block runs in the default suite (the front door); the docs' blocks, a minute each, with
# -m slow (their commands' pieces are each tested on their own in the default suite).
FRONT_DOOR = "README.md"


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=() if b.where.startswith(FRONT_DOOR) else pytest.mark.slow) for b in RUN_BLOCKS],
    ids=[b.where for b in RUN_BLOCKS],
)
def test_doc_block_runs_at_smoke_scale(block, smoke_data_dir, tmp_path):
    place = Place(REPO, tmp_path / "cwd", smoke_data_dir)
    place.tmp.mkdir()
    run_block(block, place)


# ---- the checks can fail -----------------------------------------------------------------------

FAKE_PAGE = """\
# page

<!-- doc-test: run -->
```bash
python -m lra.train --config configs/listops_convluna.py:cpu   # fine
```

```sh
python -m lra.train --config configs/listops_linear.py:cpu
```

<!-- doc-test: skip: because -->
```bash
echo unknown reason
```

<!-- doc-test: skip: needs gpu -->

```bash
echo a blank line between marker and block
```

<!-- doc-test: run -->
```python
print("not a shell block")
```

```text
no marker needed
```

   <!-- doc-test: skip: needs data -->
   ```console
   $ python -m lra.data prepare text
   output line
   ```
<!-- doc-test: run -->
"""


def test_marker_problems_are_reported_with_file_and_line():
    blocks, problems = read_blocks(FAKE_PAGE, "docs/fake.md")
    assert [b.where for b in blocks] == [
        "docs/fake.md:3",
        "docs/fake.md:8",
        "docs/fake.md:12",
        "docs/fake.md:19",
        "docs/fake.md:32",
    ]
    assert [b.marker for b in blocks] == ["run", None, "skip: because", None, "skip: needs data"]
    assert [p.split(": ", 1)[0] for p in problems] == [
        "docs/fake.md:8",
        "docs/fake.md:12",
        "docs/fake.md:17",
        "docs/fake.md:19",
        "docs/fake.md:23",
        "docs/fake.md:37",
    ]
    assert "without a doc-test marker" in problems[0] and "unknown doc-test marker 'skip: because'" in problems[1]
    assert all("not directly followed" in problems[k] for k in (2, 4, 5))
    assert command_lines(blocks[-1]) == ["python -m lra.data prepare text"]


def test_rewrites_are_fixed(tmp_path):
    place = Place(REPO, tmp_path, tmp_path / "data")

    def rewrite(line: str) -> list[list[str]]:
        block = Block("x:1", "bash", tuple(line.splitlines()), "run")
        return [smoke_argv(argv, place) for text in command_lines(block) for argv in split_commands(text)]

    py, cfg = sys.executable, REPO / "configs"
    assert rewrite("python -m lra.train --config configs/listops_convluna.py:cpu,reference   # a comment") == [
        [py, "-m", "lra.train", "--config", f"{cfg}/listops_convluna.py:smoke,reference"]
    ]
    assert rewrite(
        "python -m lra.train --config=configs/text_luna.py:reference,mem=256 \\\n"
        "    --config.num_train_steps=60 --workdir /tmp/run --config.a=b#c"
    ) == [
        [
            py,
            "-m",
            "lra.train",
            f"--config={cfg}/text_luna.py:smoke,reference,mem=256",
            f"--config.num_train_steps={SMOKE_STEPS}",
            "--workdir",
            f"{tmp_path}/root/tmp/run",
            "--config.a=b#c",
        ]
    ]
    assert rewrite("python -m lra.evaluate --workdir runs/listops_transformer_cpu/seed0 --options clusters=16") == [
        [py, "-m", "lra.evaluate", "--workdir", "runs/listops_transformer_smoke/seed0", "--options", "clusters=16"]
    ]
    assert rewrite(
        "python scripts/sweep.py convluna_table1 --preset cpu --tasks listops && python -m lra.data "
        "prepare pathfinder --data_dir /data"
    ) == [
        [py, str(REPO / "scripts" / "sweep.py"), "convluna_table1", "--preset", "smoke", "--tasks", "listops"],
        [
            py,
            "-m",
            "lra.data",
            "prepare",
            "pathfinder",
            "--data_dir",
            str(tmp_path / "data"),
            "--set",
            f"pathfinder_images={SMOKE_PATHFINDER_IMAGES}",
        ],
    ]
    for refused in (
        "python -m lra.train | tee log",
        "pip install -e .",
        "python a.py > out",
        "python a.py; python b.py",
    ):
        with pytest.raises(DocCommandError):
            rewrite(refused)
    with pytest.raises(DocCommandError, match="inside the repository"):
        writes_nothing_in_repo([py, "--out", str(REPO / "results" / "x")], place)


def test_a_failing_command_names_its_block(tmp_path):
    block = Block(
        "docs/fake.md:5",
        "bash",
        (
            "python -c 'print(1)'   # fine",
            "python -c 'import sys; print(\"boom\", file=sys.stderr); sys.exit(3)'",
        ),
        "run",
    )
    with pytest.raises(pytest.fail.Exception) as failed:
        run_block(block, Place(REPO, tmp_path, tmp_path / "data"))
    message = str(failed.value)
    assert message.startswith("docs/fake.md:5: command 2 exited 3") and "boom" in message
