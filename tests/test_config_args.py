"""Issue 40 point 2: one override grammar (lra.config_args), typed by the config, at every entry point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lra.errors import InputError

REPO = Path(__file__).resolve().parent.parent
CONVLUNA = f"{REPO}/configs/listops_convluna.py"


def _train(text: str) -> object:
    from lra.config_args import config_from_args, split_config_args

    spec, overrides, _ = split_config_args(["lra.train", f"--config={CONVLUNA}:smoke", text])
    assert spec is not None
    return config_from_args(spec, overrides)


def _train_short_form(text: str) -> object:
    from lra.config_args import config_from_args

    return config_from_args(f"{CONVLUNA}:smoke,{text.split('attention_kwargs.', 1)[1]}")


def _evaluate(text: str) -> object:
    from lra.config_args import FAMILY_PREFIX, split_config_args
    from lra.evaluate import parse_options

    _, overrides, _ = split_config_args(["lra.evaluate", text])
    return parse_options("convluna", [f"{d[len(FAMILY_PREFIX) :]}={v}" for d, v in overrides])


def _preflight(text: str) -> object:
    from lra.config_args import split_config_args
    from lra_lab.preflight.__main__ import config_overrides

    spec, fields, _ = split_config_args(["--config", f"{CONVLUNA}:smoke", text])
    return config_overrides(spec, fields, [])


def _bench(text: str) -> object:
    from lra_lab.bench.attention import parse_family

    return parse_family(f"convluna:{text.split('attention_kwargs.', 1)[1]}")


ENTRY_POINTS: dict[str, Callable[[str], object]] = {
    "lra.train": _train,
    "lra.train short form": _train_short_form,
    "lra.evaluate": _evaluate,
    "lra_lab.preflight": _preflight,
    "bench": _bench,
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("option", ["mem=1.5", "memory_size=1.5"])
def test_a_float_memory_size_is_refused_by_the_family_type_at_every_entry_point(entry, option):
    key, value = option.split("=")
    with pytest.raises(InputError, match=r"memory_size must be an integer, got 1\.5"):
        ENTRY_POINTS[entry](f"--config.model.attention_kwargs.{key}={value}")
    ENTRY_POINTS[entry](f"--config.model.attention_kwargs.{key}=8")  # the same spelling with an int is fine


def test_an_unknown_field_names_the_nearest_fields():
    with pytest.raises(InputError, match=r"data has no field 'num_trian'; did you mean data\.num_train"):
        _train("--config.data.num_trian=5")
    with pytest.raises(InputError, match="did you mean model.max_len"):
        _preflight("--config.model.max_lem=5")


def test_both_spellings_of_a_family_option_build_one_config():
    from lra.config_args import config_from_args

    as_field = config_from_args(CONVLUNA, [("model.attention_kwargs.mem", "8"), ("learning_rate", "0.1")])
    short = config_from_args(f"{CONVLUNA}:mem=8", [("learning_rate", "0.1")])
    assert as_field.to_dict() == short.to_dict() and short.variant == "ConvLuna-8"
    assert short.learning_rate == 0.1 and isinstance(short.learning_rate, float)


def test_old_spellings_expand_to_the_same_override():
    from lra.config_args import expand_options, split_config_args

    assert expand_options(["data.num_train = 100"]) == [("data.num_train", "100")]
    assert split_config_args(["x", "--config.data.num_train", "100", "--other"]) == (
        None,
        [("data.num_train", "100")],
        ["x", "--other"],
    )
    with pytest.raises(InputError, match="needs a value"):
        split_config_args(["x", "--config.seed"])


def test_the_sweep_reads_config_fields_as_its_old_set_spelling():
    from lra_lab.experiments.sweep_cli import make_parser, select

    def runs(*extra: str) -> list[object]:
        return select(make_parser().parse_args(["convluna_table1", "--preset", "cpu", "--commands", *extra]))[0]

    old = runs("--set", "num_train_steps=300", "--set", "data.num_train=100")
    assert runs("--config.num_train_steps=300", "--config.data.num_train", "100") == old
    assert runs("--set", "num_train_steps=300", "--config.data.num_train=100") == old


@pytest.mark.parametrize(
    "dotted, value",
    [("batch_size", 4), ("learning_rate", 1e-3), ("data.buckets", (64, 128)), ("model.dtype", "bfloat16")]
    + [("data.val_stratify", False), ("model.pre_pool_norm", True), ("seeds", (0, 1, 2)), ("learning_rate", 0.1)],
)
def test_a_typed_value_set_again_through_its_text_is_itself(dotted, value):
    """value_text is apply_override's inverse (the training-step benchmark keeps typed values)."""
    from lra.config_args import field_value
    from lra.config_fields import value_text
    from lra.defaults import apply_override, task_config

    config = task_config("listops")
    apply_override(config, dotted, value_text(value))
    assert field_value(config, dotted) == value and type(field_value(config, dotted)) is type(value)


@pytest.mark.parametrize(
    "arg, named",
    [
        ("--config.seed=3", "--config.seed is not for a sweep: choose seeds with --seeds"),
        ("--config.num_train_steps=abc", "--config.num_train_steps=abc: num_train_steps must be an integer"),
    ],
)
def test_the_sweeps_errors_name_the_config_spelling(arg, named, capsys, tmp_path):
    from conftest import script_main

    code = script_main("sweep")(["convluna_table1", "--preset", "cpu", arg, "--root", str(tmp_path / "r"), "--list"])
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and named in errors[0]  # one line, no usage block (issue 52 SO1)
    assert code == 2 and "--set" not in errors[0]
