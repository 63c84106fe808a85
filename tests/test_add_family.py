"""A family added by the documented path (docs/adding_a_family.md): its module and one
``lra.attention.register`` call, nothing else. With no config file, benchmark list or sweep grid
edited, it keeps the attention contract, trains (``configs/listops.py:family=NAME``), is a case of
the training-step benchmark and a row of the ``lra_families`` sweep; the refactor guard
(tests/test_bf16.py's float32 golden) fails naming the command that writes its record, and passes
once written."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import pytest

import golden_records
from conftest import script_main
from lra import attention
from lra.attention.base import Attention, dense_heads, project_out, zero_padding
from lra.defaults import load_config_file
from lra.family_configs import CONFIGS, config_spec
from lra.training.runs import default_workdir
from lra_lab.bench import steps as step_bench
from lra_lab.experiments import sweep
from test_attention_contract import CHECKS

NAME = "mean_pool"


class MeanPoolAttention(Attention):
    """Every real position gets the mean of the real tokens' values, times ``scale`` (test-only):
    linear in N, padding-blind by its mask, no memory."""

    scale: float = 1.0  # a family option with its default: ``configs/listops.py:family=mean_pool,scale=2``

    @nn.compact
    def __call__(self, x, mask, memory=None, deterministic=True):
        del memory, deterministic
        v = dense_heads(self.num_heads, self.head_dim, "value", self.dtype)(x)  # B x N x H x Dh
        weights = mask[:, :, None, None].astype(v.dtype)
        mean = (v * weights).sum(1, keepdims=True) / jnp.maximum(weights.sum(1, keepdims=True), 1)
        y = project_out(self, self.scale * jnp.broadcast_to(mean, v.shape), x.shape[-1])
        return zero_padding(y, mask), None


@pytest.fixture
def toy():
    """The toy family registered for one test (the registry is the process's: removed after)."""
    family = attention.register(attention.Family(NAME, MeanPoolAttention, "MeanPool-x{scale}"))
    yield family
    attention.unregister(NAME)


def test_registration_is_all_a_family_needs(toy):
    assert attention.get(NAME) is MeanPoolAttention and toy.default_label() == "MeanPool-x1"
    assert config_spec("listops", NAME) == (CONFIGS / "listops.py", f"family={NAME}")
    config = load_config_file(CONFIGS / "text.py").get_config(f"family={NAME},cpu,scale=2")
    assert (config.task, config.model.attention, config.variant, config.preset) == ("text", NAME, "MeanPool-x2", "cpu")
    with pytest.raises(ValueError, match="already registered"):
        attention.register(toy)
    for check in CHECKS.values():  # the contract test's checks, as for every registered family
        check(NAME)


def test_toy_family_trains_end_to_end(toy, smoke_data_dir, tmp_path):
    from lra.train import train_and_evaluate

    config = load_config_file(CONFIGS / "listops.py").get_config(f"family={NAME},smoke")
    config.data_dir = str(smoke_data_dir)
    config.num_train_steps = config.eval_every = config.checkpoint_every = 2
    result = train_and_evaluate(config, tmp_path / "run")
    assert (result["attention"], result["variant"], result["num_train_steps"]) == (NAME, "MeanPool-x1", 2)
    assert default_workdir(config).parent.name == "listops_meanpool-x1_smoke"  # a whole float is an integer
    config = load_config_file(CONFIGS / "listops.py").get_config(f"family={NAME},smoke,scale=0.5")
    assert (config.variant, default_workdir(config).parent.name) == ("MeanPool-x0.5", "listops_meanpool-x0.5_smoke")
    assert 0.0 <= result["test_accuracy"] <= 1.0 and (tmp_path / "run" / "result.json").is_file()


@pytest.mark.slow  # a benchmark case in a child process
def test_toy_family_is_a_benchmark_case(toy):
    assert step_bench.families()[-1] == NAME and step_bench.label(NAME) == "MeanPool-x1"
    tiny = (
        ("model.num_layers", 1),
        ("model.emb_dim", 16),
        ("model.qkv_dim", 16),
        ("model.mlp_dim", 32),
        ("batch_size", 2),
    )
    case = step_bench.Case(NAME, 16, "float32", 1, steps=1, repeats=1, overrides=tiny)
    row = step_bench.measure(case)
    assert (row["status"], row["family"], row["loss_finite"]) == ("ok", NAME, True)
    assert row["flops_per_step"] > 0 and row["steps_per_second"] > 0


def test_toy_family_is_a_sweep_row(toy, capsys):
    runs = sweep.expand("lra_families", "smoke", seeds=[0])
    assert [r.variant.label for r in runs[:-1]] == [f.default_label() for f in attention.FAMILIES.values()][:-1]
    run = runs[-1]
    assert (run.variant.label, run.config_path, run.config_arg) == (
        "MeanPool-x1",
        CONFIGS / "listops.py",
        f"smoke,family={NAME}",
    )
    assert sweep.expected_steps(run) == 6  # builds the config and checks its label
    assert f"--config={CONFIGS / 'listops.py'}:smoke,family={NAME}" in run.command()
    assert script_main("sweep")(["lra_families", "--preset", "smoke", "--seeds", "0", "--list"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if "MeanPool-x1" in line]
    assert len(listed) == 1 and f"configs/listops.py:smoke,family={NAME}" in listed[0]


def test_toy_family_meets_the_refactor_guard(toy, tmp_path, monkeypatch):
    """tests/test_bf16.py's golden test run on the toy (the one a new family gets by default; its
    bfloat16 run is -m slow): with no golden record it fails, naming the command that writes one
    (docs/adding_a_family.md, step 4); with the record written, it passes."""
    from test_bf16 import test_float32_steps_match_their_golden_record as golden_test

    monkeypatch.setattr(golden_records, "GOLDEN", tmp_path)  # the toy's records stay out of tests/golden
    monkeypatch.delenv(golden_records.WRITE_ENV, raising=False)
    with pytest.raises(AssertionError, match=rf"no golden record for {NAME}'s .*LRA_WRITE_GOLDEN=1 .* -k {NAME}"):
        golden_test(NAME)
    monkeypatch.setenv(golden_records.WRITE_ENV, "1")
    golden_test(NAME)
    monkeypatch.delenv(golden_records.WRITE_ENV)
    golden_test(NAME)  # against the record just written: exact, on this machine
    assert (tmp_path / f"steps_{NAME}.json").is_file()
