"""lra_lab.diagnose memory end to end on a finished ConvLuna smoke run (2 blocks, memory statistics
logged): the files, the numbers against an independent recomputation, refusals."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.errors import EXIT_CORRUPT
from lra.train import train_and_evaluate
from lra.training.run_files import config_to_dict, write_json_atomic
from lra_lab import diagnose
from lra_lab.reports import diagnostics
from test_checkpoints import flip_bit

REPO = Path(__file__).resolve().parent.parent


def _config(path: str, arg: str):
    """What ``--config configs/<path>:<arg>`` gives lra.train."""
    spec = importlib.util.spec_from_file_location("cfg", REPO / "configs" / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = diagnose.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    """lra.train --config configs/listops_convluna.py:smoke --config.log_memory_stats=True
    --config.model.num_layers=2, then lra_lab.diagnose memory --workdir RUN --out OUT."""
    root = tmp_path_factory.mktemp("diagnose")
    config = _config("listops_convluna.py", "smoke")
    config.log_memory_stats = True
    config.model.num_layers = 2
    config.data_dir = str(root / "data")
    result = train_and_evaluate(config, root / "run")
    code, stdout, stderr = _main(["memory", "--workdir", str(root / "run"), "--out", str(root / "out")])
    assert code == 0, stderr
    return root, result, stdout, json.loads((root / "out" / "memory_stats.json").read_text())


@pytest.mark.slow  # trains two runs to diagnose (the laboratory's Figure 1 command)
def test_writes_every_file_and_reports_progress(diagnosed):
    root, result, stdout, doc = diagnosed
    out = root / "out"
    for name in ("memory_ConvLuna-16_seed0.png", "memory_curves.png", "memory_degradation.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert f"restored the best checkpoint: step {result['best_step']}" in stdout
    assert "probing the first 8 validation examples" in stdout
    assert f"wrote {out / 'memory_stats.json'}" in stdout
    md = (out / "memory_stats.md").read_text()
    command = f"python -m lra_lab.diagnose memory --workdir {root / 'run'} --out {out}"
    assert md.startswith(f"<!-- regenerate: {command} -->")
    assert f"step {result['best_step']}" in md and "the first 8 validation examples" in md
    row = next(line for line in md.splitlines() if line.startswith("| ConvLuna-16 |"))
    assert f"| {100 * result['test_accuracy']:.1f} |" in row and "| smoke | 0 | 16 |" in row
    assert row.count("|") - 1 == 7 + 3 + 2 * 4  # run info, initial memory, 2 blocks x 4 statistics

    (run,) = doc["runs"]
    assert doc["command"] == command
    assert run["run"] == "ConvLuna-16_seed0" and run["variant"] == "ConvLuna-16" and run["task"] == "listops"
    assert run["checkpoint_step"] == result["best_step"] and run["test_accuracy"] == result["test_accuracy"]
    assert run["memory_size"] == 16 and run["num_blocks"] == 2 and run["batch"]["examples"] == 8
    assert set(run["stats"]) == {
        f"{m}/{s}"
        for m in ("initial", "block0", "block1")
        for s in ("distinct_vectors", "effective_rank", "mean_pairwise_cosine")
    } | {"block0/packing_entropy", "block1/packing_entropy"}


def _effective_rank(m: np.ndarray) -> float:
    s = np.linalg.svd(m.astype(np.float64), compute_uv=False)
    p = s / s.sum()
    return float(np.exp(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0))))


def _mean_cosine(m: np.ndarray) -> float:
    u = m.astype(np.float64)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    c = u @ u.T
    return float(c[~np.eye(len(c), dtype=bool)].mean())


@pytest.mark.slow  # trains two runs to diagnose (the laboratory's Figure 1 command)
def test_numbers_equal_an_independent_recomputation(diagnosed):
    """Restore the checkpoint, run the model on the first 8 validation examples and recompute
    the statistics here with numpy, without lra.memory_stats."""
    from lra.data import load_task
    from lra.model import build_model
    from lra.training.checkpoints import Checkpoints
    from lra.training.run_files import load_run_config

    root, result, _, doc = diagnosed
    stats = doc["runs"][0]["stats"]
    config = load_run_config(root / "run")
    data = load_task(config)
    model = build_model(config.model, data.vocab_size, data.num_classes, data.dual)
    rows = data.validation.inputs[:8]
    inputs = jnp.asarray(rows[:, : int(np.max(data.validation.max_lengths[:8]))])
    params = jax.jit(lambda: model.init(jax.random.key(0), inputs[:1])["params"])()
    checkpoints = Checkpoints(root / "run")
    try:
        best = checkpoints.restore_best({"params": params, "step": jnp.zeros((), jnp.int32)})
    finally:
        checkpoints.close()
    assert int(best["step"]) == result["best_step"]
    apply = jax.jit(lambda p, x: model.apply({"params": p}, x, deterministic=True, mutable=["intermediates"])[1])
    state = apply(best["params"], inputs)
    encoder = state["intermediates"]["encoder"]

    initial = np.asarray(best["params"]["encoder"]["memory"])
    assert stats["initial/effective_rank"] == pytest.approx(_effective_rank(initial), rel=1e-6)
    assert stats["initial/mean_pairwise_cosine"] == pytest.approx(_mean_cosine(initial), rel=1e-5, abs=1e-7)
    for b in range(2):
        memory = np.asarray(encoder[f"block_{b}"]["memory"][0])  # 8 x 16 x 32
        assert memory.shape == (8, 16, 32)
        ranks = [_effective_rank(m) for m in memory]
        assert stats[f"block{b}/effective_rank"] == pytest.approx(np.mean(ranks), rel=1e-5)
        assert stats[f"block{b}/mean_pairwise_cosine"] == pytest.approx(
            np.mean([_mean_cosine(m) for m in memory]), rel=1e-4, abs=1e-6
        )
        attn = encoder[f"block_{b}"]["attention"]
        w = np.asarray(attn["packing_weights"][0], np.float64)  # B x H x M x J
        real = np.asarray(attn["packing_key_mask"][0])  # B x J
        ratios = []
        for i in range(len(w)):
            keys = int(real[i].sum())
            if keys > 1:
                p = w[i][..., real[i]]
                h = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), axis=-1)
                ratios.append(h / np.log(keys))
        assert stats[f"block{b}/packing_entropy"] == pytest.approx(float(np.mean(ratios)), rel=1e-4)

    # and the training loop's own record at the same step and batch
    logged = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    record = next(r for r in logged if r["split"] == "memory" and r["step"] == result["best_step"])
    for key, value in stats.items():
        assert value == pytest.approx(record[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow  # trains two runs to diagnose (the laboratory's Figure 1 command)
def test_refuses_a_transformer_run_naming_it(diagnosed, tmp_path):
    """A softmax run's workdir (config.json as lra.train writes it) is refused before any work,
    also when listed after a good run: exit code 2, nothing written."""
    root = diagnosed[0]
    transformer = tmp_path / "listops_transformer"
    transformer.mkdir()
    write_json_atomic(transformer / "config.json", config_to_dict(_config("listops_transformer.py", "smoke")))
    code, stdout, stderr = _main(
        ["memory", "--workdir", str(root / "run"), str(transformer), "--out", str(tmp_path / "out")]
    )
    assert code == 2
    assert stderr.startswith("error: ") and str(transformer) in stderr and "'softmax'" in stderr
    assert "memory family" in stderr and "Transformer" in stderr
    assert not (tmp_path / "out").exists() and sorted(p.name for p in transformer.iterdir()) == ["config.json"]


def test_refuses_a_memory_run_without_a_best_checkpoint(tmp_path):
    run = tmp_path / "early"
    run.mkdir()
    write_json_atomic(run / "config.json", config_to_dict(_config("listops_luna.py", "smoke")))
    code, _, stderr = _main(["memory", "--workdir", str(run)])
    assert code == 2 and str(run) in stderr and "no best checkpoint" in stderr
    assert not (run / "diagnostics").exists() and not (run / "checkpoints").exists()
    code, _, stderr = _main(["memory", "--workdir", str(tmp_path / "missing")])
    assert code == 2 and "no config.json" in stderr


def test_help_lists_the_options():
    for argv, expected in ((["--help"], ["memory"]), (["memory", "--help"], ["--workdir", "--out"])):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
            diagnose.main(argv)
        assert exit_info.value.code == 0
        assert all(word in out.getvalue() for word in expected)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exit_info:
        diagnose.main([])
    assert exit_info.value.code == 2


# --- issue 26 U11, U12 ----------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["config", "best_checkpoint"])
@pytest.mark.slow  # trains two runs to diagnose (the laboratory's Figure 1 command)
def test_damaged_run_is_one_error_line_with_exit_5(diagnosed, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(diagnosed[0] / "run", run)
    if damage == "config":
        (run / "config.json").write_text("")
        named = f"error: {run / 'config.json'} is not a valid run config"
    else:
        best = max((run / "checkpoints" / "best").iterdir(), key=lambda p: int(p.name))
        flip_bit(max((best / "state").rglob("*"), key=lambda p: p.stat().st_size), np.random.default_rng(0))
        named = f"error: checkpoint {best} is corrupt"
    code, _, stderr = _main(["memory", "--workdir", str(run), "--out", str(tmp_path / "out")])
    errors = [line for line in stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert code == EXIT_CORRUPT and len(errors) == 1 and errors[0].startswith(named), stderr


@pytest.mark.slow  # trains two runs to diagnose (the laboratory's Figure 1 command)
def test_torn_last_metrics_line_is_dropped(diagnosed, tmp_path, capsys):
    """The line a kill cuts short is dropped with a warning, as lra.train does (MetricsLog.read)."""
    run = tmp_path / "run"
    shutil.copytree(diagnosed[0] / "run", run, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    complete = diagnostics.memory_records(run)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 9, "split": "memo')
    assert diagnostics.memory_records(run) == complete and complete
    assert "cut short" in capsys.readouterr().err
