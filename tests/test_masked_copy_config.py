"""Masked copy's settings through the suite's one override grammar (issue 40 point 2): ``--config.FIELD=VALUE``
typed by the task's ConfigDict (lra_lab.experiments.masked_copy_task.settings_config), the old ``--field-name VALUE``
flags its aliases; both spellings make one record and resume each other's partial files."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import script_main
from lra.errors import InputError
from lra_lab.experiments import masked_copy as mc
from test_masked_copy_variants import _stub_run

REPO = Path(__file__).resolve().parents[1]
OLD = "--seq-len 5 --num-layers 1 --num-heads 2 --head-dim 4 --mlp-dim 8 --batch-size 4 --steps 2 --eval-batches 1"
NEW = (
    "--config.seq_len=5 --config.num_layers=1 --config.num_heads=2 --config.head_dim=4 --config.mlp_dim=8 "
    "--config.batch_size=4 --config.steps 2 --config.eval_batches=1"
)


def _settings(argv: list[str]) -> mc.Settings:
    """The settings the command builds from ``argv`` (scripts/masked_copy.py's settings_from_args)."""
    return sys.modules[script_main("masked_copy").__module__].settings_from_args(argv)[0]


def _new_spelling(argv: list[str]) -> list[str]:
    """``argv`` with every old settings flag written as ``--config.FIELD=VALUE``."""
    fields, out, i = set(mc.settings_config()), [], 0
    while i < len(argv):
        name = argv[i][2:].replace("-", "_")
        if argv[i].startswith("--") and name in fields:
            out.append(f"--config.{name}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def test_the_config_holds_every_setting_but_the_variant_lists_at_the_dataclass_defaults():
    config, defaults = mc.settings_config(), mc.Settings()
    assert set(config) | set(mc.MODEL_LISTS) == set(mc.settings_record(mc.Settings(swap_eval=("clustered:2",))))
    assert all(
        config[name] == getattr(defaults, name) and type(config[name]) is type(getattr(defaults, name))
        for name in config
    )
    assert _settings([]) == defaults


@pytest.mark.parametrize(
    "old, new",
    [
        (OLD.split(), NEW.split()),
        (
            ["--learning-rate", "1e-3", "--mask-fraction", "0.25"],
            ["--config.learning_rate=1e-3", "--config.mask_fraction=.25"],
        ),
        (["--mask-fraction", "1", "--seed", "-1"], ["--config.mask_fraction", "1", "--config.seed=-1"]),
        (
            ["--topk", "4", "--bits", "31", "--iterations", "3"],
            ["--config.topk=4", "--config.bits=31", "--config.iterations=3"],
        ),
    ],
)
def test_both_spellings_build_the_same_settings_and_record(old, new):
    a, b = _settings(old), _settings(new)
    assert a == b and a != mc.Settings()
    assert json.dumps(mc.settings_record(a)) == json.dumps(mc.settings_record(b))  # byte for byte, types included


def test_the_last_given_wins_in_either_spelling():
    assert _settings(["--steps", "3", "--config.steps=4"]).steps == 4
    assert _settings(["--config.steps=4", "--steps", "3"]).steps == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config.stepz=3"], "--config.stepz=3: stepz: config has no field 'stepz'; did you mean steps?"),
        (["--config.seq_lenn", "5"], "did you mean seq_len"),
        (["--config.steps=1.5"], "--config.steps=1.5: steps must be an integer, got '1.5'"),
        (["--steps", "abc"], "--steps abc: steps must be an integer, got 'abc'"),
        (["--seq-len", "1e9"], "--seq-len 1e9: seq_len must be an integer, got '1e9'"),
        (["--config.learning_rate=fast"], "learning_rate must be a number, got 'fast'"),
        (["--config.variants=softmax"], "name them with --variants"),
        (["--config", "configs/listops_transformer.py"], "masked copy has no config file"),
        (["--config.steps"], "--config.steps needs a value"),
        (["--config.steps=0"], "--config.steps must be a positive integer, got 0"),
        (["--steps", "0"], "--config.steps must be a positive integer, got 0"),
        (["--config.mask_fraction=0.9"], "--config.mask_fraction must be in (0, 0.5]"),
        (["--config.seq_len=1000000000"], "at most 65,536"),
    ],
)
def test_a_bad_setting_is_one_error_line_exit_2_and_nothing_written(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        script_main("masked_copy")([*argv, "--out", str(tmp_path / "out")] if argv[-1] != "--config.steps" else argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_refusal_is_an_input_error_not_a_bug():
    with pytest.raises(InputError):
        _settings(["--config.topk=1.5"])


def test_every_committed_records_command_rebuilds_its_settings_in_either_spelling():
    """Each committed masked-copy record's own command (all in the old spelling) and the same command in the
    new spelling give the record's settings exactly: so each runs as it did and finds its record finished."""
    checked = 0
    for path in sorted((REPO / "results").glob("**/results.json")):
        record = json.loads(path.read_text())
        command = record.get("command", "") if isinstance(record, dict) else ""
        if not isinstance(command, str) or not command.startswith("python scripts/masked_copy.py"):
            continue
        argv = shlex.split(command)[2:]
        for spelling in (argv, _new_spelling(argv)):
            assert mc.settings_record(_settings(spelling)) == record["settings"], (path, spelling)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("first, second", [(OLD, NEW), (NEW, OLD)])
def test_a_partial_file_of_one_spelling_resumes_under_the_other(tmp_path, monkeypatch, capsys, first, second):
    """A call killed after its first variant, rerun in the other spelling, trains only the rest; its partial
    file is byte for byte the one the other spelling writes, and the finished record's settings and runs
    are those of an uninterrupted call."""
    main, trained = script_main("masked_copy"), []
    variants = ["--variants", "softmax", "clustered:2"]

    def killed_on_second(settings, spec, log):
        if spec == "clustered:2":
            raise KeyboardInterrupt
        trained.append(spec)
        return _stub_run(settings, spec, log)

    partials = {}
    for name, spelling in (("first", first), ("second", second)):
        monkeypatch.setattr(mc, "train_variant", killed_on_second)
        with pytest.raises(KeyboardInterrupt):
            main([*spelling.split(), *variants, "--out", str(tmp_path / name)])
        partials[name] = (tmp_path / name / mc.PARTIAL).read_bytes()
    assert partials["first"] == partials["second"] and trained == ["softmax", "softmax"]

    monkeypatch.setattr(mc, "train_variant", lambda s, spec, log: trained.append(spec) or _stub_run(s, spec, log))
    capsys.readouterr()
    main([*second.split(), *variants, "--out", str(tmp_path / "first")])
    assert "resuming from" in capsys.readouterr().out and trained[2:] == ["clustered:2"]
    main([*second.split(), *variants, "--out", str(tmp_path / "whole")])
    resumed, whole = (json.loads((tmp_path / n / "results.json").read_text()) for n in ("first", "whole"))
    drop = lambda r: [{k: v for k, v in run.items() if k != "git_commit_start"} for run in r["runs"]]
    assert resumed["settings"] == whole["settings"] and drop(resumed) == drop(whole)
    assert resumed["command"] == shlex.join(
        ["python", "scripts/masked_copy.py", *second.split(), *variants, "--out", str(tmp_path / "first")]
    )
    report = lambda n: re.sub(r"Command: `.*`", "", (tmp_path / n / "results.md").read_text())
    assert report("first") == report("whole")
    capsys.readouterr()
    main([*first.split(), *variants, "--out", str(tmp_path / "whole")])  # finished, recognised in either spelling
    assert "nothing to do" in capsys.readouterr().out and len(trained) == 5
