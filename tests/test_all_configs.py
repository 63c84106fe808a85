"""Every configs/<task>_<attention>.py: loads and validates with every preset (fast), and runs its
smoke preset end to end on fixtures in the upstream layouts (slow: run with ``-m slow``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from lra.attention import ATTENTIONS
from lra.defaults import TASKS
from lra.training.validation import validate_config
from test_data_tasks import write_aan, write_aclimdb, write_cifar_pickles

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
CONFIG_FILES = sorted(p for p in CONFIGS.glob("*_*.py"))


def load(path: Path, arg: str = ""):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def test_every_task_and_attention_has_a_config():
    names = {p.stem for p in CONFIG_FILES}
    families = {"transformer" if a == "softmax" else a for a in ATTENTIONS}
    missing = {f"{t}_{a}" for t in TASKS for a in families} - names
    assert not missing, f"configs missing: {sorted(missing)}"


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("preset", ["", "cpu", "smoke"])
def test_config_loads_and_validates(path, preset):
    config = load(path, preset)
    task, attention = path.stem.split("_", 1)
    assert config.task == task
    assert config.model.attention == ("softmax" if attention == "transformer" else attention)
    assert config.preset == (preset or "paper")
    validate_config(config)


@pytest.fixture(scope="module")
def upstream_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    write_aclimdb(root)
    write_aan(root)
    write_cifar_pickles(root)
    return root


MEMORY_CONFIG_FILES = [p for p in CONFIG_FILES if p.stem.endswith("luna")]
SMOKE_RUNS = [(p, "smoke") for p in CONFIG_FILES] + [(p, "smoke,reference") for p in MEMORY_CONFIG_FILES]


@pytest.mark.slow
@pytest.mark.parametrize("path,arg", SMOKE_RUNS, ids=lambda v: getattr(v, "stem", v))
def test_smoke_preset_runs_end_to_end(path, arg, upstream_data, tmp_path):
    _smoke_run(path, arg, upstream_data, tmp_path)


@pytest.mark.parametrize("name", ["listops_convluna", "text_luna"])
def test_reference_smoke_runs_end_to_end(name, upstream_data, tmp_path):
    """Two of the slow set's :reference runs, in the fast suite (the rest: -m slow)."""
    _smoke_run(CONFIGS / f"{name}.py", "smoke,reference", upstream_data, tmp_path)


def _smoke_run(path, arg, upstream_data, tmp_path):
    from lra.train import train_and_evaluate

    config = load(path, arg)
    config.data_dir = str(upstream_data)
    config.num_train_steps = 2
    config.eval_every = config.checkpoint_every = 2
    result = train_and_evaluate(config, tmp_path / "run")
    assert result["num_train_steps"] == 2 and 0.0 <= result["test_accuracy"] <= 1.0
    assert (tmp_path / "run" / "result.json").is_file()
