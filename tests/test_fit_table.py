"""The fit table's rows, its ladder of settings and its rendering (lra_lab/preflight/fit_table.py), with a
stand-in for the compile so the logic is checked without a GPU compiler."""

from __future__ import annotations

from lra.console import GIB
from lra_lab.preflight import fit_table


def test_rows_are_table_1_then_each_family_per_task_once():
    rows = fit_table.rows()
    keys = [(r["task"], r["variant"]) for r in rows]
    assert len(keys) == len(set(keys))
    table1 = [r for r in rows if r["source"] == "Table 1"]
    assert len(table1) == 28  # 4 tasks x (Transformer, Luna-1/16/256, ConvLuna-1/16/256)
    assert ("matching", "ConvLuna-256") in keys and ("pathfinder", "Dispersed") in keys
    some = fit_table.rows(tasks=("listops", "text"), variants=("Transformer", "Dispersed"))
    assert [(r["task"], r["variant"]) for r in some] == [
        ("text", "Transformer"),
        ("listops", "Transformer"),
        ("listops", "Dispersed"),
        ("text", "Dispersed"),
    ]
    assert all(
        r["config"].startswith("configs/") and r["config"].endswith("paper") for r in rows if r["source"] == "family"
    )


def fake_compile(needs_gib: dict[str, float], capacity_gib: dict[str, float], calls: list):
    """A compile whose memory is the config's need divided by the microbatch count (remat halves it)."""

    def compile_one(config, target, *, python, use_cache, overrides, quiet):
        calls.append((config, target, dict(overrides)))
        gib = needs_gib[config] / overrides.get("microbatches", 1) / (2 if overrides.get("model.remat") else 1)
        fits = gib <= 0.95 * capacity_gib[target]
        return {
            "memory": {"total": gib * GIB},
            "verdict": "fits" if fits else "does not fit",
            "verdict_detail": f"{gib:.1f} GiB",
            "cached": False,
        }

    return compile_one


def test_the_first_setting_that_fits_is_chosen_and_larger_cards_reuse_a_fit(monkeypatch):
    monkeypatch.setattr(
        fit_table,
        "rows",
        lambda tasks, families, variants: [
            {"task": "text", "variant": "Transformer", "source": "Table 1", "config": "big"},
            {"task": "text", "variant": "Luna-16", "source": "Table 1", "config": "small"},
            {"task": "text", "variant": "Huge", "source": "family", "config": "huge"},
        ],
    )
    calls: list = []
    compile_one = fake_compile({"big": 130.0, "small": 5.0, "huge": 10_000.0}, {"h100": 74.5, "h200": 131.3}, calls)
    out = fit_table.build(["h100", "h200"], "python", "h100", compile_one=compile_one)
    big, small, huge = ({t: r["targets"][t] for t in ("h100", "h200")} for r in out)
    assert big["h100"]["setting"] == "2 microbatches" and big["h100"]["memory_gib"] == 65.0
    # 130 GiB is over 95% of the H200's 131 GiB too: compiled for it, not inferred from the H100's fit
    assert big["h200"]["setting"] == "2 microbatches" and "inferred_from" not in big["h200"]
    assert small["h100"]["setting"] == "as configured" and small["h200"]["inferred_from"] == "h100"
    assert not huge["h100"]["fits"] and len(huge["h100"]["tried"]) == len(fit_table.LADDER)
    assert ("small", "h200", {}) not in calls  # inferred, not compiled again
    text = fit_table.markdown(
        {
            "targets": ["h100", "h200"],
            "target_descriptions": ["1 x H100", "1 x H200"],
            "tasks": ["text"],
            "ladder": [[n, o] for n, o in fit_table.LADDER],
            "infer_from": "h100",
            "rows": out,
        }
    )
    assert "| text | Transformer | Table 1 | `big` | fits, 2 microbatches, 65.00 GiB |" in text
    assert "(the h100 program)" in text and "2 of 3 rows fit every target" in text


def test_a_setting_the_config_refuses_is_a_cannot_tell_and_the_ladder_goes_on():
    from lra_lab.preflight.check import PreflightError

    def compile_one(config, target, *, python, use_cache, overrides, quiet):
        if overrides.get("microbatches") == 2:
            raise PreflightError("microbatches=2 does not divide the batch")
        fits = overrides.get("microbatches") == 4
        return {"memory": {"total": GIB}, "verdict": "fits" if fits else "does not fit", "verdict_detail": ""}

    f = fit_table.fit("c", "h100", "python", compile_one=compile_one)
    assert f["setting"] == "4 microbatches"
    assert [t["verdict"] for t in f["tried"]] == ["does not fit", "cannot tell", "fits"]
