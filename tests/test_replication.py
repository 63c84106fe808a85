"""lra_lab.reproduce.replication: registered judges read a replication's records, unchanged, and compare
seed by seed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lra_lab.reproduce import registry, replication

REGISTERED = "results/runs/convluna_listops_confirm"
CLAIM = "confirm-table1-listops"
LUNA = "listops_luna-16-reference"


def _claim() -> registry.Claim:
    return registry.find("convluna", CLAIM)[1][0]


def _copy(tmp_path: Path) -> Path:
    out = tmp_path / "replica"
    shutil.copytree(registry.REPO / REGISTERED, out, ignore=shutil.ignore_patterns("tensorboard", "checkpoints"))
    return out


def _no_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The records name the 96k-example split, whose structure-free baseline would generate it (minutes)."""
    monkeypatch.setattr(replication, "structure_free", lambda _: (None, None))


def test_a_copy_of_the_registered_runs_gets_the_registered_verdict_and_zero_differences(tmp_path: Path) -> None:
    replica = _copy(tmp_path)
    outcome = replication.judge_on([_claim()], REGISTERED, replica)[CLAIM]
    assert outcome == _claim().outcome(registry.REPO)
    rows = {r["row"]: r for r in replication.compare_rows(registry.REPO / REGISTERED, replica)}
    assert rows[LUNA]["mean_difference"] == 0.0
    assert rows[LUNA]["common_seeds"] == list(range(10, 20))


def test_the_verdict_and_the_differences_come_from_the_replication(tmp_path: Path) -> None:
    replica = _copy(tmp_path)
    for path in (replica / LUNA).glob("seed*/result.json"):  # Luna-16 now far ahead of ConvLuna-16
        result = json.loads(path.read_text())
        result["test_accuracy"] = 0.9 + result["seed"] / 1000
        path.write_text(json.dumps(result))
        metrics = path.parent / "metrics.jsonl"  # the run's own log says the same (issue 52: they must agree)
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        for line in lines:
            if line["split"] == "test":
                line["accuracy"] = result["test_accuracy"]
        metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    outcome = replication.judge_on([_claim()], REGISTERED, replica)[CLAIM]
    assert outcome.verdict == registry.NOT_REPRODUCED
    assert outcome.verdict != _claim().outcome(registry.REPO).verdict
    row = {r["row"]: r for r in replication.compare_rows(registry.REPO / REGISTERED, replica)}[LUNA]
    assert row["mean_difference"] > 50
    text = replication.render("a test", {CLAIM: outcome}, [row], "cmd")
    assert "| confirm-table1-listops | not reproduced" in text and f"| {LUNA} |" in text


def test_main_writes_both_files_and_refuses_unknown_or_foreign_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_baseline(monkeypatch)
    replica = _copy(tmp_path)
    args = ["--paper", "convluna", "--registered", REGISTERED, "--replication", str(replica), "--label", "copy"]
    assert replication.main([*args, "--claims", CLAIM, "--out", str(tmp_path / "out")]) == 0
    saved = json.loads((tmp_path / "out" / "replication.json").read_text())
    assert saved["outcomes"][CLAIM]["verdict"] == _claim().outcome(registry.REPO).verdict
    assert (tmp_path / "out" / "replication.md").read_text().startswith("# Registered claims judged")
    capsys.readouterr()
    assert replication.main([*args, "--claims", "no-such-claim"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert replication.main([*args, "--claims", "table1-listops"]) == 2  # its records live elsewhere
    assert "read no record under" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    assert replication.main([*args, "--claims", CLAIM, "--out", str(tmp_path / "a_file" / "out")]) == 4
    assert capsys.readouterr().err.startswith("error: ")


def test_a_damaged_or_foreign_record_is_named_and_never_averaged(tmp_path: Path) -> None:
    replica = _copy(tmp_path)
    (replica / LUNA / "seed10" / "result.json").write_text("{ damaged")
    foreign = json.loads((replica / LUNA / "seed12" / "result.json").read_text())
    (replica / LUNA / "seed11" / "result.json").write_text(json.dumps(foreign))  # seed 12's record in seed 11
    row = {r["row"]: r for r in replication.compare_rows(registry.REPO / REGISTERED, replica)}[LUNA]
    assert row["common_seeds"] == list(range(12, 20))
    assert len(row["skipped"]) == 2 and "seed11" in row["skipped"][1] and "holds seed 12" in row["skipped"][1]
    assert "Records skipped" in replication.render("x", {}, [row], "cmd")


def test_the_report_states_the_structure_free_baseline_of_the_replications_data(
    tmp_path: Path, finished_smoke_run: tuple[Path, dict]
) -> None:
    """Issue 35 item 2: a ListOps replication report states the trivial baseline of its records'
    data (here a smoke run's, put in every record: the registered 96k split would take minutes)."""
    import ml_collections

    from lra.reports import listops_baseline as lb

    replica = _copy(tmp_path)
    smoke = json.loads((finished_smoke_run[0] / "config.json").read_text())
    for path in replica.glob("*/seed*/config.json"):
        path.write_text(
            json.dumps({**json.loads(path.read_text()), "data": smoke["data"], "data_dir": smoke["data_dir"]})
        )
    args = ["--paper", "convluna", "--registered", REGISTERED, "--replication", str(replica), "--label", "copy"]
    assert replication.main([*args, "--claims", CLAIM, "--out", str(tmp_path / "out")]) == 0
    saved = json.loads((tmp_path / "out" / "replication.json").read_text())
    expected = lb.for_config(ml_collections.ConfigDict(smoke))
    assert saved["listops_structure_free_baseline"] == expected
    assert f"Reference: {lb.line(expected, 'test')}" in (tmp_path / "out" / "replication.md").read_text()
    for path in replica.glob("*/seed*/config.json"):  # records that name no data: no sentence, no guess
        path.unlink()
    assert replication.main([*args, "--claims", CLAIM, "--out", str(tmp_path / "none")]) == 0
    assert "structure-free" not in (tmp_path / "none" / "replication.md").read_text()
