"""lra_lab.reproduce: the registry, the verdict rules on synthetic records, the reports and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import result_record
from lra_lab.experiments import sweep, sweep_cli
from lra_lab.reproduce import agglomerative, cheap_linear, clustered, convluna, dispersed, evidence, registry, report
from lra_lab.reproduce.__main__ import main
from lra_lab.reproduce.registry import (
    HOLDS_BY_CONSTRUCTION,
    INCOMPLETE,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    REPRODUCED,
)


def _write(root: Path, rel: str, obj) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _seeds(root: Path, label: str, accs, steps: int = 1500) -> None:
    """Finished runs of the row ``label`` (its settings ``[field=value]`` in each config.json)."""
    base, *settings = label.split(" [")
    for k, acc in zip(convluna.SEEDS, accs, strict=False):
        folder = f"{convluna.run_dir(label)}/seed{k}"
        _write(
            root,
            f"{folder}/result.json",
            result_record(variant=base, seed=k, task="listops", test_accuracy=acc, num_train_steps=steps),
        )
        config: dict = {}
        for setting in settings:
            field, _, value = setting.rstrip("]").partition("=")
            *parents, leaf = field.split(".")
            node = config
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
        if settings:
            _write(root, f"{folder}/config.json", config)


def test_registry_has_five_papers_and_at_least_twelve_claims():
    papers = registry.papers()
    assert set(papers) == {"convluna", "clustered", "agglomerative", "dispersed", "cheap_linear"}
    claims = [c for p in papers.values() for c in p.claims]
    assert len(claims) >= 12
    for paper in papers.values():
        ids = [c.id for c in paper.claims]
        assert len(ids) == len(set(ids)), paper.key
        for c in paper.claims:
            assert c.statement and c.paper_numbers and c.rule and c.experiment
            if c.testable:  # a testable claim names what produces its records and which records it reads
                assert c.commands and c.records, (paper.key, c.id)
    assert sum(not c.testable for c in claims) >= 5


def test_unknown_paper_and_claim_list_the_valid_ones(capsys):
    assert main(["nosuchpaper"]) == 2
    err = capsys.readouterr().err
    assert "unknown paper 'nosuchpaper'" in err and "convluna" in err and "cheap_linear" in err
    assert main(["convluna", "--claim", "fig9"]) == 2
    err = capsys.readouterr().err
    assert "unknown claim 'fig9'" in err and "table1-listops" in err


def test_missing_records_make_a_claim_incomplete_naming_them(tmp_path):
    claim = convluna.PAPER.claim("table1-listops")
    _seeds(tmp_path, "Luna-16 (reference)", [0.35] * 5)
    _seeds(tmp_path, "ConvLuna-16 (reference)", [0.40, 0.41, 0.39, 0.42])  # seed 4 missing
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE
    assert outcome.missing == (f"{convluna.run_dir('ConvLuna-16 (reference)')}/seed4/result.json",)


def test_runs_of_other_steps_do_not_count(tmp_path):
    _seeds(tmp_path, "Luna-16 (reference)", [0.35] * 5)
    _seeds(tmp_path, "ConvLuna-16 (reference)", [0.40] * 5, steps=3000)
    outcome = convluna.PAPER.claim("table1-listops").outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE and len(outcome.missing) == 5
    assert "at 1500 steps (it holds 3000)" in outcome.missing[0]


@pytest.mark.parametrize(
    "conv, expected",
    [
        ([0.40, 0.41, 0.39, 0.42, 0.40], REPRODUCED),  # +5 points, consistent
        ([0.36, 0.362, 0.358, 0.361, 0.36], PARTLY),  # +1 point, consistent: ordering holds, size does not
        ([0.30, 0.41, 0.33, 0.42, 0.31], NOT_REPRODUCED),  # noisy, not significant
        ([0.34, 0.34, 0.34, 0.34, 0.34], NOT_REPRODUCED),  # worse
    ],
)
def test_table1_rule(tmp_path, conv, expected):
    _seeds(tmp_path, "Luna-16 (reference)", [0.35, 0.352, 0.348, 0.351, 0.35])
    _seeds(tmp_path, "ConvLuna-16 (reference)", conv)
    outcome = convluna.PAPER.claim("table1-listops").outcome(tmp_path)
    assert outcome.verdict == expected, outcome
    assert "one-sided paired t" in outcome.statistic


def test_memory_size_rule_uses_friedman(tmp_path):
    for family in ("Luna", "ConvLuna"):
        for i, m in enumerate((1, 16, 256)):  # each size best on some seeds: no effect of memory size
            _seeds(tmp_path, f"{family}-{m} (reference)", [0.35 + 0.01 * ((k + i) % 3) for k in range(5)])
    assert convluna.PAPER.claim("fig2-memory-size").outcome(tmp_path).verdict == REPRODUCED
    for m, shift in ((1, 0.0), (16, 0.05), (256, 0.10)):  # a strong, consistent effect for Luna
        _seeds(tmp_path, f"Luna-{m} (reference)", [0.30 + shift + 0.001 * k for k in range(5)])
    outcome = convluna.PAPER.claim("fig2-memory-size").outcome(tmp_path)
    assert outcome.verdict == NOT_REPRODUCED and "Luna" in outcome.detail


def _masked_copy(root: Path, acc) -> None:
    for L in clustered.LENGTHS:
        runs = [dict(attention="softmax", attention_kwargs={}, masked_accuracy=acc("full", L, 0))]
        runs += [
            dict(attention=f, attention_kwargs={"num_clusters": c}, masked_accuracy=acc(f, L, c))
            for f in ("clustered", "improved_clustered")
            for c in clustered.CLUSTERS
        ]
        _write(
            root,
            clustered.masked_copy_record(L),
            {"runs": runs, "settings": {"steps": clustered.STEPS[L], "seq_len": L}},
        )


def test_fig5_rule(tmp_path):
    # the paper's picture: improved solves everything, clustered fails more cells as L grows
    _masked_copy(tmp_path, lambda f, L, c: 1.0 if f != "clustered" else (1.0 if c >= L else 0.3))
    assert clustered.PAPER.claim("fig5-masked-copy").outcome(tmp_path).verdict == REPRODUCED
    # full attention fails every length: the reduction is too strong to judge anything
    _masked_copy(tmp_path, lambda f, L, c: 0.2)
    outcome = clustered.PAPER.claim("fig5-masked-copy").outcome(tmp_path)
    assert outcome.verdict == NOT_REPRODUCED and "too strong" in outcome.detail
    # a record trained for other steps than the experiment's is not counted
    _write(tmp_path, clustered.masked_copy_record(127), {"runs": [], "settings": {"steps": 800}})
    outcome = clustered.PAPER.claim("fig5-masked-copy").outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE and any("at 2400 steps (it holds 800)" in m for m in outcome.missing)


def test_fig5_draws_an_interrupted_length_but_judges_only_finished_records(tmp_path):
    """A length whose call was cut has only partial.jsonl: its finished cells reach the figure's
    grid, the claim stays incomplete, and lines of other steps are not drawn."""
    import json

    _masked_copy(tmp_path, lambda f, L, c: 1.0)
    (tmp_path / clustered.masked_copy_record(127)).unlink()
    partial = tmp_path / clustered.OUT / "masked_copy_L127" / "partial.jsonl"
    lines = [
        {"spec": "softmax", "settings": {"steps": 2400}, "run": {"attention": "softmax", "masked_accuracy": 0.99}},
        {
            "spec": "clustered:15",
            "settings": {"steps": 800},
            "run": {"attention": "clustered", "attention_kwargs": {"num_clusters": 15}, "masked_accuracy": 0.2},
        },
    ]
    partial.write_text("".join(json.dumps(line) + "\n" for line in lines))
    grid, missing = clustered.masked_copy_grid(tmp_path)
    assert grid[("full", 127, 0)] == 0.99 and ("clustered", 127, 15) not in grid
    assert missing == [clustered.masked_copy_record(127)]
    assert clustered.PAPER.claim("fig5-masked-copy").outcome(tmp_path).verdict == INCOMPLETE


def test_swap_eval_rule_needs_a_difference_beyond_noise(tmp_path):
    def record(clustered_acc, improved_acc):
        rows = [dict(attention="softmax", attention_kwargs={}, accuracy=0.36)]
        rows += [
            dict(attention="clustered", attention_kwargs={"num_clusters": 8}, accuracy=clustered_acc),
            dict(attention="improved_clustered", attention_kwargs={"num_clusters": 8}, accuracy=improved_acc),
        ]
        _write(tmp_path, clustered.SWAP, {"rows": rows})
        return clustered.PAPER.claim("table1-swap-eval").outcome(tmp_path).verdict

    assert record(0.30, 0.355) == REPRODUCED
    assert record(0.355, 0.358) == NOT_REPRODUCED  # 0.3 points apart: within noise


def test_agglomerative_record_of_another_scale_is_not_judged(tmp_path):
    """R4: `--lengths 32 64 --replicas 2` writes the default record; the claim is then incomplete, named."""
    from test_reproduce_rules import _timing

    _timing(2.0, 1.0, 300.0)(tmp_path)
    claim = registry.find("agglomerative", "fig1-timing")[1][0]
    assert claim.outcome(tmp_path).verdict == REPRODUCED
    record = json.loads((tmp_path / agglomerative.RECORD).read_text())
    record["rows"] = [dict(r, replicas=r["replicas"][:2]) for r in record["rows"] if r["length"] in (32, 64)]
    (tmp_path / agglomerative.RECORD).write_text(json.dumps(record))
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE and "another scale (lengths [32, 64]" in outcome.missing[0], outcome


def test_agglomerative_crossover_and_slopes():
    full = {n: 1e-6 * n * n for n in (64, 128, 256, 512, 1024)}
    agg = {n: 1e-3 + 1e-4 * n for n in full}
    assert agglomerative.crossover(full, agg) == 128  # 16.4 ms vs 13.8 ms at 128
    assert agglomerative.slope(full) == pytest.approx(2.0)
    assert agglomerative.slope(agg) < 1.0
    assert agglomerative.crossover(agg, full) is None or agglomerative.crossover(agg, full) <= 128


def test_dispersed_module_counts_match_the_paper_at_small_n():
    assert dispersed.module_count(10) == dispersed.PAPER_TABLE1[10][2] == 62


def test_dispersed_rule_flags_a_wrong_row(tmp_path):
    rows = [
        dict(
            n=n,
            paper_full=f,
            paper_window=w,
            paper_dispersed=d,
            full=n * n,
            window=w,
            dispersed=d + (1 if n == 50 else 0),
            module=None,
        )
        for n, (f, w, d) in dispersed.PAPER_TABLE1.items()
    ]
    _write(
        tmp_path, dispersed.RECORD, {"rows": rows, "growth": [{"n": 1024, "scores": 10}], "keys_per_query_bound": 363}
    )
    outcome = dispersed.PAPER.claim("table1-counts").outcome(tmp_path)
    assert outcome.verdict == PARTLY and "misprints" in outcome.statistic  # N=10000's printed 10,000,000


def test_cheap_linear_rules(tmp_path):
    def row(n, lookup_lin, lookup_soft, enc_ratio):
        return dict(
            n=n,
            representation_bytes_linear=cheap_linear.WIDTH**2 * 4,
            representation_bytes_softmax=n * cheap_linear.WIDTH * 4,
            lookup_seconds_linear=lookup_lin,
            lookup_seconds_softmax=lookup_soft,
            encode_seconds_linear=enc_ratio,
            encode_seconds_softmax=1.0,
        )

    run = [row(n, 1.0, n / 256, 1.5) for n in cheap_linear.LENGTHS]
    _write(tmp_path, cheap_linear.RECORD, {"runs": [run, run]})
    verdicts = {c.id: c.outcome(tmp_path).verdict for c in cheap_linear.PAPER.claims}
    assert verdicts == {
        "table1-lookup": HOLDS_BY_CONSTRUCTION,
        "table1-representation": HOLDS_BY_CONSTRUCTION,
        "table1-encoding": REPRODUCED,
        "cnn-qa": NOT_TESTABLE,
        "lookup-speedup": INCOMPLETE,  # its own record (tests/test_reproduce_rules.py)
        "associative-recall": INCOMPLETE,
    }  # its own record (tests/test_reproduce_recall.py)
    slow = [row(n, n / 256, n / 256, 0.9) for n in cheap_linear.LENGTHS]
    _write(tmp_path, cheap_linear.RECORD, {"runs": [slow, slow]})
    assert cheap_linear.PAPER.claim("table1-lookup").outcome(tmp_path).verdict == NOT_REPRODUCED
    assert cheap_linear.PAPER.claim("table1-encoding").outcome(tmp_path).verdict == NOT_REPRODUCED


def test_reports_and_dry_run(tmp_path, monkeypatch, capsys):
    _seeds(tmp_path, "Luna-16 (reference)", [0.35, 0.352, 0.348, 0.351, 0.35])
    _seeds(tmp_path, "ConvLuna-16 (reference)", [0.40, 0.41, 0.39, 0.42, 0.40])
    written = report.write(registry.papers(), tmp_path, ["convluna"])
    text = (tmp_path / "results/reproductions/convluna/report.md").read_text()
    assert "## `table1-listops`: Table 1 (ListOps): **reproduced**" in text
    assert "**incomplete**" in text and "seed0/result.json" in text  # table1-vs-transformer lists its runs
    index = (tmp_path / "results/reproductions/README.md").read_text()
    assert "| [convluna](convluna/report.md) | `table1-listops` |" in index and "not testable here" in index
    assert len(written) == 2
    monkeypatch.setattr(registry, "REPO", tmp_path)
    assert main(["convluna", "--claim", "table1-vs-transformer", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # issue 38 R8: only the row whose records are missing; ConvLuna-16 (reference)'s committed ones are finished
    assert 'sweep.py convluna_listops --preset cpu --group-seeds on --variants "Transformer" --run' in out
    assert '"ConvLuna-16 (reference)"' not in out
    assert main(["convluna", "--claim", "table1-listops", "--dry-run"]) == 0
    assert "nothing missing" in capsys.readouterr().out


def _attribution_records(root: Path, conv, luna, revert) -> None:
    _seeds(root, "ConvLuna-16 (reference)", conv)
    _seeds(root, "Luna-16 (reference)", luna)
    for field, value in sweep.CONVLUNA_REFERENCE_REVERTS:
        _seeds(root, convluna.revert_label(field, value), revert(field))


def test_reference_attribution_rule(tmp_path):
    claim = convluna.PAPER.claim("reference-attribution")
    conv, luna = [0.40, 0.41, 0.39, 0.42, 0.40], [0.35, 0.352, 0.348, 0.351, 0.35]
    assert claim.outcome(tmp_path).verdict == INCOMPLETE
    # every reverted row keeps ConvLuna's accuracy: no single choice is needed
    _attribution_records(tmp_path, conv, luna, lambda field: [a - 0.001 for a in conv])
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == REPRODUCED and "Holm" in outcome.statistic
    # masks on loses the whole gain: the gain needs the code's missing padding masks
    _attribution_records(
        tmp_path, conv, luna, lambda field: luna if field == "model.mask_padding" else [a + 0.001 for a in conv]
    )
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == NOT_REPRODUCED and "model.mask_padding=True" in outcome.detail
    # masks on loses 3 points but stays above Luna: partly
    _attribution_records(
        tmp_path,
        conv,
        luna,
        lambda field: [a - 0.03 + 0.001 * k for k, a in enumerate(conv)] if field == "model.mask_padding" else conv,
    )
    assert claim.outcome(tmp_path).verdict == PARTLY
    # no gap under reference at all: nothing to attribute
    _attribution_records(tmp_path, luna, luna, lambda field: luna)
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == NOT_REPRODUCED and "no gain to attribute" in outcome.detail


def test_reference_attribution_needs_the_reverted_rows_only_when_the_pair_shows_a_gain(tmp_path):
    """The rule's first step reads the pair alone: no gain, no row is needed (not reproduced); a gain
    with the reverted rows missing is incomplete and names them."""
    claim = convluna.PAPER.claim("reference-attribution")
    conv, luna = [0.40, 0.41, 0.39, 0.42, 0.40], [0.35, 0.352, 0.348, 0.351, 0.35]
    _seeds(tmp_path, "ConvLuna-16 (reference)", luna)
    _seeds(tmp_path, "Luna-16 (reference)", luna)
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == NOT_REPRODUCED and "not needed" in outcome.detail
    _seeds(tmp_path, "ConvLuna-16 (reference)", conv)
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE and len(outcome.missing) == 5 * len(sweep.CONVLUNA_REFERENCE_REVERTS)
    assert any(convluna.run_dir(convluna.revert_label("model.param_init", "xavier")) in m for m in outcome.missing)


def test_init_lead_reads_the_xavier_pair(tmp_path):
    claim = convluna.PAPER.claim("init-lead")
    assert claim.outcome(tmp_path).verdict == INCOMPLETE
    conv, luna = [0.40, 0.41, 0.39, 0.42, 0.40], [0.35, 0.352, 0.348, 0.351, 0.35]
    _seeds(tmp_path, convluna.revert_label("model.param_init", "xavier"), conv)
    _seeds(tmp_path, "Luna-16 (reference) [model.param_init=xavier]", luna)
    assert claim.outcome(tmp_path).verdict == REPRODUCED
    labels = {v.label for v in sweep.GRIDS["convluna_listops"].variants}
    assert "Luna-16 (reference) [model.param_init=xavier]" in labels  # the sweep can run the row


def test_reference_reverts_put_back_our_defaults():
    """Each reverted row sets a field that `reference` changes, to the value the config has without it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_listops_convluna", sweep.CONFIGS / "listops_convluna.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ours, ref = module.get_config("cpu,mem=16"), module.get_config("cpu,mem=16,reference")

    def value(config, dotted):
        for part in dotted.split("."):
            config = config[part]
        return config

    for field, text in sweep.CONVLUNA_REFERENCE_REVERTS:
        if field == "model.attention_kwargs.scale_unpacking":  # absent from our config: the module's default
            from lra.attention.luna import ConvLunaAttention

            default = ConvLunaAttention.__dataclass_fields__["scale_unpacking"].default
        else:
            default = value(ours, field)
        import ast

        parsed = text if isinstance(default, str) else ast.literal_eval(text)  # as the config flag parses it
        assert parsed == default, field
        assert value(ref, field) != default, field


def test_variant_settings_reach_the_command_and_record():
    runs = sweep.expand(
        "convluna_listops", "cpu", group_seeds=True, variants=[convluna.revert_label("model.mask_padding", "True")]
    )
    (run,) = runs
    assert "--config.model.mask_padding=True" in run.command("python")
    assert run.record()["settings"] == {"model.mask_padding": "True"} and run.record()["overrides"] == {}
    assert sweep.expected_steps(run) == 1500  # the config builds "ConvLuna-16 (reference)": the label check passes
    assert run.workdir.name == "listops_convluna-16-reference-model-mask-padding-true"


def test_holm():
    assert evidence.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert evidence.holm([0.5, 0.9]) == [1.0, 1.0]


def test_the_judges_statistics_are_the_suites():
    """One Friedman and one Holm (lra.reports.stats) serve the tables, lra.reports.compare and the
    judges; Holm (statsmodels) equals the step-down procedure written out, the hand-rolled one it
    replaced, to the bit, ties included; a Friedman whose every block ties is p = 1 (not NaN)."""
    from lra.reports import stats

    assert evidence.holm is stats.holm and evidence.friedman_p is stats.friedman_p

    def step_down(ps: list[float]) -> list[float]:
        order = sorted(range(len(ps)), key=lambda i: ps[i])
        adjusted, running = [1.0] * len(ps), 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
            adjusted[i] = running
        return adjusted

    for ps in (
        [0.01, 0.04, 0.03],
        [0.5, 0.9],
        [0.02, 0.02, 0.01, 0.2, 1e-300],
        [0.3] * 4,
        [0.004, 0.011, 0.039, 0.015, 0.5, 0.0123456789],
    ):
        assert stats.holm(ps) == step_down(ps), ps
    assert stats.holm([]) == []
    ties = [[0.5, 0.6, 0.7]] * 3
    assert stats.friedman_test(ties) is None and stats.friedman_p(ties) == 1.0
    statistic, p = stats.friedman_test([[1, 2, 3, 4], [2, 3, 4, 5], [3, 1, 5, 6]])
    assert 0 < p < 1 and statistic > 0


def test_convluna_report_draws_the_rows_that_have_runs(tmp_path):
    _seeds(tmp_path, "Luna-16", [0.35, 0.36, 0.34, 0.35, 0.37])
    _seeds(tmp_path, "ConvLuna-16 (reference)", [0.40, 0.41, 0.39, 0.42, 0.40])
    assert set(convluna.rows_with_runs(tmp_path)) == {"Luna-16", "ConvLuna-16 (reference)"}
    report.write(registry.papers(), tmp_path, ["convluna"])
    assert (tmp_path / "results/reproductions/convluna/listops_rows.png").stat().st_size > 0
    assert (
        "![listops_rows.png](listops_rows.png)" in (tmp_path / "results/reproductions/convluna/report.md").read_text()
    )


def test_records_that_are_not_finished_runs_or_not_the_rows_own_are_missing_by_name(tmp_path):
    """Issue 38 R2/R3: a cut-short result, another row's result and another seed's never count."""
    _seeds(tmp_path, "Luna-16 (reference)", [0.35] * 5)
    _seeds(tmp_path, "ConvLuna-16 (reference)", [0.40] * 5)
    conv = f"{convluna.run_dir('ConvLuna-16 (reference)')}"
    _write(tmp_path, f"{conv}/seed0/result.json", {"test_accuracy": 0.99})  # cut short
    luna = json.loads((tmp_path / convluna.run_dir("Luna-16 (reference)") / "seed1/result.json").read_text())
    _write(tmp_path, f"{conv}/seed1/result.json", luna)  # Luna's record copied into ConvLuna's folder
    _write(
        tmp_path,
        f"{conv}/seed2/result.json",
        result_record(
            variant="ConvLuna-16 (reference)", seed=3, task="listops", test_accuracy=0.5, num_train_steps=1500
        ),
    )
    found, missing = convluna.accuracies(tmp_path, "ConvLuna-16 (reference)")
    assert set(found) == {3, 4}
    assert any("seed0" in m and "missing" in m for m in missing)
    assert any("seed1" in m and "holds variant 'Luna-16 (reference)'" in m for m in missing)
    assert any("seed2" in m and "holds seed 3" in m for m in missing)
    outcome = registry.find("convluna", "table1-listops")[1][0].outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE


def test_a_setting_row_needs_its_setting_in_the_config(tmp_path):
    label = convluna.revert_label("model.param_init", "xavier")
    _seeds(tmp_path, label, [0.4] * 5)
    assert len(convluna.accuracies(tmp_path, label)[0]) == 5
    _write(tmp_path, f"{convluna.run_dir(label)}/seed0/config.json", {"model": {"param_init": "pytorch"}})
    found, missing = convluna.accuracies(tmp_path, label)
    assert 0 not in found and "model.param_init='pytorch'" in missing[0]


def test_a_damaged_record_makes_only_its_claim_incomplete(tmp_path):
    """Issue 38 R1: a field missing in one record does not stop the other claims' verdicts."""
    runs = [
        {"variant": f"{f}-{m}{s}", "stats": {}}
        for f in ("Luna", "ConvLuna")
        for m in (16, 256)
        for s in ("", " (reference)")
    ]  # every run there, its statistics missing
    _write(tmp_path, convluna.MEMDEG, {"runs": runs})
    claim = registry.find("convluna", "fig1-memory-degradation")[1][0]
    outcome = claim.outcome(tmp_path)
    assert outcome.verdict == INCOMPLETE and "damaged" in outcome.missing[0]


def test_a_masked_copy_accuracy_outside_0_1_or_another_length_is_missing(tmp_path):
    _masked_copy(tmp_path, lambda f, L, c: 1.7)
    grid, missing = clustered.masked_copy_grid(tmp_path)
    assert not any(v > 1 for v in grid.values()) and any("not in [0, 1]" in m for m in missing)
    _masked_copy(tmp_path, lambda f, L, c: 0.95)
    L31 = tmp_path / clustered.masked_copy_record(31)
    other = json.loads((tmp_path / clustered.masked_copy_record(63)).read_text())
    L31.write_text(json.dumps(other))
    assert any("holds L = 63" in m for m in clustered.masked_copy_grid(tmp_path)[1])


def test_list_into_a_closed_pipe_is_quiet():
    import subprocess
    import sys

    proc = subprocess.run(
        f"{sys.executable} -m lra_lab.reproduce --list | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.startswith("convluna:") and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "0"], "--config.steps must be a positive integer"),
        (["--batch-size", "0"], "--config.batch_size must be a positive integer"),
        (["--mask-fraction", "0.9"], "--config.mask_fraction must be in (0, 0.5]"),
        (["--seq-len", "1000000000"], "at most 65,536"),
    ],
)
def test_masked_copy_refuses_bad_settings_before_anything_runs(tmp_path, capsys, flags, message):
    """Issue 38 MC3: one error line, exit 2, nothing written."""
    from conftest import script_main

    with pytest.raises(SystemExit) as stop:
        script_main("masked_copy")([*flags, "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_masked_copy_lock_names_its_own_flag(tmp_path, capsys):
    """Issue 38 MC4: the refusal names --out, the flag masked_copy has."""
    from conftest import script_main
    from lra.training.run_files import WorkdirLock

    (tmp_path / "out").mkdir()
    with WorkdirLock(tmp_path / "out"):
        with pytest.raises(SystemExit) as stop:
            script_main("masked_copy")(["--steps", "2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert stop.value.code == 3 and "--out" in err and "--workdir" not in err


def test_a_signal_reaches_the_running_command_and_nothing_new_starts(tmp_path):
    """Issue 38 R9: SIGTERM to lra_lab.reproduce is passed on to its command (no orphan), which saves and stops."""
    import signal
    import threading
    import time

    from lra_lab.reproduce import __main__ as cli

    got, never = tmp_path / "got", tmp_path / "never"
    trap = (
        f'python -c "import signal, sys, time, pathlib; signal.signal(signal.SIGTERM, lambda s, f: '
        f"(pathlib.Path('{got}').write_text('x'), sys.exit(143))); time.sleep(60)\""
    )
    after = f"python -c \"open('{never}', 'w')\""
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("rc", cli._run_batch([trap, after], tmp_path)))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not cli.CHILDREN.children and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the child installs its handler
        cli.CHILDREN.forward(signal.SIGTERM)
        worker.join(30)
        assert result["rc"] == 143 and got.exists() and not never.exists()
    finally:
        cli.CHILDREN.reset()


@pytest.mark.slow  # masked-copy trainings
def test_masked_copy_never_retrains_a_finished_out(tmp_path, capsys):
    """Issue 38 R7: a finished --out of the same settings is kept as it is; --restart trains again."""
    from conftest import script_main

    flags = [
        "--seq-len",
        "5",
        "--steps",
        "2",
        "--eval-batches",
        "1",
        "--variants",
        "softmax",
        "--out",
        str(tmp_path / "out"),
    ]
    script_main("masked_copy")(flags)
    record = (tmp_path / "out" / "results.json").read_bytes()
    capsys.readouterr()
    script_main("masked_copy")(flags)
    assert "nothing to do" in capsys.readouterr().out
    assert (tmp_path / "out" / "results.json").read_bytes() == record


def _ablation_rows(root: Path, luna, conv, filt=None, scal=None) -> None:
    _seeds(root, "Luna-16 (reference)", luna)
    _seeds(root, "ConvLuna-16 (reference)", conv)
    if filt is not None:
        _seeds(root, "OnlyFiltering-16 (reference)", filt)
    if scal is not None:
        _seeds(root, "OnlyScaling-16 (reference)", scal)


def test_table3_rule_every_branch_its_words_name(tmp_path):
    """Issue 37: the rule's words and its code agree on each branch."""
    claim = convluna.PAPER.claim("table3-listops")
    luna = [0.350, 0.352, 0.348, 0.351, 0.349]
    conv = [0.400, 0.405, 0.398, 0.402, 0.401]
    # no significant gain: decided without the ablation rows
    _ablation_rows(tmp_path / "a", luna, [0.351, 0.349, 0.352, 0.348, 0.350])
    assert claim.outcome(tmp_path / "a").verdict == NOT_REPRODUCED
    # a gain, ablation rows missing: incomplete, naming them
    _ablation_rows(tmp_path / "b", luna, conv)
    outcome = claim.outcome(tmp_path / "b")
    assert outcome.verdict == INCOMPLETE and any("onlyfiltering" in m for m in outcome.missing)
    # filtering keeps most, scaling little: reproduced
    _ablation_rows(tmp_path / "c", luna, conv, [0.390, 0.394, 0.388, 0.392, 0.391], luna)
    assert claim.outcome(tmp_path / "c").verdict == REPRODUCED
    # filtering keeps little and scaling little: only one of the two holds: partly
    _ablation_rows(tmp_path / "d", luna, conv, [0.352, 0.353, 0.349, 0.352, 0.350], luna)
    assert claim.outcome(tmp_path / "d").verdict == PARTLY
    # filtering keeps little, scaling keeps all: neither holds
    _ablation_rows(tmp_path / "e", luna, conv, [0.352, 0.353, 0.349, 0.352, 0.350], conv)
    assert claim.outcome(tmp_path / "e").verdict == NOT_REPRODUCED


@pytest.mark.parametrize(
    "uniform, collapsed, expected",
    [(4, 4, REPRODUCED), (4, 2, PARTLY), (3, 4, PARTLY), (3, 3, NOT_REPRODUCED), (0, 0, NOT_REPRODUCED)],
)
def test_memory_degradation_rule_every_branch_its_words_name(tmp_path, uniform, collapsed, expected):
    """ "partly if only one holds", each condition over all four pairs/runs (the code said any() before)."""
    runs, pair = [], 0
    for suffix in ("", " (reference)"):
        for m in (16, 256):
            luna_entropy = 0.9 if pair < uniform else 0.1
            distinct = 1 if pair < collapsed else m
            runs.append(
                {
                    "variant": f"Luna-{m}{suffix}",
                    "stats": {"block1/packing_entropy": luna_entropy, "block1/distinct_vectors": distinct},
                }
            )
            runs.append(
                {
                    "variant": f"ConvLuna-{m}{suffix}",
                    "stats": {"block1/packing_entropy": 0.5, "block1/distinct_vectors": m},
                }
            )
            pair += 1
    _write(tmp_path, convluna.MEMDEG, {"runs": runs})
    assert convluna.PAPER.claim("fig1-memory-degradation").outcome(tmp_path).verdict == expected


def _full_disk(monkeypatch) -> None:
    """Every fsync fails as on a full disk (the atomic writer's last step before its rename)."""
    import errno
    import os

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)


def test_a_full_disk_while_writing_reports_is_one_line_and_no_torn_file(tmp_path, monkeypatch, capsys):
    """Issue 38 R5: `--report-only` on a full disk: one error line, exit 4, the previous report whole."""
    monkeypatch.setattr(registry, "REPO", tmp_path)
    assert main(["dispersed", "--report-only"]) == 0
    folder = tmp_path / report.OUT
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert folder / "dispersed" / "report.md" in before
    capsys.readouterr()
    _full_disk(monkeypatch)
    assert main(["dispersed", "--report-only"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write ") and "No space left on device" in err[0]
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before  # nothing torn, no temporary


def test_report_figures_are_replaced_atomically(tmp_path, monkeypatch):
    """Issue 38 R5: a figure that cannot be written leaves the previous image whole."""
    from lra.errors import StorageError
    from lra_lab.reproduce import figures

    record = {
        "batch": 1,
        "dim": 2,
        "rows": [{"layer": "full", "length": n, "seconds": 1e-3 * n, "sem": 0.0} for n in (32, 64)],
    }
    path = tmp_path / "fig.png"
    figures.timing_plot(record, path)
    image = path.read_bytes()
    assert image.startswith(b"\x89PNG")
    _full_disk(monkeypatch)
    with pytest.raises(StorageError, match="No space left on device"):
        figures.timing_plot(record, path)
    assert path.read_bytes() == image and [p.name for p in tmp_path.iterdir()] == ["fig.png"]


def test_commands_run_with_this_interpreter_not_paths_python(tmp_path, monkeypatch):
    """Issue 38 R6: `python ...` in a claim's command is this interpreter, not the first on PATH."""
    import os
    import sys

    from lra_lab.reproduce import __main__ as cli

    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 7\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "which"
    assert cli._run_batch([f"python -c \"import sys; open('{out}', 'w').write(sys.executable)\""], tmp_path) == 0
    assert out.read_text() == sys.executable


def test_list_never_cuts_the_where_column_into_the_verdict(capsys):
    """Issue 39 point 8: each claim's "where" is printed whole, then two spaces, then its verdict."""
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for paper in registry.papers().values():
        for claim in paper.claims:
            line = next(x for x in lines if x.split() and x.split()[0] == claim.id)
            after = line.split(claim.where, 1)
            assert len(after) == 2 and after[1].startswith("  "), line
            assert after[1].strip().startswith(registry.VERDICTS), line


def test_dry_run_names_each_run_once_with_its_state_and_estimate(tmp_path, monkeypatch, capsys):
    """Issue 39 point 7: several claims read the same rows; the plan trains each once, and says per
    run done / started / missing / data absent with its estimated CPU time, then sums them."""
    monkeypatch.setattr(registry, "REPO", tmp_path)
    assert main(["convluna", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [line for line in lines if not line.startswith("#")]
    seen: set = set()
    for command in commands:
        selection = sweep_cli.command_selection(command, tmp_path)
        if selection is None:
            continue
        workdirs = [w for run in selection[0] for w in run.seed_workdirs]
        assert not seen & set(workdirs), command  # no run in two commands
        seen |= set(workdirs)
        listed = lines[lines.index(command) + 1 : lines.index(command) + 1 + len(selection[0])]
        assert all(line.startswith("#") and line.split()[2] == "missing" for line in listed), listed
    assert len(seen) > 0 and lines[-1].startswith("# ") and " runs: " in lines[-1]
    assert "ConvLuna-16 (reference)" in " ".join(commands)
    # Table 1's pair is read by several claims: one command trains it
    assert sum('"ConvLuna-16 (reference)"' in c for c in commands if "convluna_listops_confirm" in c) == 1


def test_masked_copy_cuts_a_torn_partial_line_before_appending(tmp_path, monkeypatch):
    """Issue 38 MC1: a line of partial.jsonl torn by a full disk is cut before the next append, so
    the next resume reads every finished variant (the appended line never joins the fragment)."""
    from lra_lab.experiments import masked_copy

    out = tmp_path / "out"
    out.mkdir()
    (out / masked_copy.PARTIAL).write_text('{"spec": "clustered:2", "settings": {"st')  # torn, no newline
    seen = []

    def one_variant(settings, log, done, on_run):
        on_run("softmax", {"variant": "softmax", "masked_accuracy": 0.5})
        seen.append(masked_copy.partial_entries(out / masked_copy.PARTIAL))
        raise KeyboardInterrupt  # killed before the next variant

    monkeypatch.setattr(masked_copy, "run_experiment", one_variant)
    settings = masked_copy.Settings(seq_len=5, steps=2, eval_batches=1, variants=("softmax",))
    with pytest.raises(KeyboardInterrupt):
        masked_copy.run_resumable(settings, out, "cmd", log=lambda line: None)
    assert [e["spec"] for e in seen[0]] == ["softmax"]
    assert set(masked_copy.read_partial(out / masked_copy.PARTIAL, settings)) == {"softmax"}


def test_masked_copy_on_a_full_disk_is_one_line_exit_4(tmp_path, monkeypatch, capsys):
    """Issue 38 MC2: the first write that fails ends the call with one error line naming the file."""
    from conftest import script_main

    _full_disk(monkeypatch)
    with pytest.raises(SystemExit) as stop:
        script_main("masked_copy")(
            [
                "--seq-len",
                "5",
                "--steps",
                "2",
                "--eval-batches",
                "1",
                "--variants",
                "softmax",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 4 and len(err) == 1
    assert err[0].startswith("error: cannot write ") and "partial.jsonl: No space left on device" in err[0]
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_record_of_another_scale_is_not_judged_and_records_keep_the_real_command(tmp_path, monkeypatch):
    """Issue 38 R4: a record stores the command as typed, not the default one; cheap_linear's claims
    judge only a record of their two runs (`--runs 1` leaves them incomplete, the record named)."""
    import sys

    from lra.training import provenance

    monkeypatch.setattr(
        sys,
        "orig_argv",
        [sys.executable, "-m", "lra_lab.reproduce.agglomerative", "--lengths", "32", "64", "--replicas", "2"],
    )
    assert provenance.command_line() == "python -m lra_lab.reproduce.agglomerative --lengths 32 64 --replicas 2"
    row = {
        k: 1.0
        for k in ("lookup_seconds_linear", "lookup_seconds_softmax", "encode_seconds_linear", "encode_seconds_softmax")
    }
    one_run = [
        [dict(row, n=n, representation_bytes_linear=1, representation_bytes_softmax=n) for n in cheap_linear.LENGTHS]
    ]
    _write(tmp_path, cheap_linear.RECORD, {"runs": one_run})
    judged = [claim for claim in cheap_linear.PAPER.claims if tuple(claim.records) == (cheap_linear.RECORD,)]
    assert judged and all(claim.outcome(tmp_path).missing == (cheap_linear.RECORD,) for claim in judged)
