"""Every configs/<task>_<attention>.py: loads and validates with every preset (fast), and runs its
smoke preset end to end on fixtures in the upstream layouts (slow: run with ``-m slow``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from lra.attention import FAMILIES
from lra.defaults import TASKS
from lra.errors import InputError
from lra.family_configs import config_spec
from lra.training.checks import validate_config
from test_data_tasks import write_aan, write_aclimdb, write_cifar_pickles

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
CONFIG_FILES = sorted(p for p in CONFIGS.glob("*_*.py"))


def load(path: Path, arg: str = ""):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def test_config_files_are_registered_families_for_every_task_or_none():
    """A family's own thin files cover every task or none (a family without them trains through
    configs/<task>.py:family=NAME); no file names an unregistered family."""
    stems = {f.stem: name for name, f in FAMILIES.items()}
    names = {p.stem for p in CONFIG_FILES}
    assert {p.stem.split("_", 1)[1] for p in CONFIG_FILES} <= set(stems)
    for stem in {p.stem.split("_", 1)[1] for p in CONFIG_FILES}:
        assert {f"{t}_{stem}" for t in TASKS} <= names, f"{stems[stem]}: config files for some tasks only"
    assert all((CONFIGS / f"{t}.py").is_file() for t in TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_generic_task_config_builds_each_family_as_its_own_file(task):
    """configs/<task>.py:family=NAME,OPTIONS is configs/<task>_<family>.py:OPTIONS, field for field."""
    for name in FAMILIES:
        own, first = config_spec(task, name)
        assert first == "" and own.is_file()
        for options in ("", "cpu", "smoke") + (("cpu,mem=1,reference",) if FAMILIES[name].uses_memory else ()):
            generic = load(CONFIGS / f"{task}.py", ",".join(filter(None, [f"family={name}", options])))
            assert generic.to_dict() == load(own, options).to_dict(), (task, name, options)
    with pytest.raises(InputError, match="family=NAME"):
        load(CONFIGS / f"{task}.py", "cpu")
    with pytest.raises(InputError, match="unknown attention 'nope'"):
        load(CONFIGS / f"{task}.py", "family=nope")


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("preset", ["", "cpu", "smoke"])
def test_config_loads_and_validates(path, preset):
    config = load(path, preset)
    task, attention = path.stem.split("_", 1)
    assert config.task == task
    assert config.model.attention == ("softmax" if attention == "transformer" else attention)
    assert config.preset == (preset or "paper")
    validate_config(config)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_paper_scale_model_builds(path):
    # The paper-scale config's model traces (abstract shapes only, a short input): a family option
    # that contradicts the task's widths fails here, not on the GPU it was meant for
    # (configs/pathfinder_convluna.py once asked ConvLuna's shared W^K for QKV 64 under width 128).
    import jax
    import numpy as np

    from lra.model import build_model

    config = load(path, "")
    config.model.num_layers = 1  # every block is the same module: one shows a contradiction
    dual = config.task == "matching"
    model = build_model(config.model, vocab_size=260, num_classes=10, dual=dual)
    sample = np.zeros((1, 2, 16) if dual else (1, 16), np.int32)
    jax.eval_shape(lambda: model.init(jax.random.key(0), sample))


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


# listops_convluna's is -m slow, as is the same run through docs/reference.md:9's block (test_doc_commands.py):
# text_luna's covers the :reference path end to end through lra.train in the default suite.
@pytest.mark.parametrize("name", [pytest.param("listops_convluna", marks=pytest.mark.slow), "text_luna"])
def test_reference_smoke_runs_end_to_end(name, upstream_data, tmp_path):
    """Two of the slow set's :reference runs (text_luna's in the fast suite; the rest: -m slow)."""
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
