"""Masked-copy variant names (lra_lab.experiments.masked_copy_task.parse_variant): the paper's short name
``clustered:15`` and the family's options as a config's short form takes them
(``clustered:clusters=15``) are one variant: the same label, kwargs, record and computation."""

from __future__ import annotations

import json

import pytest

from conftest import script_main
from lra.errors import InputError
from lra_lab.experiments import masked_copy as mc

SETTINGS = mc.Settings()
TINY = "--seq-len 5 --num-layers 1 --num-heads 2 --head-dim 4 --mlp-dim 8 --batch-size 4 --steps 2 --eval-batches 1"


@pytest.mark.parametrize(
    "spellings, expected",
    [
        (
            ["clustered:15", "clustered:clusters=15", "clustered:num_clusters=15", "clustered:clusters=15,bits=63"],
            ("clustered-15", "clustered", {"num_clusters": 15, "bits": 63, "iterations": 10}),
        ),
        (
            ["improved_clustered:100", "improved_clustered:clusters=100", "improved_clustered:topk=16,clusters=100"],
            ("i-clustered-100", "improved_clustered", {"num_clusters": 100, "bits": 63, "iterations": 10, "topk": 16}),
        ),
        (["softmax", "softmax:implementation=auto"], ("full", "softmax", {})),
    ],
)
def test_every_spelling_is_the_short_names_variant(spellings, expected):
    """The labels and kwargs (in order: records hold them) that ``clustered:C`` always gave."""
    for spec in spellings:
        label, name, kwargs = mc.parse_variant(spec, SETTINGS)
        if name == "softmax":
            kwargs = {}  # softmax:implementation=auto names the softmax default explicitly
        assert (label, name, list(kwargs.items())) == (expected[0], expected[1], list(expected[2].items()))
        assert mc.canonical_variant(spec, SETTINGS) == spellings[0]


def test_an_option_at_another_value_names_the_variant():
    spec = "improved_clustered:clusters=8,topk=4"
    label, _, kwargs = mc.parse_variant(spec, SETTINGS)
    assert label == "i-clustered-8 (topk=4)" and kwargs["topk"] == 4
    canonical = mc.canonical_variant(spec, SETTINGS)
    assert canonical == "improved_clustered:num_clusters=8,topk=4"
    assert mc.parse_variant(canonical, SETTINGS) == mc.parse_variant(spec, SETTINGS)


@pytest.mark.parametrize(
    "spec, named",
    [
        ("clustered:clusters=1.5", "num_clusters must be an integer, got 1.5"),
        ("clustered:topk=3,clusters=4", "option 'topk' is not an option of attention 'clustered'"),
        ("clustered:abc", "option 'abc' is not key=value"),
        ("clustered:bits=31", "name the clusters"),
        ("clustered:4,bits=31", "option '4' is not key=value"),
        ("clustered:clusters=4,num_clusters=5", "num_clusters is given twice"),
        ("softmax:x=1", "option 'x' is not an option of attention 'softmax'"),
        ("full", "use softmax, clustered:C or improved_clustered:C"),
    ],
)
def test_a_bad_variant_is_one_input_error_naming_the_option(spec, named):
    with pytest.raises(InputError, match="variant") as e:
        mc.parse_variant(spec, SETTINGS)
    assert named in str(e.value)
    assert named in (mc.settings_problem(mc.Settings(variants=(spec,))) or "")


def test_two_spellings_of_one_variant_are_refused():
    problem = mc.settings_problem(mc.Settings(variants=("clustered:4", "clustered:clusters=4")))
    assert problem and "clustered-4 twice" in problem


def _stub_run(settings, spec, log):
    """A finished run without training: what the record keeps of the variant's name."""
    label, name, kwargs = mc.parse_variant(spec, settings)
    metrics = dict(masked_accuracy=0.5, token_accuracy=0.5, eval_loss=1.0, final_loss=1.0, train_seconds=0.0)
    return {"variant": label, "attention": name, "attention_kwargs": kwargs, **metrics, "curve": []}


def test_the_command_records_one_spelling_and_either_resumes_the_other(tmp_path, capsys, monkeypatch):
    main = script_main("masked_copy")
    trained = []
    monkeypatch.setattr(mc, "train_variant", lambda s, spec, log: trained.append(spec) or _stub_run(s, spec, log))
    main([*TINY.split(), "--variants", "softmax", "clustered:clusters=2", "--out", str(tmp_path)])
    record = json.loads((tmp_path / "results.json").read_text())
    assert record["settings"]["variants"] == ["softmax", "clustered:2"] and trained == ["softmax", "clustered:2"]
    assert record["runs"][1]["variant"] == "clustered-2"
    capsys.readouterr()
    main([*TINY.split(), "--variants", "softmax", "clustered:2", "--out", str(tmp_path)])
    assert "already holds this experiment's finished runs" in capsys.readouterr().out and len(trained) == 2


@pytest.mark.slow  # two trainings of the tiny model (~20 s on the busy 2-core machine): the claim holds by construction
def test_both_spellings_train_the_same_numbers():
    """train_variant reads its spec only through parse_variant; trained, the two spellings agree to the bit."""
    settings = mc.Settings(seq_len=5, num_layers=1, num_heads=2, head_dim=4, mlp_dim=8, batch_size=4, steps=2)
    a, b = (mc.train_variant(settings, spec, log=lambda line: None) for spec in ("clustered:2", "clustered:clusters=2"))
    assert {**a, "train_seconds": 0} == {**b, "train_seconds": 0} and a["variant"] == "clustered-2"


def test_the_command_refuses_a_bad_variant_with_one_error_line(tmp_path, capsys):
    main = script_main("masked_copy")
    with pytest.raises(SystemExit) as e:
        main([*TINY.split(), "--variants", "softmax", "clustered:clusters=1.5", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and "num_clusters" in err[0]
    assert not (tmp_path / "x").exists()


def test_every_committed_record_names_its_variants_as_before():
    """Each committed masked-copy record's variants (and swaps) are their own canonical spelling, and
    today's parse gives the label and kwargs each run recorded."""
    from pathlib import Path

    records = sorted((Path(__file__).resolve().parents[1] / "results").glob("**/results.json"))
    checked = 0
    for path in records:
        record = json.loads(path.read_text())
        held = record.get("settings") if isinstance(record, dict) else None
        if not isinstance(held, dict) or "variants" not in held:
            continue
        settings = mc.Settings(**{k: tuple(v) if isinstance(v, list) else v for k, v in held.items()})
        assert all(mc.canonical_variant(v, settings) == v for v in settings.variants + settings.swap_eval), path
        parsed = [mc.parse_variant(v, settings) for v in settings.variants]
        assert [(p[0], p[2]) for p in parsed] == [(r["variant"], r["attention_kwargs"]) for r in record["runs"]], path
        checked += 1
    assert checked >= 5
