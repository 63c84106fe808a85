"""scripts/bench_training.py at a tiny size on CPU: the files it writes and what they hold."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import SCRIPTS, script_main
from lra_lab.bench import seeds_vs_sequential, steps_report
from lra_lab.bench import steps as step_bench

REPO = SCRIPTS.parent


@pytest.mark.slow  # benchmark / GPU-kit end to end: run deliberately (-m slow), keeps the default suite under 10 min
def test_steps_benchmark_writes_table_json_and_plot(tmp_path):
    main = script_main("bench_training")
    assert (
        main(
            [
                "steps",
                "--families",
                "softmax",
                "--lengths",
                "16",
                "--dtypes",
                "float32",
                "--seeds",
                "1",
                "2",
                "--set",
                "batch_size=2",
                "--set",
                "model.num_layers=1",
                "--steps",
                "2",
                "--repeats",
                "1",
                "--matmul-size",
                "128",
                "--isolate",
                "off",
                "--out",
                str(tmp_path),
                "--name",
                "tiny",
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "tiny.json").read_text())
    one, two = report["cases"]
    assert (one["seeds"], two["seeds"], one["status"], two["status"]) == (1, 2, "ok", "ok")
    assert one["batch_size"] == 2 and one["num_layers"] == 1 and one["loss_finite"]
    # two vmapped seeds are twice the work of one: XLA's FLOPs say so
    assert two["flops_per_step"] == pytest.approx(2 * one["flops_per_step"], rel=0.05)
    for case in (one, two):
        assert case["seed_steps_per_second"] == pytest.approx(case["seeds"] * case["steps_per_second"])
        assert case["mfu"] == pytest.approx(
            case["flops_per_step"] * case["steps_per_second"] / report["matmul_rates"]["float32"]
        )
        assert case["memory"]["total_bytes"] > 0
    assert report["environment"]["device_kind"] == "cpu"
    text = (tmp_path / "tiny.md").read_text()
    assert "| Transformer | 16 | float32 | 2 |" in text and "Relative to the Transformer" in text
    assert (tmp_path / "tiny.png").stat().st_size > 0


TINY = [
    "--lengths",
    "16",
    "--dtypes",
    "float32",
    "--seeds",
    "1",
    "--set",
    "batch_size=2",
    "--set",
    "model.num_layers=1",
    "--steps",
    "2",
    "--repeats",
    "1",
    "--matmul-size",
    "128",
]


@pytest.mark.slow  # benchmark / GPU-kit end to end: run deliberately (-m slow), keeps the default suite under 10 min
def test_parallel_cases_are_timed_alone_and_a_grid_resumes(tmp_path, capsys):
    main = script_main("bench_training")
    args = ["steps", *TINY, "--out", str(tmp_path), "--name", "par"]
    assert main([*args, "--families", "softmax", "linear", "--jobs", "2"]) == 0
    first = json.loads((tmp_path / "par.json").read_text())
    assert first["settings"]["jobs"] == 2 and [c["status"] for c in first["cases"]] == ["ok", "ok"]
    # the two processes compiled side by side, and neither was timed while anything else ran
    (c1, t1), (c2, t2) = [(c["compile_window"], c["timed_window"]) for c in first["cases"]]
    overlap = lambda a, b: a[0] < b[1] and b[0] < a[1]  # noqa: E731
    assert overlap(c1, c2)
    assert not overlap(t1, t2) and not overlap(t1, c2) and not overlap(t2, c1)
    # the same grid with one more family measures only that one; the others' rows are kept as they were
    capsys.readouterr()
    (tmp_path / "par.partial.jsonl").open("a").write('{"torn": ')  # a line cut by a kill
    assert main([*args, "--families", "softmax", "linear", "agglomerative", "--isolate", "off"]) == 0
    assert "2 of 3 cases already measured" in capsys.readouterr().out
    second = json.loads((tmp_path / "par.json").read_text())
    assert [c["family"] for c in second["cases"]] == ["softmax", "linear", "agglomerative"]
    assert second["cases"][:2] == first["cases"]
    assert len(step_bench.read_partial(tmp_path / "par.partial.jsonl")) == 3  # nothing lost to the torn line
    assert main([*args, "--families", "linear", "--restart", "--isolate", "off"]) == 0
    assert len(step_bench.read_partial(tmp_path / "par.partial.jsonl")) == 1


def test_bucket_padding_cost_of_the_alternatives(smoke_data_dir):
    from test_train import smoke

    config = smoke(smoke_data_dir, **{"data.buckets": (24, 40)})
    cost = seeds_vs_sequential.bucket_padding_cost(config, [0, 1, 2, 3, 4], 40)
    # a shared order pads as little as each seed's own order; padding to the longest pads more
    assert cost["shared_order"] == pytest.approx(cost["own_order"], rel=0.25)
    assert cost["pad_to_longest"] > cost["shared_order"]


@pytest.mark.parametrize("family", step_bench.families())
def test_each_case_is_its_config_files_model(family):
    """A case trains the model ``python -m lra.train --config configs/listops_<family>.py`` trains
    (its filter, norms, pooling, dropout), changed only in length, dtype and seeds."""
    from lra.family_configs import config_spec
    from test_all_configs import load

    case = step_bench.Case(family, 512, "bfloat16", 3)
    config = step_bench.case_config(case)
    path, first = config_spec("listops", family)
    expected = load(path, first)
    expected.data.max_len = expected.model.max_len = 512
    expected.model.dtype, expected.seeds = "bfloat16", (0, 1, 2)
    assert config.to_dict() == expected.to_dict()
    assert step_bench.label(family) == config.variant


def test_convluna_case_is_the_papers_listops_convluna():
    config = step_bench.case_config(step_bench.Case("convluna", 2000, "float32", 1))
    kw = config.model.attention_kwargs
    assert (kw.filter, kw.kernel_size, config.model.norm, config.model.pooling) == ("conv", 32, "post", "memory")
    assert config.model.attention_residual_dropout is False


def test_plot_legend_names_every_family_in_one_colour_across_panels(tmp_path, monkeypatch):
    """A family measured only in the first panel (the 5-seed panel was unfinished on the H100) is in
    the legend, and each family keeps its colour from panel to panel."""
    import matplotlib.pyplot as plt

    case = lambda family, seeds, n: {
        "status": "ok",
        "family": family,
        "dtype": "float32",
        "seeds": seeds,  # noqa: E731
        "length": n,
        "seed_steps_per_second": 1.0 + n / 100,
    }
    report = {
        "cases": [case("softmax", 1, 16), case("linear", 1, 16), case("dispersed", 1, 16), case("linear", 5, 16)],
        "environment": {"device_kind": "cpu"},
        "settings": {"overrides": {}},
    }
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    steps_report.plot(report, tmp_path / "p.png")
    (fig,) = figures
    first, last = fig.axes
    legend = [t.get_text() for t in last.get_legend().get_texts()]
    assert legend == [step_bench.label(f) for f in ("softmax", "linear", "dispersed")]
    colour = lambda ax, label: next(l.get_color() for l in ax.lines if l.get_label() == label)  # noqa: E731,E741
    assert colour(first, step_bench.label("linear")) == colour(last, step_bench.label("linear"))


def _grid_cases(monkeypatch, argv):
    """The cases ``bench_training.py steps ARGV`` would measure (probe and grid replaced: nothing runs)."""
    main = script_main("bench_training")
    seen = {}
    probed = {"environment": {"device_kind": "cpu"}, "memory_stats": False, "matmul_rates": {}}
    monkeypatch.setattr(step_bench, "probe", lambda *a, **k: probed)
    monkeypatch.setattr(step_bench, "run_grid", lambda cases, *a, **k: seen.setdefault("cases", cases) and [])
    monkeypatch.setattr(steps_report, "write_report", lambda *a, **k: None)
    assert main(["steps", "--families", "luna", "--lengths", "16", "--seeds", "1", "--name", "x", *argv]) == 0
    return seen["cases"]


@pytest.mark.parametrize(
    "spelling",
    [
        ["--config.batch_size=4", "--config.model.attention_kwargs.mem=8"],
        ["--config.batch_size", "4", "--config.model.attention_kwargs.memory_size", "8"],
        ["--set", "batch_size=4", "--set", "model.attention_kwargs.mem=8"],  # the old spelling, an alias
    ],
)
def test_config_fields_set_every_case_typed_by_the_config(monkeypatch, tmp_path, spelling):
    cases = _grid_cases(monkeypatch, [*spelling, "--dtypes", "float32", "--out", str(tmp_path)])
    (case,) = cases
    assert case.overrides == (("batch_size", 4), ("model.attention_kwargs.memory_size", 8))
    config = step_bench.case_config(case)
    assert (config.batch_size, config.variant, config.data.max_len, config.seeds) == (4, "Luna-8", 16, (0,))


@pytest.mark.parametrize(
    "bad, named",
    [
        ("--config.batch_sise=4", "batch_size"),
        ("--config.batch_size=four", "batch_size must be an integer"),
        ("--config.model.attention_kwargs.mem=1.5", "memory_size must be an integer"),
        ("--config=configs/listops_luna.py", "--config.FIELD=VALUE"),
    ],
)
def test_a_bad_override_is_one_error_before_anything_runs(monkeypatch, tmp_path, capsys, bad, named):
    with pytest.raises(SystemExit) as e:
        _grid_cases(monkeypatch, [bad, "--out", str(tmp_path)])
    assert e.value.code == 2 and named in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_a_record_made_with_the_old_set_spelling_resumes_and_reports(monkeypatch, tmp_path, capsys):
    """The committed CPU grid (``--set batch_size=4``, values parsed as Python literals then) rerun as
    ``--config.batch_size=4``: every case is recognised as measured (none runs) and the report keeps
    the committed rows."""
    main = script_main("bench_training")
    record = json.loads((REPO / "results/bench/training_steps_cpu.json").read_text())
    partial = tmp_path / "training_steps_cpu.partial.jsonl"
    partial.write_text("".join(json.dumps(c) + "\n" for c in record["cases"]))

    def no_measuring(case):
        raise AssertionError(f"{case} was measured again")

    monkeypatch.setattr(step_bench, "_safe_measure", no_measuring)
    families = list(dict.fromkeys(c["family"] for c in record["cases"]))
    argv = ["steps", "--families", *families, "--lengths", "512", "--dtypes", "float32", "--seeds", "1", "5"]
    argv += ["--config.batch_size=4", "--steps", "3", "--isolate", "off", "--matmul-size", "8"]
    assert main([*argv, "--out", str(tmp_path), "--name", "training_steps_cpu"]) == 0
    assert f"{len(record['cases'])} of {len(record['cases'])} cases already measured" in capsys.readouterr().out
    report = json.loads((tmp_path / "training_steps_cpu.json").read_text())
    assert report["cases"] == record["cases"] and report["settings"]["overrides"] == {"batch_size": 4}
    assert "overrides {'batch_size': 4}" in (tmp_path / "training_steps_cpu.md").read_text()


STEP_RECORDS = ["training_steps_cpu", "training_steps_cpu_run2", "training_steps_h100", "softmax_xla_h100"]


@pytest.mark.parametrize("name", STEP_RECORDS)
def test_committed_records_still_report_and_their_commands_name_their_cases(name):
    """Each committed grid reports, and its recorded command (old ``--set`` spelling, values parsed as
    Python literals then) gives today the overrides, hence the case identities, its rows hold."""
    import shlex

    from lra.config_args import expand_options

    record = json.loads((REPO / f"results/bench/{name}.json").read_text())
    text = steps_report.markdown(record)
    assert f"| {step_bench.label(record['cases'][0]['family'])} |" in text
    argv = shlex.split(record["environment"]["command"])
    sets = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    families = list(dict.fromkeys(c["family"] for c in record["cases"]))
    overrides = step_bench.typed_overrides(families, expand_options(sets))
    for row in record["cases"]:
        case = step_bench.Case(**{f: row[f] for f in ("family", "length", "dtype", "seeds", "steps", "repeats")})
        assert step_bench.case_key(dataclasses.asdict(dataclasses.replace(case, overrides=overrides))) == (
            step_bench.case_key(row)
        )
