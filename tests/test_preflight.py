"""lra_lab.preflight: targets, verdicts, the CPU target end to end (smoke scale), the cache, bad input;
the TPU target when libtpu is importable (set LRA_PREFLIGHT_PYTHON to a venv that has it) and the
GPU target when the CUDA plugin is (LRA_PREFLIGHT_GPU_PYTHON, with LRA_PREFLIGHT_GPU_SPECS set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from lra_lab.preflight import estimate, targets
from lra_lab.preflight.__main__ import main
from lra_lab.preflight.check import preflight

PYTHON = os.environ.get("LRA_PREFLIGHT_PYTHON", sys.executable)
GPU_PYTHON = os.environ.get("LRA_PREFLIGHT_GPU_PYTHON", PYTHON)


def _has(module: str, python: str = PYTHON) -> bool:
    code = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def test_targets_parse_and_unknown_lists_known():
    assert targets.parse("v5e:2x2").devices == 4
    assert targets.parse("v4:2x2x1").chip.chip_config_name == "megacore"
    assert targets.parse("h100x8").devices == 8 and targets.parse("h100x8").kind == "gpu"
    assert targets.parse("a100-40gb").chip.memory_bytes == 40 * 10**9
    with pytest.raises(ValueError, match="unknown target 'tpu9'.*v5e:2x2.*h100"):
        targets.parse("tpu9")


def test_unknown_target_and_missing_config_are_one_error_line(capsys):
    assert main(["--config", "configs/listops_convluna.py:smoke", "--target", "v99:2x2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown target 'v99:2x2'") and "v5e:2x2" in err[0]
    assert main(["--config", "configs/listops_convlunaa.py", "--target", "cpu"]) == 2
    assert "--config configs/listops_convlunaa.py: no such file; did you mean configs/listops_convluna.py" in (
        capsys.readouterr().err
    )


def test_a_size_no_target_holds_is_one_line_before_compiling(capsys):
    """Issue 52 PF2: max_len=1e9 compiled ~60 s, then "cannot tell" with a C++ overflow message."""
    import time

    start = time.perf_counter()
    big = ["--config.model.max_len=1000000000", "--config.data.max_len=1000000000"]
    assert main(["--config", "configs/listops_convluna.py:smoke", "--target", "cpu", *big]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "position table alone" in err[0] and "lower config.model.max_len" in err[0]
    assert time.perf_counter() - start < 30  # no compile


@pytest.mark.skipif(_has("jax_cuda12_plugin"), reason="the CUDA plugin is installed here")
def test_missing_compiler_names_the_extra(capsys):
    assert main(["--config", "configs/listops_convluna.py:smoke", "--target", "h100"]) == 2
    assert 'pip install -e ".[preflight-gpu]"' in capsys.readouterr().err


def test_verdict_does_not_fit_suggests_a_batch_and_bf16():
    target = targets.parse("v5e:2x2")
    gib = 1024**3
    result = dict(
        status="ok",
        dtype="float32",
        global_batch=32,
        devices=4,
        memory=dict(argument=1 * gib, output=1 * gib, temp=30 * gib, generated_code=0, alias=1 * gib, total=31 * gib),
    )
    verdict, detail = estimate.verdict(result, target, target.chip.memory_bytes)
    assert verdict == "does not fit"
    assert "per-device batch of <= 3" in detail and "bfloat16" in detail and ">= 9 devices" in detail
    result["memory"]["total"] = 8 * gib
    assert estimate.verdict(result, target, target.chip.memory_bytes)[0] == "fits"
    assert (
        estimate.verdict(
            dict(status="error", stage="compilation", error="RESOURCE_EXHAUSTED: hbm", resource_exhausted=True),
            target,
            None,
        )[0]
        == "does not fit"
    )
    # the TPU compiler's own numbers (as libtpu 0.0.42.1 words them) give the fixes
    error = (
        "JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
        "temporaries (20.37G) exceeds available HBM (15.75G)."
    )
    verdict, detail = estimate.verdict(
        dict(
            status="error",
            stage="compilation",
            error=error,
            resource_exhausted=True,
            global_batch=32,
            devices=4,
            dtype="float32",
        ),
        target,
        None,
    )
    assert verdict == "does not fit" and "temporaries need 20.37G of 15.75G" in detail
    assert "per-device batch of <= 5" in detail and "bfloat16" in detail and ">= 6 devices" in detail


def test_cpu_target_end_to_end_and_cache(tmp_path, monkeypatch):
    start = time.perf_counter()
    r = preflight("configs/listops_convluna.py:smoke", "cpu", measure_steps=2, cache_dir=tmp_path, quiet=True)
    first = time.perf_counter() - start
    assert r["status"] == "ok" and not r["cached"], r
    assert r["verdict"] == "fits"
    assert r["num_params"] > 1000 and r["memory"]["total"] > 0 and r["cost"]["flops"] > 0
    assert r["measured"]["step_seconds_median"] > 0 and r["step_time"]["lower_bound"] > 0
    start = time.perf_counter()
    again = preflight("configs/listops_convluna.py:smoke", "cpu", measure_steps=2, cache_dir=tmp_path, quiet=True)
    assert again["cached"] and time.perf_counter() - start < first / 2
    assert again["memory"] == r["memory"]
    # another batch is another cache entry: compiled by compile_step's code in this process (the
    # child and the CPU probe ran above; here they would cost ~5 CPU-seconds more)
    from lra_lab.preflight import check, compile_step

    monkeypatch.setattr(check, "compile_in_child", lambda payload, *a, **k: compile_step.run(payload))
    monkeypatch.setattr(check, "_cpu_specs", lambda python: r["cpu"])
    other = preflight(
        "configs/listops_convluna.py:smoke", "cpu", batch=16, measure_steps=0, cache_dir=tmp_path, quiet=True
    )
    assert not other["cached"] and other["global_batch"] == 16 and other["memory"]["temp"] > r["memory"]["temp"]


def test_an_invalid_config_is_refused_in_the_parent_before_compiling(tmp_path):
    """Issue 38 PF5/PF6: a misspelt field or an invalid value is one error naming it; nothing compiles."""
    from lra_lab.preflight.check import PreflightError

    with pytest.raises(PreflightError, match="num_heads"):
        preflight(
            "configs/listops_convluna.py:smoke",
            "cpu",
            overrides={"model.num_heads": 3},
            measure_steps=0,
            cache_dir=tmp_path,
            quiet=True,
        )
    with pytest.raises(PreflightError, match="did you mean model.max_len"):
        preflight(
            "configs/listops_convluna.py:smoke",
            "cpu",
            overrides={"model.maxlen": 512},
            measure_steps=0,
            cache_dir=tmp_path,
            quiet=True,
        )
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(
    not _has("libtpu"),
    reason="libtpu is not importable (pip install -e '.[preflight-tpu]' in a venv "
    "and set LRA_PREFLIGHT_PYTHON to its python)",
)
def test_tpu_target_compiles_a_smoke_config(tmp_path):
    r = preflight("configs/listops_convluna.py:smoke", "v5e:2x2", python=PYTHON, cache_dir=tmp_path, quiet=True)
    assert r["status"] == "ok", r
    assert r["devices"] == 4 and r["verdict"] == "fits" and r["cost"]["flops"] > 0


@pytest.mark.skipif(
    not (_has("jax_cuda12_plugin", GPU_PYTHON) and os.environ.get("LRA_PREFLIGHT_GPU_SPECS")),
    reason="the CUDA plugin is not importable or LRA_PREFLIGHT_GPU_SPECS is unset (pip install -e "
    "'.[preflight-gpu]' in a venv, set LRA_PREFLIGHT_GPU_PYTHON to its python and "
    "LRA_PREFLIGHT_GPU_SPECS to a folder with XLA's h100_sxm.txtpb)",
)
def test_gpu_target_compiles_a_smoke_config(tmp_path):
    one = preflight("configs/listops_convluna.py:smoke", "h100", python=GPU_PYTHON, cache_dir=tmp_path, quiet=True)
    assert one["status"] == "ok", one
    assert one["devices"] == 1 and one["verdict"] == "fits" and one["cost"]["flops"] > 0
    eight = preflight("configs/listops_convluna.py:smoke", "h100x8", python=GPU_PYTHON, cache_dir=tmp_path, quiet=True)
    assert eight["devices"] == 8 and eight["cost"]["flops"] == pytest.approx(one["cost"]["flops"] / 8, rel=0.05)


def test_overrides_are_typed_by_the_config_and_the_data_length_follows_the_model():
    from lra.errors import InputError
    from lra_lab.preflight.__main__ import config_overrides

    spec = "configs/listops_convluna.py:smoke"
    fields = [("model.max_len", "512"), ("model.attention_kwargs.mem", "8")]
    assert config_overrides(spec, fields, ["batch_size=4", "model.dtype=bfloat16"]) == (
        f"{spec},mem=8",
        {"model.max_len": 512, "batch_size": 4, "model.dtype": "bfloat16", "data.max_len": 512},
    )
    with pytest.raises(InputError, match="key=value"):
        config_overrides(spec, [], ["model.max_len"])
    with pytest.raises(InputError, match="batch_size must be an integer"):
        config_overrides(spec, [("batch_size", "4.5")], [])


def test_gpu_target_without_xla_spec_says_where_to_get_it(monkeypatch, tmp_path):
    from lra_lab.preflight.check import PreflightError, gpu_target_config

    monkeypatch.delenv("LRA_PREFLIGHT_GPU_SPECS", raising=False)
    with pytest.raises(PreflightError, match="h100_sxm.txtpb.*LRA_PREFLIGHT_GPU_SPECS"):
        gpu_target_config(targets.parse("h100x8"))
    (tmp_path / "a100_sxm_40.txtpb").write_text("gpu_device_info {}")
    monkeypatch.setenv("LRA_PREFLIGHT_GPU_SPECS", str(tmp_path))
    assert gpu_target_config(targets.parse("a100-40gb")) == "gpu_device_info {}"


def test_bench_check_matches_the_committed_cpu_benchmark_case(tmp_path):
    import json

    from lra_lab.preflight import bench_check

    case = dict(
        status="ok",
        num_params=1000,
        length=512,
        batch_size=4,
        seeds=1,
        dtype="float32",
        steps_per_second=5.0,
        flops_per_step=1e10,
        memory={"total_bytes": 3 * 10**8},
    )
    (tmp_path / "training_steps_cpu.json").write_text(json.dumps({"cases": [case, dict(case, length=1024)]}))
    result = dict(
        status="ok",
        num_params=1000,
        length=512,
        global_batch=4,
        seeds=1,
        dtype="float32",
        step_time={"estimate": 0.1, "lower_bound": 0.05},
        measured={"step_seconds_median": 0.3},
    )
    cmp = bench_check.comparison(result, tmp_path)
    assert cmp["bench_step_seconds"] == [0.2] and cmp["estimate_over_bench"] == pytest.approx(0.5)
    assert cmp["measured_over_bench"] == pytest.approx(1.5)
    assert "estimate / benchmark = 0.50" in "\n".join(bench_check.lines(cmp))
    assert bench_check.comparison(dict(result, length=2000), tmp_path) is None


def test_gpu_cost_falls_back_to_the_unoptimised_program_per_device():
    # the deviceless GPU compile gives no cost analysis (compiled or lowered): FLOPs come from the
    # unoptimised program's HLO analysis, divided by the devices; its unfused bytes never bound a step
    import jax
    import jax.numpy as jnp

    from lra_lab.preflight.compile_step import _cost

    lowered = jax.jit(lambda a, b: a @ b).lower(jnp.ones((64, 32)), jnp.ones((32, 16)))

    class NoAnalysis:
        def cost_analysis(self):
            return None

    cost = _cost(NoAnalysis(), lowered, devices=4)
    assert cost["flops"] == pytest.approx(2 * 64 * 32 * 16 / 4)
    assert cost["bytes_accessed"] == 0 and cost["bytes_unfused"] > 0 and "4 device" in cost["source"]
    compiled = _cost(lowered.compile(), lowered, devices=1)
    assert compiled["source"] == "compiled" and compiled["flops"] == pytest.approx(2 * 64 * 32 * 16, rel=0.01)
    target = targets.parse("h100")
    st = estimate.step_times(dict(dtype="float32", cost=cost), target)
    assert st["lower_bound"] == pytest.approx(cost["flops"] / target.chip.f32_flops)


def test_cache_key_follows_the_compiling_interpreter(monkeypatch):
    from lra_lab.preflight import cache

    assert cache.versions_of(sys.executable) == cache.versions()
    fake = {
        "/venv-a/bin/python": '{"jax": "1", "libtpu": "0.1"}',
        "/venv-b/bin/python": '{"jax": "1", "libtpu": "0.2"}',
    }
    monkeypatch.setattr(cache, "_versions_json", fake.__getitem__)
    keys = {cache.key({"a": 1}, "v5e:2x2", 1, 0, python) for python in fake}
    assert len(keys) == 2  # another libtpu in the compiling venv is another compilation


@pytest.mark.slow  # compiles a grid's configs in parallel children
def test_sweep_table_compiles_each_config_once_in_parallel_jobs(tmp_path, monkeypatch, capsys):
    from lra_lab.preflight.sweep_table import sweep_table

    monkeypatch.setenv("LRA_PREFLIGHT_CACHE", str(tmp_path))
    assert main(["sweep", "lra_families", "--preset", "smoke", "--target", "cpu", "--jobs", "0"]) == 2
    assert "--jobs 0: need >= 1" in capsys.readouterr().err
    table = sweep_table("lra_families", "smoke", "cpu", variants=["Linear", "Transformer"], jobs=2)
    rows = [line for line in table.splitlines() if line.startswith("| listops |")]
    assert [r.split(" | ")[1] for r in rows] == ["Transformer", "Linear"]  # the grid's order, not finishing order
    assert all(" | fits | " in r for r in rows) and len(list(tmp_path.glob("*.json"))) == 2
    again = sweep_table("lra_families", "smoke", "cpu", variants=["Linear", "Transformer"], jobs=2)
    assert again == table  # answered from the cache


def test_sweep_render_totals_and_flags_configs_that_do_not_fit():
    from lra_lab.preflight.sweep_table import render

    row = dict(
        task="text",
        variant="Transformer",
        config="c",
        verdict="fits",
        detail="1 GiB of 80",
        runs=5,
        memory_gib=1.0,
        gflop_per_step=10.0,
        hours_per_run=2.0,
        compile_seconds=1.0,
        num_params=1,
    )
    big = dict(row, variant="Big", verdict="does not fit", detail="needs 90 GiB | try bf16", hours_per_run=4.0)
    summary = dict(
        grid="g",
        preset="paper",
        target="h100x8",
        target_description="8 x H100",
        devices=8,
        tasks=None,
        variants=None,
        group_seeds=False,
        seeds_per_program=1,
        programs=10,
        assumed_mfu=0.3,
        rows=[row, big],
        total_hours=30.0,
        device_hours=240.0,
        hours_not_fitting=20.0,
        configs_not_fitting=1,
        configs_without_estimate=0,
    )
    text = render(summary)
    assert "| text | Big | does not fit | 1.00 | 10 | 4.00 | 5 | needs 90 GiB / try bf16 |" in text
    assert "about 30.00 hours on 8 x H100, i.e. 240.0 device-hours" in text
    assert "1 config(s) do not fit as configured (see each row's fix), 20.00 of these hours are theirs" in text


def test_price_per_hour_gives_the_cost_in_money_in_the_table_and_the_report(capsys):
    """Issue 39 point 9: money = device-hours x price, per run, in the grid total and in the one-config report."""
    from lra_lab.preflight.check import report_lines
    from lra_lab.preflight.sweep_table import render

    row = dict(
        task="text",
        variant="Transformer",
        config="c",
        verdict="fits",
        detail="1 GiB of 80",
        runs=5,
        memory_gib=1.0,
        gflop_per_step=10.0,
        hours_per_run=2.0,
        compile_seconds=1.0,
        num_params=1,
    )
    none = dict(row, variant="Unknown", verdict="cannot tell", hours_per_run=None)
    summary = dict(
        grid="g",
        preset="paper",
        target="h100x8",
        target_description="8 x H100",
        devices=8,
        tasks=None,
        variants=None,
        group_seeds=False,
        seeds_per_program=1,
        programs=10,
        assumed_mfu=0.3,
        rows=[row, none],
        total_hours=10.0,
        device_hours=80.0,
        hours_not_fitting=0.0,
        configs_not_fitting=0,
        configs_without_estimate=1,
    )
    plain = render(summary)
    assert "USD" not in plain and "| est. hours per run | runs |" in plain  # without a price: as before
    text = render({**summary, "price_per_hour": 2.5, "currency": "EUR"})
    assert "| est. hours per run | est. EUR per run | runs |" in text
    assert "| text | Transformer | fits | 1.00 | 10 | 2.00 | 40.00 | 5 |" in text  # 2 h x 8 devices x 2.5
    assert "| text | Unknown | cannot tell | 1.00 | 10 |  |  | 5 |" in text
    assert (
        "80.0 device-hours (estimate at 30% MFU, run one after another), about 200.00 EUR at 2.50 EUR per "
        "device-hour" in text
    )
    result = {
        "config": "c",
        "target": "v5e:2x2",
        "status": "ok",
        "variant": "V",
        "task": "listops",
        "num_params": 1,
        "length": 8,
        "dtype": "float32",
        "global_batch": 8,
        "devices": 4,
        "seeds": 1,
        "memory": {},
        "cost": {"flops": 1e9, "bytes_accessed": 1e9},
        "compile_seconds": 1.0,
        "num_train_steps": 36_000,
        "step_time": {"lower_bound": 0.05, "estimate": 0.1, "peak_flops": 1e12, "bandwidth": 1e11, "mfu": 0.3},
        "verdict": "fits",
        "verdict_detail": "ok",
    }
    lines = report_lines(result, 1.2)
    assert (
        "  cost: 4 device(s) x 1.00 h = 4.00 device-hours x 1.20 USD = 4.80 USD (estimate, at the price given "
        "per device-hour)" in lines
    )
    assert not any("cost:" in line for line in report_lines(result))
    assert main(["--config", "configs/listops_convluna.py:smoke", "--target", "cpu", "--price-per-hour", "-1"]) == 2
    assert "--price-per-hour -1.0: give the price of one device-hour" in capsys.readouterr().err


def test_committed_preflight_tables_are_their_records_rendered():
    # every results/preflight sweep table is exactly what its JSON record renders to
    import json
    from pathlib import Path

    from lra_lab.preflight.sweep_table import render

    root = Path(__file__).resolve().parents[1] / "results" / "preflight"
    records = sorted(root.glob("*_paper_*.json"))
    assert records, "no committed sweep records"
    for record in records:
        assert record.with_suffix(".md").read_text() == render(json.loads(record.read_text())), record.name


def test_cache_entries_are_sealed_complete_and_keyed_on_the_code(tmp_path, capsys):
    """Issue 38 PF1/PF2/PF3: an edited or cut entry is recompiled with a warning; the key follows the code."""
    from lra_lab.preflight import cache

    result = {
        "status": "ok",
        "num_params": 10,
        "devices": 1,
        "global_batch": 8,
        "dtype": "float32",
        "memory": {"temporary": 1},
        "cost": {"flops": 1.0},
    }
    cache.store(tmp_path, "k", result)
    assert cache.load(tmp_path, "k") == result
    entry = json.loads((tmp_path / "k.json").read_text())
    (tmp_path / "k.json").write_text(json.dumps({**entry, "memory": {"temporary": 10**12}}))
    assert cache.load(tmp_path, "k") is None and "seal does not match" in capsys.readouterr().err
    (tmp_path / "k.json").write_text(json.dumps({"status": "ok"}))
    assert cache.load(tmp_path, "k") is None and "fields missing" in capsys.readouterr().err
    repo = tmp_path / "repo"
    for source in cache.STEP_SOURCES:
        target = repo / source if source.endswith(".py") else repo / source / "x.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("a = 1\n")
    before = cache.code_digest.__wrapped__(repo)
    (repo / "lra" / "model.py").write_text("a = 2\n")
    assert cache.code_digest.__wrapped__(repo) != before


@pytest.mark.parametrize("python, why", [("/no/such", "cannot run it"), ("/bin/false", "exited 1")])
def test_a_python_that_cannot_compile_is_one_line_naming_the_flag(python, why, tmp_path, monkeypatch, capsys):
    """Issue 38 PF4: exit 2, one line naming --python, before anything compiles."""
    monkeypatch.setenv("LRA_PREFLIGHT_CACHE", str(tmp_path))
    for argv in (
        ["--config", "configs/listops_transformer.py:smoke", "--target", "cpu"],
        ["sweep", "lra_families", "--preset", "smoke", "--target", "cpu"],
    ):
        assert main([*argv, "--python", python]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"error: --python {python}: ") and why in err and len(err.splitlines()) == 1
        assert "compiling" not in out and not list(tmp_path.iterdir())


def test_an_unwritable_output_is_refused_before_compiling(tmp_path, monkeypatch, capsys):
    """Issue 38 PF8: --json or --out under a file: one error line, exit 4, nothing compiled."""
    monkeypatch.setenv("LRA_PREFLIGHT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "file").write_text("")
    for argv in (
        [
            "--config",
            "configs/listops_transformer.py:smoke",
            "--target",
            "cpu",
            "--json",
            str(tmp_path / "file" / "r.json"),
        ],
        ["sweep", "lra_families", "--preset", "smoke", "--target", "cpu", "--out", str(tmp_path / "file" / "o")],
        ["--config", "configs/listops_transformer.py:smoke", "--target", "cpu", "--json", str(tmp_path)],
    ):
        assert main(argv) == 4
        out, err = capsys.readouterr()
        assert err.startswith("error: cannot write ") and len(err.splitlines()) == 1 and "compiling" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_signal_reaches_every_compile_child_and_none_is_left(tmp_path):
    """Issue 38 PF7: SIGTERM to `sweep --jobs 2` is passed to both compile children, which the command
    waits for; it says what was interrupted, starts nothing new, exits 143; no child outlives it."""
    import signal

    pids = tmp_path / "pids"
    fake = tmp_path / "python"  # compiles by sleeping; anything else is the real interpreter
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then echo $$ >> {pids}; exec sleep 120; fi\n' f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lra_lab.preflight",
            "sweep",
            "lra_families",
            "--preset",
            "smoke",
            "--target",
            "cpu",
            "--jobs",
            "2",
            "--no-cache",
            "--python",
            str(fake),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LRA_PREFLIGHT_CACHE": str(tmp_path / "cache")},
    )
    started: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(started) < 2:
            time.sleep(0.2)
            started = [int(x) for x in pids.read_text().split()] if pids.exists() else []
        assert len(started) == 2, proc.communicate(timeout=5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "SIGTERM: stopping 2 running compilation(s)" in err and "interrupted by SIGTERM: stopped " in err
        assert "Traceback" not in err and len(pids.read_text().split()) == 2  # nothing new started
        for pid in started:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()


def test_fit_finds_the_smallest_microbatch_count_under_a_memory_budget(tmp_path, monkeypatch):
    """The search over microbatch counts, on real CPU compiles of the smoke Transformer at a global
    batch of 4 (counts 1, 2, 4: three compiles). Each compile runs compile_step's own code in this
    process rather than in a child (the child process and the CPU's measured rates are
    test_cpu_target_end_to_end_and_cache's; here they cost ~25 CPU-seconds), and the CPU's rates are
    fixed numbers: the budget, not the machine's memory, is the capacity."""
    from lra_lab.preflight import check, compile_step
    from lra_lab.preflight.check import fit_microbatches, microbatch_counts, report_lines
    from lra_lab.preflight.estimate import HEADROOM

    compiled: list[int] = []

    def in_process(payload: dict, *args: object, **kwargs: object) -> dict:
        compiled.append(payload["overrides"]["microbatches"])
        return json.loads(json.dumps(compile_step.run(payload)))  # as the child's printed line is read

    monkeypatch.setattr(check, "compile_in_child", in_process)
    monkeypatch.setattr(check, "_cpu_specs", lambda python: {"matmul_flops": 1e11, "bandwidth": 1e10})

    assert microbatch_counts(32, 1) == [1, 2, 4, 8, 16, 32]
    assert microbatch_counts(32, 8) == [1, 2, 4]
    spec, kw = "configs/listops_transformer.py:smoke", dict(batch=4, measure_steps=0, cache_dir=tmp_path, quiet=True)
    four = preflight(spec, "cpu", overrides={"microbatches": 4}, **kw)
    budget = int(four["memory"]["total"] / HEADROOM) + 1  # 4 microbatches just fit
    r = fit_microbatches(spec, "cpu", memory_budget=budget, **kw)
    tried = {t["microbatches"]: t for t in r["fit"]["tried"]}
    assert r["fit"]["microbatches"] == 4 and list(tried) == [1, 2, 4], r["fit"]
    assert tried[1]["total_bytes"] > tried[2]["total_bytes"] > budget * HEADROOM  # fewer do not fit
    assert tried[4]["verdict"] == "fits" and r["verdict"] == "fits" and r["memory_budget"] == budget
    assert "config.microbatches=4 is the smallest count that fits" in "\n".join(report_lines(r))
    roomy = fit_microbatches(spec, "cpu", memory_budget=10 * budget, **kw)  # cached: no compile
    assert roomy["fit"]["microbatches"] == 1 and "without microbatches" in roomy["fit"]["line"]
    tight = fit_microbatches(spec, "cpu", memory_budget=1000, **kw)
    assert tight["fit"]["microbatches"] is None and [t["microbatches"] for t in tight["fit"]["tried"]] == [1, 2, 4]
    assert compiled == [4, 1, 2]  # each count compiled once, then read from the cache


def test_memory_budget_must_be_positive(capsys):
    assert main(["--config", "configs/listops_transformer.py:smoke", "--target", "cpu", "--memory-budget", "0"]) == 2
    assert "--memory-budget 0.0: need a positive number of GiB" in capsys.readouterr().err
