"""scripts/bench_peers.py at a tiny size, with the peers made unimportable: lra's rows are
measured, the missing peers are named (on stdout and in the report), both files are written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_peers.py"


def test_bench_peers_without_peers(tmp_path):
    out = tmp_path / "peers"
    # "python -I -S": no site-packages, so neither torch nor fast-transformers can be imported.
    peer_python = f"{sys.executable} -I -S"
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--lengths",
        "64",
        "--calls",
        "1",
        "--clusters",
        "4",
        "--bits",
        "16",
        "--iterations",
        "2",
        "--topk",
        "4",
        "--peer_python",
        peer_python,
        "--cases",
        "lra_clustered",
        "lra_softmax",
        "lra_dispersed",
        "torch_sdpa",
        "ft_clustered",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "NOT INSTALLED: torch" in proc.stdout
    assert "pytorch-fast-transformers==0.4.0" in proc.stdout

    result = json.loads(out.with_suffix(".json").read_text())
    assert result["meta"]["settings"]["clusters"] == 4 and result["meta"]["lengths"] == [64]
    (run,) = result["runs"]
    lra_cases = run["lengths"]["64"]["lra"]["cases"]
    assert set(lra_cases) == {"lra_clustered", "lra_softmax", "lra_dispersed"}
    assert all(len(c["seconds"]) == 1 and c["seconds"][0] > 0 for c in lra_cases.values())
    assert run["lengths"]["64"]["peer"]["cases"] == {}
    assert any(m.startswith("torch") for m in result["meta"]["missing"])

    md = out.with_suffix(".md").read_text()
    assert "**Not installed, rows left empty:**" in md and "torch" in md
    assert result["meta"]["machine"]["cpu_model"] in md
    assert result["meta"]["git_commit"] and f"(git {result['meta']['git_commit']})" in md  # which code ran
    clustered_row = next(line for line in md.splitlines() if line.startswith("| clustered | 64 |"))
    assert "fast-transformers" in clustered_row and "| – |" in clustered_row  # no peer time
    assert any(line.startswith("| 64 |") for line in md.splitlines())  # dispersed vs softmax row
