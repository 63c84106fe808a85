"""The paper-scale ListOps pilot's commands (lra_lab.reproduce.listops_paper): they name what the pilot
promises, its seed is fresh, and the sweep accepts them (a GPU job never starts on a path that does
not parse)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from lra_lab.reproduce import listops_paper as lp

REPO = Path(__file__).resolve().parent.parent


def _committed_listops_seeds() -> set[int]:
    seeds = set()
    for path in (REPO / "results" / "runs").glob("*/*/seed*"):
        if "listops" in path.parent.name and (m := re.fullmatch(r"seed(\d+)", path.name)):
            seeds.add(int(m.group(1)))
    return seeds


def test_seeds_are_fresh_and_the_study_seeds_disjoint_from_the_pilot():
    used = _committed_listops_seeds()
    assert used, "no committed ListOps records found: the check would pass vacuously"
    assert lp.PILOT_SEED not in used
    assert not used & set(lp.STUDY_SEEDS_RESERVED)
    assert lp.PILOT_SEED not in lp.STUDY_SEEDS_RESERVED


def test_commands_carry_the_pilots_settings():
    job, sweep, export, curves = lp.commands()
    for line in (job, sweep):
        assert "--preset paper" in line and f"--seeds {lp.PILOT_SEED} " in line
        assert "num_train_steps=10000" in line and "eval_every=500" in line and "model.dtype=bfloat16" in line
        assert all(f'"{row}"' in line for row in lp.ROWS)
    assert job.startswith("LRA_GIT_COMMIT=$(git rev-parse HEAD) ") and "scripts/gpu_call.sh sweep" in job
    assert export.endswith(f"{lp.SWEEP_ROOT} {lp.RUNS}")
    assert "--baseline-config configs/listops_convluna.py" in curves and "EXPLORATORY" in curves


def test_the_sweep_accepts_the_pilots_arguments():
    """scripts/sweep.py resolves the rows and settings into one lra.train command per row (no training)."""
    args = shlex.split(lp.sweep_arguments())
    out = subprocess.run(
        [sys.executable, "scripts/sweep.py", lp.GRID, *args, "--group-seeds", "on", "--root", "runs/x", "--commands"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("python -m lra.train")]
    assert len(lines) == len(lp.ROWS)
    assert all(":paper" in line and "--config.model.dtype=bfloat16" in line for line in lines)
    assert sum("listops_transformer.py:paper " in line for line in lines) == 1


def test_main_prints_the_commands_or_the_docstring(capsys):
    assert lp.main(["--commands"]) == 0
    assert capsys.readouterr().out.splitlines() == lp.commands()
    assert lp.main(["--nonsense"]) == 2
