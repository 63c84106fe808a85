"""Rules as data (lra_lab.reproduce.rules): the shared statistics equal the hand-written ones the registered
judges ran, on the committed records' numbers; a registration's digest is canonical and moves with
every field; each kind's judge reads only its design's records."""

from __future__ import annotations

import dataclasses
import math

import pytest

from lra_lab.reproduce import convluna_confirm, convluna_long, evidence, registry, rules


def _hand_tost(a: dict[int, float], b: dict[int, float], margin: float) -> tuple[float, float, int]:
    """The hand-written paired TOST the registered judges ran (``convluna_confirm.tost_p`` at fe1e147)."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    diffs = [a[k] - b[k] for k in seeds]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0:
        return mean, (0.0 if abs(mean) < margin else 1.0), n
    se = sd / math.sqrt(n)
    p_lower = float(stats.t.sf((mean + margin) / se, n - 1))
    p_upper = float(stats.t.cdf((mean - margin) / se, n - 1))
    return mean, max(p_lower, p_upper), n


def _hand_beyond(a: dict[int, float], b: dict[int, float], margin: float) -> float:
    """The hand-written one-sided p beyond the margin (``convluna_confirm._beyond_margin_p`` at fe1e147)."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    diffs = [a[k] - b[k] for k in seeds]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0:
        return 0.0 if abs(mean) > margin else 1.0
    return float(stats.t.sf((abs(mean) - margin) / (sd / math.sqrt(n)), n - 1))


def _committed_pairs() -> list[tuple[dict[int, float], dict[int, float]]]:
    """The committed records' accuracies of every pair an equivalence rule tests that has records."""
    pairs = []
    for module in (convluna_confirm, convluna_long):
        acc = {label: rules.accuracies(registry.REPO, module.DESIGN, label)[0] for label in module.MEMORY_ROWS}
        base = acc[module.MEMORY_ROWS[1]]
        pairs += [
            (acc[label], base)
            for label in (module.MEMORY_ROWS[0], module.MEMORY_ROWS[2])
            if len(set(acc[label]) & set(base)) >= 2
        ]
    return pairs


def test_tost_and_beyond_margin_equal_the_hand_written_helpers_on_the_committed_records():
    pairs = _committed_pairs()
    if not pairs:
        pytest.skip("no committed equivalence records in this checkout")
    for a, b in pairs:
        for margin in (1.0, 2.0, 5.0):
            mean, p, n = rules.tost_p(a, b, margin)
            hand_mean, hand_p, hand_n = _hand_tost(a, b, margin)
            assert (mean, n) == (hand_mean, hand_n)
            assert p == pytest.approx(hand_p, rel=1e-9, abs=1e-15) and f"{p:.3g}" == f"{hand_p:.3g}"
            beyond = rules.beyond_margin_p(a, b, margin)
            assert beyond == pytest.approx(_hand_beyond(a, b, margin), rel=1e-9, abs=1e-15)
    assert len(pairs) >= 2  # the confirmatory study's two sizes against 16 (and the follow-up's, once it ran)


def test_zero_spread_decides_by_the_mean_as_before():
    a, b = {0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.5}
    assert rules.tost_p(a, b, 1.0) == _hand_tost(a, b, 1.0) == (0.5, 0.0, 2)
    assert rules.beyond_margin_p(a, b, 0.2) == _hand_beyond(a, b, 0.2) == 0.0
    with pytest.raises(ValueError, match="at least 2 seeds"):
        rules.tost_p({0: 1.0}, {0: 0.0}, 1.0)


def test_mean_std_is_numpy_and_equals_the_hand_written_formula_on_committed_accuracies():
    acc = convluna_confirm.rows_with_runs(registry.REPO)
    if not acc:
        pytest.skip("no committed confirmatory records in this checkout")
    for values in acc.values():
        v = list(values.values())
        mean = sum(v) / len(v)
        sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1))
        got = evidence.mean_std(v)
        assert got == pytest.approx((mean, sd), rel=1e-12)
        assert evidence.fmt_mean_std(v) == f"{mean:.1f} +- {sd:.1f}% ({len(v)} seeds)"
    assert evidence.mean_std([3.0]) == (3.0, 0.0)


def test_holm_is_statsmodels_step_down():
    assert evidence.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_a_registration_digest_is_canonical_and_moves_with_every_field():
    reg = convluna_long.TABLE1
    same = rules.Registration(dataclasses.replace(reg.design), dataclasses.replace(reg.test), reg.first_form)
    assert same.digest() == reg.digest() and len(reg.digest()) == 64
    changed = [
        dataclasses.replace(reg, design=dataclasses.replace(reg.design, seeds=reg.design.seeds[:-1])),
        dataclasses.replace(reg, design=dataclasses.replace(reg.design, steps=4000)),
        dataclasses.replace(reg, test=dataclasses.replace(reg.test, min_gain=1.0)),
        dataclasses.replace(reg, test=dataclasses.replace(reg.test, alpha=0.01)),
        dataclasses.replace(reg, first_form=rules.DATA),
    ]
    assert len({c.digest() for c in changed} | {reg.digest()}) == len(changed) + 1
    with pytest.raises(ValueError, match="first_form"):
        rules.Registration(reg.design, reg.test, "words")


def test_each_kind_lists_the_rows_it_reads_and_the_records_follow():
    assert convluna_confirm.ABLATION.labels() == (*convluna_confirm.PAIR, *convluna_confirm.ABLATIONS)
    assert convluna_long.MEMORY_SIZE.labels() == convluna_long.MEMORY_ROWS
    records = convluna_long.TABLE1.records()
    assert len(records) == 2 * len(convluna_long.SEEDS)
    assert records[0] == f"{convluna_long.RUNS}/listops_convluna-16-reference/seed30/result.json"


def test_a_record_of_another_design_is_missing_with_the_field_named(tmp_path):
    from test_reproduce_long import _pair, _row

    _pair(5.0)(tmp_path)
    _row(tmp_path, convluna_long.PAIR[1], [40.0] * 20, settings={**convluna_long.SETTINGS, "warmup_steps": 10})
    outcome = convluna_long.TABLE1.judge(tmp_path)
    assert outcome.verdict == registry.INCOMPLETE
    assert any("warmup_steps=10, the design 1000" in m for m in outcome.missing), outcome.missing
