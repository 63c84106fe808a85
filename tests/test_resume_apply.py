"""lra.training.checkpoints.apply: what happens to an existing result.json before a run goes on."""

from __future__ import annotations

import json

from lra.training import checkpoints
from lra.training.checkpoints import Checkpoints


def _plan(problem: str | None) -> checkpoints.ResumePlan:
    return checkpoints.ResumePlan(step=None, damaged=[], result=None, result_problem=problem)


def test_a_valid_result_is_kept_in_place_when_the_run_goes_on_from_an_earlier_checkpoint(tmp_path):
    """result_problem None with no result to report: the final checkpoint fell back; nothing is moved."""
    (tmp_path / "result.json").write_text(json.dumps({"num_train_steps": 40}))
    checkpoints.apply(_plan(None), tmp_path, Checkpoints(tmp_path, primary=True))
    assert json.loads((tmp_path / "result.json").read_text()) == {"num_train_steps": 40}


def test_a_shorter_runs_result_is_kept_under_its_step_count_and_a_damaged_one_set_aside(tmp_path, capsys):
    (tmp_path / "result.json").write_text(json.dumps({"num_train_steps": 40}))
    checkpoints.apply(_plan("num_train_steps is 40, not 80"), tmp_path, Checkpoints(tmp_path, primary=True))
    assert not (tmp_path / "result.json").exists()
    assert json.loads((tmp_path / "result_40steps.json").read_text()) == {"num_train_steps": 40}
    (tmp_path / "result.json").write_text("{not json")
    checkpoints.apply(_plan("not valid JSON"), tmp_path, Checkpoints(tmp_path, primary=True))
    assert (tmp_path / "result.json.corrupt").read_text() == "{not json"
    assert "is not a valid result (not valid JSON)" in capsys.readouterr().err
