"""Golden runs: what each family computes stays the same, to the bit.

The guard for refactors that must change nothing computed (issue 40), at two levels:

* every registered family's float32 training losses over a few smoke steps of the bare model and
  optimizer (computed by ``tests/test_bf16.py``, checked here by :func:`assert_golden_steps` against
  ``tests/golden/steps_<family>.json``): cheap, so every family runs in CI;
* whole ``lra.train`` smoke runs (data, schedule, loop, evaluation, checkpoints, result): every
  metric logged (wall-clock fields dropped) and the result's accuracies against
  ``tests/golden/<family>.json``. Two families run in CI (the Transformer and ConvLuna, a memory
  family); the rest are ``-m slow`` (about 18 CPU-seconds each).

Floats go through JSON as ``repr`` writes them, so a change in the last bit fails. The records are
tied to jax/jaxlib's CPU backend and this machine's CPU; after a deliberate numeric change (or a jax
upgrade), regenerate them and say why in the commit:

    LRA_WRITE_GOLDEN=1 python -m pytest -q -m "slow or not slow" tests/test_golden.py tests/test_bf16.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lra import attention
from lra.defaults import make_config

GOLDEN = Path(__file__).parent / "golden"
RESULT_FIELDS = ("best_val_accuracy", "best_step", "test_accuracy", "test_loss", "num_params")
WALL_CLOCK = ("steps_per_second",)


def _run(family: str, data_dir: Path, workdir: Path) -> dict:
    from lra.train import train_and_evaluate

    config = make_config("listops", family, "smoke")
    config.data_dir = str(data_dir)
    result = train_and_evaluate(config, workdir)
    metrics = [
        {k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK}
        for line in (workdir / "metrics.jsonl").read_text().splitlines()
    ]
    return {"jax": __import__("jax").__version__, "metrics": metrics, "result": {k: result[k] for k in RESULT_FIELDS}}


IN_CI = ("softmax", "convluna")


def _write_golden() -> bool:
    return os.environ.get("LRA_WRITE_GOLDEN") == "1"


def assert_golden_steps(family: str, losses: list[float]) -> None:
    """The bare model's float32 smoke losses equal ``tests/golden/steps_<family>.json`` exactly."""
    path = GOLDEN / f"steps_{family}.json"
    if _write_golden():
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps({"jax": __import__("jax").__version__, "losses": losses}, indent=1) + "\n")
    assert path.exists(), f"no golden record for {family}'s steps: LRA_WRITE_GOLDEN=1 (see tests/test_golden.py)"
    assert losses == json.loads(path.read_text())["losses"], f"{family}: float32 step losses differ from {path}"


@pytest.mark.parametrize(
    "family", [f if f in IN_CI else pytest.param(f, marks=pytest.mark.slow) for f in attention.ATTENTIONS]
)
def test_smoke_run_matches_its_golden_record(family, smoke_data_dir, tmp_path):
    got = _run(family, smoke_data_dir, tmp_path / "run")
    path = GOLDEN / f"{family}.json"
    if _write_golden():
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert path.exists(), f"no golden record for {family}: LRA_WRITE_GOLDEN=1 python -m pytest tests/test_golden.py"
    want = json.loads(path.read_text())
    assert got["result"] == want["result"], f"{family}: result differs from {path}"
    assert got["metrics"] == want["metrics"], f"{family}: logged metrics differ from {path}"
