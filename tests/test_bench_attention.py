"""The attention scaling benchmark runs, writes its reports, and skips with reasons."""

from __future__ import annotations

import json

import pytest

from lra_lab.bench import attention as bench


@pytest.mark.slow  # benchmark / GPU-kit end to end: run deliberately (-m slow), keeps the default suite under 10 min
def test_tiny_run_writes_reports(tmp_path):
    s = bench.Settings(dim=16, num_heads=2, qkv_dim=16, repeats=1)
    cases = bench.run(["softmax", "luna"], [32, 16], s, log=lambda _: None)
    assert [(c["family"], c["n"], c["status"]) for c in cases] == [
        ("softmax", 16, "ok"),
        ("luna", 16, "ok"),
        ("softmax", 32, "ok"),
        ("luna", 32, "ok"),
    ]
    assert all(c["seconds"] > 0 and c["memory"]["total_bytes"] > 0 for c in cases)
    paths = bench.write_report(cases, s, tmp_path, ["bench_attention.py", "--tiny"])
    report = json.loads(paths["json"].read_text())
    assert report["environment"]["command"] == "bench_attention.py --tiny"
    assert {"device_kind", "jax_version", "date"} <= set(report["environment"])
    assert {"git_commit_start", "git_commit", "dirty", "date"} <= set(report)  # issue 37: the audit reads these
    assert "| luna | 32 | ok |" in paths["md"].read_text()
    assert paths["png"].stat().st_size > 0


def test_skips_are_recorded_with_reasons():
    s = bench.Settings(dim=16, num_heads=2, qkv_dim=16, repeats=1, max_memory_bytes=1)
    (case,) = bench.run(["luna"], [16], s, log=lambda _: None)
    assert case["status"] == "skipped" and "predicted memory" in case["reason"]
    s = bench.Settings(dim=16, num_heads=2, qkv_dim=16, repeats=3, max_seconds=0.0)
    first, second = bench.run(["luna"], [16, 32], s, log=lambda _: None)
    assert first["status"] == "ok" and len(first["samples"]) == 1  # too slow: not repeated
    assert second["status"] == "skipped" and "N=16" in second["reason"]


def test_checks():
    def case(family, n, seconds, mem):
        return dict(
            family=family,
            n=n,
            status="ok",
            seconds=seconds,
            us_per_token=1e6 * seconds / n,
            memory=dict(total_bytes=mem),
        )

    cases = [
        case("softmax", 1024, 1.0, 100),
        case("softmax", 4096, 16.0, 1600),
        case("luna", 1024, 1.0, 100),
        case("luna", 4096, 4.0, 400),
    ]
    ch = bench.checks(cases)
    assert ch["luna"]["time_per_token"]["passed"] and ch["luna"]["memory"]["passed"]
    assert ch["luna"]["vs_softmax"]["ratio"] == 0.25 and ch["luna"]["vs_softmax"]["passed"]
    assert not ch["softmax"]["time_per_token"]["passed"] and not ch["softmax"]["memory"]["passed"]


def test_scores_follow_the_pattern():
    from lra.attention.dispersed import num_scores

    assert bench.attention_scores("softmax", 64) == 64 * 64
    assert bench.attention_scores("dispersed", 1000) == num_scores(1000) == 60550  # paper's Table 1
    assert bench.attention_scores("linear", 1000) is None


def test_per_score_check_separates_pattern_growth_from_cost():
    # dispersed-like: 4x the scores per token at the long length, each score as cheap as before.
    def case(n, seconds, scores):
        return dict(
            family="dispersed",
            n=n,
            status="ok",
            seconds=seconds,
            us_per_token=1e6 * seconds / n,
            scores=scores,
            ns_per_score=1e9 * seconds / scores,
            memory=dict(total_bytes=n),
        )

    ch = bench.checks([case(1024, 1.0, 1000), case(16384, 64.0, 64000)])["dispersed"]
    assert ch["time_per_token"]["ratio"] == 4.0 and not ch["time_per_token"]["passed"]
    assert ch["time_per_score"]["ratio"] == 1.0 and ch["time_per_score"]["passed"]
    ch = bench.checks([case(1024, 1.0, 1000), case(16384, 64.0, 16000)])["dispersed"]
    assert ch["time_per_score"]["ratio"] == 4.0 and not ch["time_per_score"]["passed"]


def test_family_specs_carry_module_options():
    assert bench.parse_family("linear") == ("linear", {})
    assert bench.parse_family("linear:chunk_size=256,causal=true") == ("linear", {"chunk_size": 256, "causal": True})
    assert bench.attention_scores("dispersed:window=8", 1000) > bench.attention_scores("dispersed", 1000)
    with pytest.raises(ValueError, match="'chunk_sise' is not an option.*chunk_size"):
        bench.parse_family("linear:chunk_sise=3")
    with pytest.raises(ValueError, match="not key=value"):
        bench.parse_family("linear:chunk_size")
    with pytest.raises(ValueError, match="unknown attention 'linea'"):
        bench.parse_family("linea")
    s = bench.Settings(dim=16, num_heads=2, qkv_dim=16, repeats=1)
    small, whole = bench.run(["linear:chunk_size=4", "linear:chunk_size=64"], [32], s, log=lambda _: None)
    assert small["status"] == whole["status"] == "ok" and small["family"] == "linear:chunk_size=4"


def test_projections_reference_row(tmp_path):
    assert bench.parse_family("projections") == ("projections", {})
    with pytest.raises(ValueError, match="has no options"):
        bench.parse_family("projections:chunk_size=4")
    s = bench.Settings(dim=16, num_heads=2, qkv_dim=16, repeats=1)
    (case,) = bench.run(["projections"], [32], s, log=lambda _: None)
    assert case["status"] == "ok" and case["memory"]["total_bytes"] > 0
    paths = bench.write_report([case], s, tmp_path, ["bench_attention.py"])
    assert "reference row, not a family" in paths["md"].read_text()


def _report() -> dict:
    """A recorded benchmark: softmax stops at N=64 (its 128 case was skipped with a predicted memory)."""

    def case(family, n, seconds, mib):
        return dict(
            family=family,
            n=n,
            status="ok",
            seconds=seconds,
            us_per_token=1e6 * seconds / n,
            memory=dict(total_bytes=mib * 2**20),
        )

    cases = [case(f, n, n / 1e4 * k, n / 8 * k) for n in (32, 64, 128) for k, f in ((1, "projections"), (2, "luna"))]
    cases += [
        case("softmax", 32, 0.01, 40),
        case("softmax", 64, 0.04, 160),
        dict(
            family="softmax",
            n=128,
            status="skipped",
            memory=dict(total_bytes=640 * 2**20),
            reason="predicted memory 0.6 GiB > limit 0.5 GiB (--max-memory-gb)",
        ),
    ]
    s = bench.Settings(batch=2, dim=16, num_heads=2, qkv_dim=16, repeats=3)
    env = dict(device_kind="cpu", backend="cpu", cpu_count=2, jax_version="0", command="x")
    return {"environment": env, "settings": bench.dataclasses.asdict(s), "cases": cases, "checks": bench.checks(cases)}


def test_plot_keeps_the_legend_off_the_data_and_says_where_softmax_stops(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    bench.plot(_report(), tmp_path / "scaling.png")
    (fig,) = figures
    assert (tmp_path / "scaling.png").stat().st_size > 0
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1  # one legend, beside the axes
    fig.canvas.draw()  # lay out again at the figure's own dpi before comparing extents
    legend = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
    assert all(legend.x0 >= ax.get_window_extent().x1 for ax in fig.axes)
    assert "batch 2, width 16, 2 heads" in fig.get_suptitle()
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "softmax: N = 128 skipped" in notes and "softmax 128: predicted, not run" in notes
    assert "predicted memory 0.6 GiB" in fig.get_supxlabel()


def test_replot_redraws_from_the_json_without_running(tmp_path, monkeypatch):
    import importlib
    from pathlib import Path

    (tmp_path / "attention_scaling.json").write_text(json.dumps(_report()))
    monkeypatch.setattr(bench, "run", lambda *a, **k: pytest.fail("--replot must not measure"))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "scripts"))
    importlib.import_module("bench_attention").main(["--replot", str(tmp_path / "attention_scaling.json")])
    assert (tmp_path / "attention_scaling.png").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_scaling.json", "attention_scaling.png"]
