"""The registered paper-scale ListOps study (lra_lab.reproduce.listops_paper_study, issue 54 item 4): its rule is
data, its judge says "no records yet" before any run and gives every verdict its words name on synthetic
records, its seeds are fresh, its power and budget follow from the committed records by the code that
prints them, and its commands parse (and, slow, run and resume at smoke size through scripts/gpu_call.sh).

``PAPER_CASES`` joins ``tests/test_reproduce_rules.py``'s per-claim cases.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import result_record
from lra_lab.reproduce import listops_paper, registry, rules
from lra_lab.reproduce import listops_paper_study as st
from lra_lab.reproduce.registry import INCOMPLETE, NOT_REPRODUCED, PARTLY, REPRODUCED
from test_listops_paper import _committed_listops_seeds
from test_reproduce_confirm import _config

REPO = Path(__file__).resolve().parent.parent
Writer = Callable[[Path], None]
BASE = [37.0 + 0.2 * (k % 5) - 0.15 * (k % 3) for k in range(14)]  # percent, seeds 310-323
JITTER = [0.3, -0.2, 0.1, -0.3, 0.2, 0.0, -0.1, 0.25, -0.15, 0.05, 0.1, -0.05, 0.2, -0.25]


def _row(root: Path, label: str, accs: list[float], settings: dict | None = None) -> None:
    for k, acc in zip(st.SEEDS, accs, strict=True):
        folder = root / st.run_dir(label) / f"seed{k}"
        folder.mkdir(parents=True, exist_ok=True)
        record = result_record(
            variant=label,
            seed=k,
            task="listops",
            test_accuracy=acc / 100,
            num_train_steps=st.STEPS,
            config_preset=(settings or st.SETTINGS)["preset"],
        )
        (folder / "result.json").write_text(json.dumps(record))
        (folder / "config.json").write_text(json.dumps(_config(settings or st.SETTINGS)))
        val = [
            {"split": "validation", "step": s, "accuracy": (acc - 1.0 * (s < st.STEPS)) / 100}
            for s in range(st.EVAL_EVERY, st.STEPS + 1, st.EVAL_EVERY)
        ]
        (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in val) + "\n")


def _pair(winner: str, loser: str, gain: float) -> Writer:
    def write(root: Path) -> None:
        _row(root, loser, BASE)
        _row(root, winner, [b + gain + j for b, j in zip(BASE, JITTER, strict=True)])

    return write


PAPER_CASES: dict[str, dict[str, tuple[Writer, str]]] = {
    "paper-table1-listops": {
        "reproduced": (_pair(st.CONVLUNA, st.LUNA, 7.0), REPRODUCED),
        "partly": (_pair(st.CONVLUNA, st.LUNA, 1.0), PARTLY),
        "not reproduced": (_pair(st.CONVLUNA, st.LUNA, 0.0), NOT_REPRODUCED),
    },
    "paper-vs-transformer": {
        "reproduced": (_pair(st.CONVLUNA, st.TRANSFORMER, 7.0), REPRODUCED),
        "partly": (_pair(st.CONVLUNA, st.TRANSFORMER, 1.0), PARTLY),
        "not reproduced": (_pair(st.CONVLUNA, st.TRANSFORMER, -1.0), NOT_REPRODUCED),
    },
}


def _claim(claim_id: str) -> registry.Claim:
    return registry.find("convluna", claim_id)[1][0]


@pytest.mark.parametrize("claim_id, branch", [(c, b) for c, branches in PAPER_CASES.items() for b in branches])
def test_each_branch_gives_its_verdict(tmp_path, claim_id, branch):
    write, expected = PAPER_CASES[claim_id][branch]
    write(tmp_path)
    assert _claim(claim_id).outcome(tmp_path).verdict == expected


def test_no_records_yet_before_any_run():
    for claim_id in PAPER_CASES:
        claim = _claim(claim_id)
        assert claim.registration is not None and claim.registration.first_form == rules.DATA
        assert not any((REPO / r).exists() for r in claim.records), "the study registered before any of its runs"
        outcome = claim.judge(REPO)
        assert outcome.verdict == INCOMPLETE and outcome.detail.startswith("no records yet")
        assert len(outcome.missing) == 2 * len(st.SEEDS)


def test_the_verdict_is_set_beside_the_structure_free_baseline_and_the_late_curve(tmp_path):
    _pair(st.CONVLUNA, st.LUNA, 7.0)(tmp_path)
    (tmp_path / st.BASELINE).parent.mkdir(parents=True)
    (tmp_path / st.BASELINE).write_text(json.dumps({"test_accuracy": 0.376}))
    outcome = _claim("paper-table1-listops").outcome(tmp_path)
    assert "the structure-free rule scores 37.6% on this test split" in outcome.detail
    assert "Luna-16 -0.4" in outcome.detail  # BASE's mean 37.2 - 37.6
    assert "validation gain over the last 2,500 steps ConvLuna-16 +1.00 (14 of 14 seeds rose)" in outcome.statistic


def test_a_record_of_another_scale_is_not_this_designs(tmp_path):
    _pair(st.CONVLUNA, st.LUNA, 7.0)(tmp_path)
    _row(tmp_path, st.LUNA, BASE, settings={**st.SETTINGS, "preset": "cpu", "data.max_len": 256})
    outcome = _claim("paper-table1-listops").outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE and any("preset='cpu'" in m for m in outcome.missing), outcome.missing


def test_seeds_are_the_reserved_ones_and_fresh():
    used = _committed_listops_seeds()
    assert used and not used & set(st.SEEDS)
    assert set(st.SEEDS) <= set(listops_paper.STUDY_SEEDS_RESERVED) and listops_paper.PILOT_SEED not in st.SEEDS


def test_seed_count_and_budget_follow_from_the_committed_records():
    sds = st.paired_sds()
    assert len(sds) == 4 and max(sds.values()) == pytest.approx(2.81, abs=0.005)
    assert st.seeds_needed(max(sds.values())) == len(st.SEEDS)
    rates = st.step_rates()
    assert set(rates) == set(st.ROWS) and rates[st.TRANSFORMER] < rates[st.LUNA]
    assert st.affordable_steps(rates, len(st.SEEDS)) == st.STEPS
    assert sum(st.row_minutes(rates, st.STEPS, len(st.SEEDS)).values()) <= st.ALLOWANCE_GPU_MINUTES
    # a design's planning table prints (the docstring quotes these numbers)
    assert "registered: 14 (310-323)" in st.power_table() and "registered: 12,500" in st.cost_table()


def test_programs_cover_every_row_and_seed_once_in_pairs_first():
    programs = st.programs()
    for label in st.ROWS:
        seeds = [k for row, group in programs if row == label for k in group]
        assert sorted(seeds) == list(st.SEEDS)
        assert {len(g) for row, g in programs if row == label} == {st.SEEDS_PER_PROGRAM[label]}
    assert [row for row, _ in programs[:2]] == [st.CONVLUNA, st.LUNA] and programs[-1][0] == st.TRANSFORMER


def test_commands_name_the_design_and_the_sweep_accepts_them():
    lines = st.commands()
    jobs = [line for line in lines if "gpu_call.sh sweep" in line]
    assert len(jobs) == len(st.programs()) and all(j.startswith("LRA_GIT_COMMIT=$(git rev-parse HEAD) ") for j in jobs)
    for field, value in st.SETTINGS.items():
        if field != "preset":
            assert all(f"--config.{field}={value}" in j for j in jobs)
    assert all("--preset paper" in j and f"NAME={st.NAME}" in j for j in jobs)
    label, seeds = st.programs()[0]
    args = shlex.split(st.sweep_arguments(label, seeds=seeds))
    out = subprocess.run(
        [sys.executable, "scripts/sweep.py", st.GRID, *args, "--group-seeds", "on", "--root", "runs/x", "--commands"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    train = [line for line in out.stdout.splitlines() if line.startswith("python -m lra.train")]
    assert len(train) == 1 and "listops_convluna.py:paper" in train[0] and "--config.seeds=310,311" in train[0]


def test_main_prints_the_commands_and_the_status(capsys):
    assert st.main(["--commands"]) == 0
    assert capsys.readouterr().out.splitlines() == st.commands()
    assert st.main(["--status"]) == 0
    assert "paper-table1-listops: incomplete (no records yet" in capsys.readouterr().out
    assert st.main(["--nonsense"]) == 2


@pytest.mark.slow
def test_a_program_stopped_by_its_budget_resumes_from_its_packed_state(tmp_path):
    """The study's first program through scripts/gpu_call.sh at smoke size (the smoke model and data; the
    study's grid, row, seed group and job name): stopped by its budget after some steps, its state archive
    unpacked into a fresh state folder (the next call's bare machine), the same call resumes at the step
    its checkpoint holds, not from the start. (Finishing and exporting: tests/test_gpu_call.py.)"""
    label, seeds = st.programs()[0]
    args = ["sweep", st.GRID, "--preset", "smoke", "--seeds", *map(str, seeds), "--variants", label,
            "--set", "num_train_steps=50000", "--set", "checkpoint_every=5", "--set", "eval_every=1000"]  # fmt: skip
    env = {**os.environ, "SMOKE": "1", "KIND": "cpu", "OUT": str(tmp_path / "out"), "LRA_DATA_DIR": str(tmp_path / "d"),
           "NAME": st.NAME, "PREPARE": "listops --max_len 64 --set min_len=8 --set num_train=160 --set num_val=32 "
           "--set num_test=32", "JOBS": "1"}  # fmt: skip

    def call(state: Path, budget: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "scripts/gpu_call.sh", *args], cwd=REPO, capture_output=True, text=True,
                              env={**env, "STATE": str(state), "BUDGET": budget}, timeout=900)  # fmt: skip

    first = call(tmp_path / "state", "200")  # past data, compile and some checkpoints, also on a loaded machine
    assert "runs stopped or done (exit 124" in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with tarfile.open(fileobj=io.BytesIO((tmp_path / "out" / "sweep_state_cpu.tgz").read_bytes())) as archive:
        archive.extractall(fresh, filter="data")
    latest = fresh.glob(f"sweeps/{st.NAME}/*/seed{seeds[0]}/checkpoints/latest/*")
    saved = [int(p.name) for p in latest if p.name.isdigit()]
    assert saved and max(saved) > 0, "the first call ended before its first checkpoint: give it a larger budget"
    call(fresh, "120")
    log = next((fresh / "logs" / st.NAME).glob("*.log")).read_text()
    assert f"resuming at step {max(saved)}" in log, log[-2000:]
