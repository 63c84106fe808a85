"""Training needs none of the tables extra (matplotlib, statsmodels, pandas): checked in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXTRA = "{'matplotlib', 'statsmodels', 'pandas'}"


@pytest.mark.parametrize("module", ["lra.train", "lra.evaluate"])
def test_training_path_imports_no_tables_extra(module):
    code = f"import {module}, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRA}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_tables_import_does_not_draw():
    """lra.reports.tables imports matplotlib only when it draws (make_tables --no-plots does not)."""
    code = "import lra.reports.tables, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_test_extra_pulls_in_the_tables_extra():
    """README installs `.[test]`, and the tests need matplotlib/scipy/statsmodels: `test` must include `tables`."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert "lra[tables]" in extras["test"]
    names = {d.split(">")[0].split("=")[0].strip() for d in extras["tables"]}
    assert {"matplotlib", "scipy", "statsmodels"} <= names
    assert not any(d.startswith(("matplotlib", "statsmodels", "pandas")) for d in project["dependencies"])
