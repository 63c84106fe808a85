"""Golden runs: what each family computes stays the same, to the bit.

The guard for refactors that must change nothing computed (issue 40), at two levels:

* every registered family's float32 training losses over a few smoke steps of the bare model and
  optimizer (computed by ``tests/test_bf16.py``, checked here by :func:`assert_golden_steps` against
  ``tests/golden/steps_<family>.json``): cheap, so every family runs in CI;
* whole ``lra.train`` smoke runs (data, schedule, loop, evaluation, checkpoints, result): every
  metric logged (wall-clock fields dropped) and the result's accuracies against
  ``tests/golden/<family>.json``. Two families run in CI (the Transformer and ConvLuna, a memory
  family); the rest are ``-m slow`` (about 18 CPU-seconds each).

Floats go through JSON as ``repr`` writes them. On the machine that wrote a record (its
fingerprint: jax/jaxlib, the CPU and its instruction set, XLA_FLAGS) a change in the last bit
fails; on any other machine floats are compared within a tolerance that a real numeric change
still exceeds (tests/golden_records.py says which, and why; the run's summary names the mode).
After a deliberate numeric change (or a jax upgrade), regenerate the records and say why in the
commit:

    LRA_WRITE_GOLDEN=1 python -m pytest -q -m "slow or not slow" tests/test_golden.py tests/test_bf16.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import golden_records
from lra import attention
from lra.defaults import make_config

RESULT_FIELDS = ("best_val_accuracy", "best_step", "test_accuracy", "test_loss", "num_params")
WALL_CLOCK = ("steps_per_second",)


def _run(family: str, data_dir: Path, workdir: Path) -> dict:
    from lra.train import train_and_evaluate

    config = make_config("listops", family, "smoke")
    config.data_dir = str(data_dir)
    return _record(workdir, train_and_evaluate(config, workdir))


def _record(workdir: Path, result: dict) -> dict:
    """What a golden record holds of a finished run: its logged metrics and result fields."""
    metrics = [
        {k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK}
        for line in (workdir / "metrics.jsonl").read_text().splitlines()
    ]
    return {"metrics": metrics, "result": {k: result[k] for k in RESULT_FIELDS}}


IN_CI = ("softmax", "convluna")


@pytest.mark.parametrize(
    "family", [f if f in IN_CI else pytest.param(f, marks=pytest.mark.slow) for f in attention.ATTENTIONS]
)
def test_smoke_run_matches_its_golden_record(family, smoke_data_dir, tmp_path, request):
    if family == "softmax":  # conftest's shared finished smoke run is this run (listops softmax smoke, same data)
        got = _record(*request.getfixturevalue("finished_smoke_run"))
    else:
        got = _run(family, smoke_data_dir, tmp_path / "run")
    golden_records.check(golden_records.GOLDEN / f"{family}.json", got, "smoke run's result and logged metrics", family)


def test_tolerance_fails_a_real_change():
    """The tolerance other machines get is not a pass for everything: this machine's float32 smoke
    losses of the Transformer are within it of the record (exactly equal on the record's machine),
    a loss computed 1e-3 larger (relative) or from another initialisation is not."""
    from test_bf16 import float32_losses

    want = json.loads((golden_records.GOLDEN / "steps_softmax.json").read_text())["losses"]
    assert golden_records.differences(float32_losses("softmax"), want, exact=False) == []
    for altered in (dict(loss_scale=1 + 1e-3), dict(init_seed=3)):
        got = float32_losses("softmax", **altered)
        problems = golden_records.differences(got, want, exact=False)
        assert len(problems) == len(want), f"{altered}: {got} passes the tolerance against {want}"


def test_modes():
    """Exact only on the record's machine; a record of another machine, or of none, is compared
    within the tolerance; the tolerance passes last-bit differences and fails a 1e-3 change."""
    here = golden_records.fingerprint()
    assert golden_records.mode_for(here)[0] == "exact"
    others = (("isa", here["isa"][:-1] or ["avx"]), ("jaxlib", "0.0.1"), ("xla_flags", ["--xla_cpu_max_isa=SSE3"]))
    for key, other in others:  # one fewer instruction-set flag, another jaxlib, another XLA_FLAGS
        mode, why = golden_records.mode_for({**here, key: other})
        assert mode == "tolerance" and key in why
    assert golden_records.mode_for(None)[0] == "tolerance"
    ulp = [2.3708436489105225, {"accuracy": 0.125, "step": 3}]
    assert golden_records.differences([2.3708438873291016, {"accuracy": 0.125, "step": 3}], ulp, exact=False) == []
    assert golden_records.differences([2.3708438873291016, {"accuracy": 0.125, "step": 3}], ulp, exact=True)
    assert golden_records.differences([2.3708436489105225 * 1.001, {"accuracy": 0.125, "step": 3}], ulp, exact=False)
    assert golden_records.differences([2.3708436489105225, {"accuracy": 0.125, "step": 4}], ulp, exact=False)


def test_a_missing_record_names_the_command_that_writes_it(tmp_path, monkeypatch):
    monkeypatch.delenv(golden_records.WRITE_ENV, raising=False)
    with pytest.raises(AssertionError, match=r"LRA_WRITE_GOLDEN=1 .* -k toy") as e:
        golden_records.check(tmp_path / "steps_toy.json", {"losses": [1.0]}, "float32 step losses", "toy")
    assert "docs/adding_a_family.md" in str(e.value)
    monkeypatch.setenv(golden_records.WRITE_ENV, "1")
    golden_records.check(tmp_path / "steps_toy.json", {"losses": [1.0]}, "float32 step losses", "toy")
    assert json.loads((tmp_path / "steps_toy.json").read_text())["machine"] == golden_records.fingerprint()
    monkeypatch.delenv(golden_records.WRITE_ENV)
    golden_records.check(tmp_path / "steps_toy.json", {"losses": [1.0]}, "float32 step losses", "toy")
    with pytest.raises(AssertionError, match="mode exact"):
        golden_records.check(tmp_path / "steps_toy.json", {"losses": [1.0 + 1e-12]}, "float32 step losses", "toy")


@pytest.mark.slow  # a pytest child that compiles the Transformer's steps anew (about 30 CPU-seconds)
@pytest.mark.parametrize("isa", ["AVX2", "SSE4_2"])
def test_a_golden_passes_under_another_instruction_set(isa):
    """The guard on another machine: XLA capped at another instruction set (its float32 results
    differ in the last bits) passes the Transformer's golden steps in tolerance mode, and says so."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", golden_records.WRITE_ENV)}
    env.update(XLA_FLAGS=f"--xla_cpu_max_isa={isa}", PYTHONPATH=str(repo))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_bf16.py", "-k", "softmax"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "golden records: 0 checked exact" in out.stdout and "1 within rtol" in out.stdout, out.stdout[-1500:]
