"""The structure-free ListOps baseline is computed from the data, fitted on train only, and drawn."""

from __future__ import annotations

import json

import numpy as np

from lra.data.listops import VOCAB
from lra.data.types import Split
from lra.reports import listops_baseline as lb
from lra.reports.tables import write_all


def _split(name: str, rows: list[tuple[str, int]]) -> Split:
    inputs = np.zeros((len(rows), 6), np.int32)
    for i, (first, _) in enumerate(rows):
        inputs[i, :3] = [VOCAB[first], VOCAB["3"], VOCAB["]"]]
    labels = np.array([label for _, label in rows])
    return Split(name, inputs, labels, np.full(len(rows), 3))


def test_the_rule_is_fitted_on_train_and_scored_elsewhere():
    train = _split("train", [("[MAX", 9), ("[MAX", 9), ("[MAX", 3), ("[MIN", 0), ("[MIN", 1), ("[MIN", 1)])
    rule = lb.fit(train, 10)
    assert rule == {VOCAB["[MAX"]: 9, VOCAB["[MIN"]: 1}
    test = _split("test", [("[MAX", 9), ("[MAX", 2), ("[MIN", 1), ("[SM", 5)])
    # [SM unseen in train: the fallback (majority) answers it
    assert lb.accuracy(rule, test, fallback=5) == 0.75
    assert lb.accuracy(rule, test, fallback=0) == 0.5


def test_leading_padding_is_skipped():
    split = _split("x", [("[MED", 4)])
    split.inputs[0] = np.roll(split.inputs[0], 2)
    assert lb.outermost_tokens(split).tolist() == [VOCAB["[MED"]]


def test_a_listops_table_states_and_draws_it(finished_smoke_run, tmp_path):
    workdir, _ = finished_smoke_run
    summary = write_all(workdir.parent, tmp_path / "tables", plots_enabled=False)
    table = summary["tables"][0]
    base = table["listops_structure_free_baseline"]
    assert 0.0 <= base["test_accuracy"] <= 1.0 and set(base["rule"]) >= {"[MAX", "[MIN"}
    text = (tmp_path / "tables" / table["files"]["markdown"]).read_text()
    assert "structure-free baseline" in text and f"{100 * base['test_accuracy']:.1f}%" in text
    off = write_all(workdir.parent, tmp_path / "off", plots_enabled=False, structure_free_baseline=False)
    assert "listops_structure_free_baseline" not in off["tables"][0]
    assert json.loads((tmp_path / "tables" / "summary.json").read_text())["tables"][0][
        "listops_structure_free_baseline"
    ]


def test_command_line_writes_the_record(tmp_path, smoke_data_dir):
    out = tmp_path / "b.json"
    assert (
        lb.main(
            [
                "--config",
                "configs/listops_transformer.py:smoke",
                "--set",
                f"data_dir={smoke_data_dir}",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["config"].endswith(":smoke") and 0 <= record["validation_accuracy"] <= 1
    assert lb.main(["--config", "configs/listops_transformer.py:smoke", "--set", "data.nope=1"]) == 2


def test_command_line_reads_config_fields_as_lra_train_does(capsys):
    """``--config.FIELD=VALUE`` (the suite's one grammar; ``--set FIELD=VALUE`` its old spelling)."""
    assert lb.main(["--config", "configs/listops_transformer.py:smoke", "--config.data.nope=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --config.data.nope=1: ") and "no field 'nope'" in err[0]


def test_the_convluna_report_draws_it_from_the_rows_data(finished_smoke_run, tmp_path):
    """Issue 35: the reproduction report's seed figure draws the baseline of the data its rows'
    records name (their config.json) and its caption states it; rows without such a record draw none."""

    import ml_collections

    from conftest import result_record
    from lra_lab.reproduce import convluna, registry, report

    workdir, _ = finished_smoke_run
    for label, acc in (("Luna-16 (reference)", 0.35), ("ConvLuna-16 (reference)", 0.41)):
        folder = tmp_path / convluna.run_dir(label) / "seed0"
        folder.mkdir(parents=True)
        record = result_record(variant=label, seed=0, task="listops", test_accuracy=acc, num_train_steps=1500)
        (folder / "result.json").write_text(json.dumps(record))
        # the smoke run's data, under the row's identity: a record that disagrees with its own
        # config.json is refused by every reader (issue 52)
        config = json.loads((workdir / "config.json").read_text())
        config.update(variant=label, seed=0, num_train_steps=1500, preset=record["config_preset"])
        config["model"]["attention"] = record["attention"]
        (folder / "config.json").write_text(json.dumps(config))
    expected = lb.for_config(ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text())))
    report.write(registry.papers(), tmp_path, ["convluna"])
    text = (tmp_path / "results/reproductions/convluna/report.md").read_text()
    assert f"In listops_rows.png the dashed line is the {lb.line(expected, 'test')}" in text
    assert (tmp_path / "results/reproductions/convluna/listops_rows.png").stat().st_size > 0
    for config in tmp_path.glob("results/runs/**/config.json"):  # damaged: said, not guessed, not a crash
        config.write_text("{ damaged")
    report.write(registry.papers(), tmp_path, ["convluna"])
    text = (tmp_path / "results/reproductions/convluna/report.md").read_text()
    # a record whose config.json is damaged is no record (issue 52; refusals: tests/test_record_identity.py):
    # its row draws no figure, and no baseline is guessed
    assert "dashed line" not in text and "listops_rows.png" not in text
    for config in tmp_path.glob("results/runs/**/config.json"):
        config.unlink()
    report.write(registry.papers(), tmp_path, ["convluna"])
    text = (tmp_path / "results/reproductions/convluna/report.md").read_text()
    assert "dashed line" not in text and "Structure-free baseline" not in text


def test_a_listops_run_ends_beside_the_baseline_of_its_data(finished_smoke_run):
    """Issue 51: lra.train's last line puts the run's test accuracy beside this baseline on the same
    data, with the test set's own interval; another task gets no line."""
    import ml_collections

    workdir, result = finished_smoke_run
    config = ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text()))
    base = 100 * lb.for_config(config)["test_accuracy"]
    line = lb.beside_baseline(config, result["test_accuracy"])
    ours = 100 * result["test_accuracy"]
    assert line is not None and line.startswith(f"{config.variant}: test accuracy {ours:.1f}% ")
    assert f"against {base:.1f}% for the structure-free baseline" in line and line.endswith(
        f"{ours - base:+.1f} points"
    )
    n = config.data.num_test
    half = 196 * np.sqrt(result["test_accuracy"] * (1 - result["test_accuracy"]) / n)
    assert f"over {n:,} test examples +-{half:.1f})" in line
    config.task = "text"
    assert lb.beside_baseline(config, 0.5) is None


def test_the_laptop_preset_is_the_confirmatory_budget():
    """``:laptop`` is the ``cpu`` preset with convluna_confirm's registered settings, nothing else: the
    README's main job and the confirmatory ConvLuna-16 row train the same configuration (seeds aside)."""
    from lra.defaults import load_config_file
    from lra.training.run_files import config_to_dict, flatten_config
    from lra_lab.reproduce.convluna_confirm import SETTINGS

    make = load_config_file("configs/listops_convluna.py").get_config
    laptop = flatten_config(config_to_dict(make("laptop,reference")))
    cpu = flatten_config(config_to_dict(make("cpu,reference")))
    cpu.update(SETTINGS, preset="laptop")
    assert laptop == cpu
    other = flatten_config(config_to_dict(load_config_file("configs/text_convluna.py").get_config("laptop")))
    assert other["num_train_steps"] == SETTINGS["num_train_steps"] and other["preset"] == "laptop"
