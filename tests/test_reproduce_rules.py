"""Issue 37 point 3: every claim's judge, fed synthetic records, gives each verdict its rule's words name.

``CASES`` holds, per testable claim, one record writer per branch (reproduced / partly / not
reproduced) with the verdict the words promise; a claim the registry adds without its cases fails
``test_every_testable_claim_has_a_case_for_each_branch_its_words_name``, and a judge that can say
"partly" while its words do not (or the reverse) fails ``test_words_and_code_name_the_same_branches``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from lra_lab.experiments import sweep
from lra_lab.reproduce import (
    agglomerative,
    cheap_linear,
    cheap_linear_speedup,
    clustered,
    clustered_prop2,
    convluna,
    dispersed,
    dispersed_formulas,
    registry,
)
from lra_lab.reproduce.registry import HOLDS_BY_CONSTRUCTION, NOT_REPRODUCED, PARTLY, REPRODUCED
from test_reproduce import _ablation_rows, _attribution_records, _masked_copy, _seeds, _write

Writer = Callable[[Path], None]
LUNA = [0.350, 0.352, 0.348, 0.351, 0.349]
BIG = [0.400, 0.405, 0.398, 0.402, 0.401]  # +5 points, consistent
SMALL = [0.360, 0.362, 0.358, 0.361, 0.359]  # +1 point, consistent: significant but under MIN_GAIN
NONE = [0.351, 0.349, 0.352, 0.348, 0.350]  # no gain


# ------------------------------------------------------------------------------------------ convluna


def _pair(winner: str, loser: str, gain: list[float]) -> Writer:
    def write(root: Path) -> None:
        _seeds(root, loser, LUNA)
        _seeds(root, winner, gain)

    return write


_BEATS = {  # claim -> (winner, loser): the rows of its _beats judge
    "table1-listops": ("ConvLuna-16 (reference)", "Luna-16 (reference)"),
    "table1-defaults": ("ConvLuna-16", "Luna-16"),
    "init-lead": (convluna.revert_label("model.param_init", "xavier"), "Luna-16 (reference) [model.param_init=xavier]"),
    "table1-vs-transformer": ("ConvLuna-16 (reference)", "Transformer"),
}


def _attribution(mask_padding_row: list[float] | None) -> Writer:
    """Every reverted row at ConvLuna's accuracy, except mask_padding's (when given)."""

    def write(root: Path) -> None:
        def row(field: str) -> list[float]:
            if field == "model.mask_padding" and mask_padding_row is not None:
                return mask_padding_row
            return [a - 0.001 for a in BIG]

        _attribution_records(root, BIG, LUNA, row)

    return write


def _memory_degradation(uniform: int, collapsed: int) -> Writer:
    def write(root: Path) -> None:
        runs, pair = [], 0
        for suffix in ("", " (reference)"):
            for m in (16, 256):
                runs.append(
                    {
                        "variant": f"Luna-{m}{suffix}",
                        "stats": {
                            "block1/packing_entropy": 0.9 if pair < uniform else 0.1,
                            "block1/distinct_vectors": 1 if pair < collapsed else m,
                        },
                    }
                )
                runs.append(
                    {
                        "variant": f"ConvLuna-{m}{suffix}",
                        "stats": {"block1/packing_entropy": 0.5, "block1/distinct_vectors": m},
                    }
                )
                pair += 1
        _write(root, convluna.MEMDEG, {"runs": runs})

    return write


def _memory_size(luna_effect: bool) -> Writer:
    def write(root: Path) -> None:
        for family in ("Luna", "ConvLuna"):
            for i, m in enumerate((1, 16, 256)):  # each size best on some seeds: no effect
                _seeds(root, f"{family}-{m} (reference)", [0.35 + 0.01 * ((k + i) % 3) for k in range(5)])
        if luna_effect:  # a strong, consistent effect of memory size for Luna
            for m, shift in ((1, 0.0), (16, 0.05), (256, 0.10)):
                _seeds(root, f"Luna-{m} (reference)", [0.30 + shift + 0.001 * k for k in range(5)])

    return write


CONVLUNA: dict[str, dict[str, tuple[Writer, str]]] = {
    **{
        claim: {
            "reproduced": (_pair(w, lo, BIG), REPRODUCED),
            "partly": (_pair(w, lo, SMALL), PARTLY),
            "not reproduced": (_pair(w, lo, NONE), NOT_REPRODUCED),
        }
        for claim, (w, lo) in _BEATS.items()
    },
    "reference-attribution": {
        "reproduced": (_attribution(None), REPRODUCED),
        # masks on loses 3 points but stays significantly above Luna
        "partly": (_attribution([a - 0.03 + 0.001 * k for k, a in enumerate(BIG)]), PARTLY),
        "not reproduced": (_attribution(LUNA), NOT_REPRODUCED),  # masks on loses the whole gain
        "not reproduced (no gain)": (
            lambda root: _attribution_records(root, NONE, LUNA, lambda f: NONE),
            NOT_REPRODUCED,
        ),
    },
    "table3-listops": {
        "reproduced": (lambda root: _ablation_rows(root, LUNA, BIG, [a - 0.01 for a in BIG], LUNA), REPRODUCED),
        "partly": (lambda root: _ablation_rows(root, LUNA, BIG, NONE, LUNA), PARTLY),
        "not reproduced": (lambda root: _ablation_rows(root, LUNA, BIG, NONE, BIG), NOT_REPRODUCED),
        "not reproduced (no gain)": (lambda root: _ablation_rows(root, LUNA, NONE), NOT_REPRODUCED),
    },
    "fig2-memory-size": {
        "reproduced": (_memory_size(False), REPRODUCED),
        "not reproduced": (_memory_size(True), NOT_REPRODUCED),
    },
    "fig1-memory-degradation": {
        "reproduced": (_memory_degradation(4, 4), REPRODUCED),
        "partly": (_memory_degradation(4, 2), PARTLY),
        "not reproduced": (_memory_degradation(3, 3), NOT_REPRODUCED),
    },
}


# ----------------------------------------------------------------------------------------- clustered


def _fig5(improved_fails: int, clustered_fails: Callable[[int], int], full_solves: bool = True) -> Writer:
    """``improved_fails`` of improved's cells at L=127 unsolved; clustered unsolved at its fewest clusters."""

    def acc(family: str, length: int, c: int) -> float:
        if family == "full":
            return 1.0 if full_solves else 0.2
        if family == "improved_clustered":
            return 0.3 if length == 127 and clustered.CLUSTERS.index(c) < improved_fails else 1.0
        return 0.3 if clustered.CLUSTERS.index(c) < clustered_fails(length) else 1.0

    return lambda root: _masked_copy(root, acc)


def _swap(gaps: dict[int, tuple[float, float]]) -> Writer:
    """clusters -> (clustered's, improved's) accuracy gap to softmax, in points."""

    def write(root: Path) -> None:
        rows = [dict(attention="softmax", attention_kwargs={}, accuracy=0.36)]
        for c, (gc, gi) in gaps.items():
            rows += [
                dict(attention="clustered", attention_kwargs={"num_clusters": c}, accuracy=0.36 - gc / 100),
                dict(attention="improved_clustered", attention_kwargs={"num_clusters": c}, accuracy=0.36 - gi / 100),
            ]
        _write(root, clustered.SWAP, {"rows": rows})

    return write


def _prop2(violations: int) -> Writer:
    row = dict(
        queries=100,
        violations=violations,
        max_excess=0.1 if violations else -0.2,
        mean_error_clustered=0.5,
        mean_error_improved=0.3,
    )
    return lambda root: _write(root, clustered_prop2.RECORD, {"rows": [row, {**row, "violations": 0}]})


def _swap_copy(full: float, clustered_acc: Callable[[int], float], improved_acc: Callable[[int], float]) -> Writer:
    """The L = 63 swap record: full attention's run with its weights evaluated as each clustered variant."""

    def write(root: Path) -> None:
        swaps = [
            dict(attention=f, attention_kwargs={"num_clusters": c}, masked_accuracy=acc(c))
            for f, acc in (("clustered", clustered_acc), ("improved_clustered", improved_acc))
            for c in clustered.CLUSTERS
        ]
        run = dict(attention="softmax", attention_kwargs={}, masked_accuracy=full, swap_eval=swaps)
        _write(root, clustered.SWAP_COPY, {"runs": [run], "settings": {"steps": clustered.STEPS[63], "seq_len": 63}})

    return write


def _budget(full: float, improved_solved: int) -> Writer:
    """The L = 63, 2,400-step record: improved clustered solves its ``improved_solved`` largest counts."""

    def acc(family: str, length: int, c: int) -> float:
        if family == "full":
            return full
        if family == "improved_clustered":
            return 1.0 if clustered.CLUSTERS.index(c) >= len(clustered.CLUSTERS) - improved_solved else 0.4
        return 0.2

    def write(root: Path) -> None:
        runs = [dict(attention="softmax", attention_kwargs={}, masked_accuracy=acc("full", 63, 0))]
        runs += [
            dict(attention=f, attention_kwargs={"num_clusters": c}, masked_accuracy=acc(f, 63, c))
            for f in ("clustered", "improved_clustered")
            for c in clustered.CLUSTERS
        ]
        _write(root, clustered.BUDGET, {"runs": runs, "settings": {"steps": clustered.BUDGET_STEPS, "seq_len": 63}})

    return write


def _fig4(clustered_power: float, memory_power: float) -> Writer:
    """Full attention ~ N^2 in time and memory; the clustered families ~ 300 N^power (faster from N ~ 300^(1/(2-p)))."""

    def write(root: Path) -> None:
        cases = []
        for n in clustered.FIG4_LENGTHS:
            for family in clustered.FIG4_FAMILIES:
                full = family == clustered.FIG4_FAMILIES[0]
                seconds = 1e-9 * n**2 if full else 3e-7 * n**clustered_power * (1.2 if "improved" in family else 1)
                memory = 1e3 * n**2 if full else 3e5 * n**memory_power
                cases.append(dict(family=family, n=n, status="ok", seconds=seconds, memory={"total_bytes": memory}))
        _write(root, clustered.FIG4, {"cases": cases})

    return write


GROWING = {31: 0, 63: 1, 127: 3}.get
CLUSTERED: dict[str, dict[str, tuple[Writer, str]]] = {
    "fig5-masked-copy": {
        "reproduced": (_fig5(0, GROWING), REPRODUCED),
        # clustered solves everything at L=31: the trend needs no failure at every length (the code was meant)
        "reproduced (clustered solves the shortest length)": (_fig5(0, {31: 0, 63: 0, 127: 2}.get), REPRODUCED),
        "partly (improved fails a cell, clustered's trend holds)": (_fig5(2, GROWING), PARTLY),
        "partly (improved solves all, clustered never fails)": (_fig5(0, lambda L: 0), PARTLY),
        "not reproduced": (_fig5(4, {31: 3, 63: 1, 127: 0}.get), NOT_REPRODUCED),
        "not reproduced (full attention solves no length)": (_fig5(0, GROWING, full_solves=False), NOT_REPRODUCED),
    },
    "prop2-approximation": {
        "reproduced": (_prop2(0), HOLDS_BY_CONSTRUCTION),
        "not reproduced": (_prop2(1), NOT_REPRODUCED),
    },
    "table1-swap-masked-copy": {
        "reproduced": (_swap_copy(1.0, lambda c: 0.5, lambda c: 0.99), REPRODUCED),
        # far better at 15 clusters, 0.5 points worse at 100
        "partly": (_swap_copy(1.0, lambda c: 0.5 if c == 15 else 1.0, lambda c: 0.995 if c == 100 else 1.0), PARTLY),
        "not reproduced": (_swap_copy(1.0, lambda c: 0.8, lambda c: 0.8), NOT_REPRODUCED),
        "not reproduced (full attention does not solve L = 63)": (
            _swap_copy(0.5, lambda c: 0.2, lambda c: 0.5),
            NOT_REPRODUCED,
        ),
    },
    "fig5-L63-budget": {
        "reproduced": (_budget(1.0, 4), REPRODUCED),
        "partly": (_budget(1.0, 2), PARTLY),
        "not reproduced": (_budget(1.0, 1), NOT_REPRODUCED),
        "not reproduced (full attention does not solve L = 63)": (_budget(0.5, 4), NOT_REPRODUCED),
    },
    "fig4-cost": {
        "reproduced": (_fig4(1.0, 1.0), REPRODUCED),
        "partly (time only)": (_fig4(1.0, 2.0), PARTLY),
        "partly (memory only)": (_fig4(2.0, 1.0), PARTLY),
        "not reproduced": (_fig4(2.0, 2.0), NOT_REPRODUCED),
    },
    "table1-swap-eval": {
        "reproduced": (_swap({8: (5.0, 0.5), 16: (1.0, 0.0)}), REPRODUCED),
        "partly": (_swap({8: (5.0, 0.5), 16: (0.0, 0.5)}), PARTLY),
        "not reproduced": (_swap({8: (0.5, 0.2), 16: (0.0, 0.0)}), NOT_REPRODUCED),
    },
}


# ------------------------------------------------------------------------------------ agglomerative


def _timing(full_power: float, agg_power: float, agg_scale: float) -> Writer:
    """Seconds ~ N^power for full and agglomerative, masked and unmasked (agglomerative scaled)."""

    def write(root: Path) -> None:
        rows = []
        for suffix in ("", " causal"):
            for n in agglomerative.LENGTHS:
                for layer, t in (("full", 1e-6 * n**full_power), ("agglomerative", agg_scale * 1e-6 * n**agg_power)):
                    rows.append(dict(layer=layer + suffix, length=n, seconds=t, sem=0.0, replicas=[t] * 5))
        _write(
            root,
            agglomerative.RECORD,
            {"rows": rows, "batch": agglomerative.BATCH, "dim": agglomerative.DIM, "heads": agglomerative.HEADS},
        )
        small = [
            dict(r, layer=r["layer"] + core)
            for r in rows
            for core in ("", agglomerative.CORE)
            if r["length"] in agglomerative.PROJECTIONS_LENGTHS
        ]
        _write(root, agglomerative.PROJECTIONS, {"rows": small})

    return write


AGGLOMERATIVE: dict[str, dict[str, tuple[Writer, str]]] = {
    "fig1-timing": {
        "reproduced": (_timing(2.0, 1.0, 300.0), REPRODUCED),  # crossover at N = 512
        "partly": (_timing(2.0, 1.5, 30.0), PARTLY),  # crossover at N = 1024, agglomerative not linear
        # faster at every length (the crossover below the grid), slopes as the paper's: the crossover
        # is not at a few hundred elements
        "partly (faster at every length)": (_timing(2.0, 1.0, 1.0), PARTLY),
        "not reproduced": (_timing(1.0, 1.5, 300.0), NOT_REPRODUCED),
    },
}


# ---------------------------------------------------------------------------------------- dispersed


def _counts(
    dispersed_off: set[int], window_off: set[int] = frozenset(), module_off: bool = False, per_query: float = 100.0
) -> Writer:
    """Table 1's rows with ours off by one at the given N; growth at ``per_query`` keys per query."""

    def write(root: Path) -> None:
        rows = [
            dict(
                n=n,
                paper_full=f,
                paper_window=w,
                paper_dispersed=d,
                full=n * n,
                window=w + (n in window_off),
                dispersed=d + (n in dispersed_off),
                module=(d + module_off) if n in dispersed.MODULE_LENGTHS else None,
            )
            for n, (f, w, d) in dispersed.PAPER_TABLE1.items()
        ]
        growth = [dict(n=n, scores=int(per_query * n)) for n in dispersed.GROWTH_LENGTHS]
        _write(root, dispersed.RECORD, {"rows": rows, "growth": growth, "keys_per_query_bound": 363, "window": 4})

    return write


def _formulas(equation_10_off: set[int], wide_window: Callable[[int], float]) -> Writer:
    """Equation 10 off by one at the given N; window 16's deviation ``wide_window(N)`` times w = 4's."""

    def write(root: Path) -> None:
        rows = [
            dict(
                n=n,
                pattern=100,
                equation_10=100 + (n in equation_10_off),
                algorithm_1_plus_window=100,
                deviation={"4": 0.01, "2": 0.01, "8": 0.01, "16": 0.01 * wide_window(n)},
            )
            for n in dispersed_formulas.LENGTHS
        ]
        _write(root, dispersed_formulas.RECORD, {"rows": rows})

    return write


def SAME(n: int) -> float:  # window 16's deviation equal to w = 4's
    return 1.0


DISPERSED: dict[str, dict[str, tuple[Writer, str]]] = {
    "equation-10": {
        "reproduced": (_formulas(set(), SAME), REPRODUCED),
        "partly": (_formulas({10, 50}, SAME), PARTLY),
        "not reproduced": (_formulas(set(dispersed_formulas.LENGTHS), SAME), NOT_REPRODUCED),
    },
    "window-invariance": {
        "reproduced": (_formulas(set(), lambda n: 1.09), REPRODUCED),
        "partly": (_formulas(set(), lambda n: 1.5 if n < dispersed_formulas.LONG else 1.05), PARTLY),
        "not reproduced": (_formulas(set(), lambda n: 1.5 if n == 16384 else 1.0), NOT_REPRODUCED),
    },
    "table1-counts": {
        "reproduced": (_counts(set()), HOLDS_BY_CONSTRUCTION),
        "partly": (_counts({50}), PARTLY),
        "partly (the module's count differs)": (_counts(set(), module_off=True), PARTLY),
        "not reproduced": (_counts(set(dispersed.PAPER_TABLE1)), NOT_REPRODUCED),
    },
    "linear-complexity": {
        "reproduced": (_counts(set(), per_query=362.9), HOLDS_BY_CONSTRUCTION),
        "not reproduced": (_counts(set(), per_query=363.5), NOT_REPRODUCED),
    },
}


# ------------------------------------------------------------------------------------- cheap linear


def _table1(lookup_lin: float, lookup_soft: float, enc_ratio: float, linear_bytes: int | None = None) -> Writer:
    """Both runs: lookup times grow by the given factors over the lengths; encoding ratio ``enc_ratio``."""

    def write(root: Path) -> None:
        lo, hi = min(cheap_linear.LENGTHS), max(cheap_linear.LENGTHS)

        def grow(n: int, factor: float) -> float:
            return factor ** ((n - lo) / (hi - lo))

        run = [
            dict(
                n=n,
                representation_bytes_linear=linear_bytes or cheap_linear.WIDTH**2 * 4,
                representation_bytes_softmax=n * cheap_linear.WIDTH * 4,
                lookup_seconds_linear=grow(n, lookup_lin),
                lookup_seconds_softmax=grow(n, lookup_soft),
                encode_seconds_linear=enc_ratio,
                encode_seconds_softmax=1.0,
            )
            for n in cheap_linear.LENGTHS
        ]
        _write(root, cheap_linear.RECORD, {"runs": [run, run]})

    return write


def _speedup(*speedups: float) -> Writer:
    timings = [dict(lookup_seconds_linear=1.0, lookup_seconds_softmax=x, speedup=x) for x in speedups]
    return lambda root: _write(root, cheap_linear_speedup.RECORD, {"timings": timings, "documents": 512})


CHEAP_LINEAR: dict[str, dict[str, tuple[Writer, str]]] = {
    "lookup-speedup": {
        "reproduced": (_speedup(6.0, 9.0), REPRODUCED),
        "partly": (_speedup(6.0, 2.0), PARTLY),  # faster in both, one timing outside [3.75, 15]
        "not reproduced": (_speedup(6.0, 0.9), NOT_REPRODUCED),
    },
    "table1-lookup": {
        "reproduced": (_table1(1.2, 60.0, 1.5), HOLDS_BY_CONSTRUCTION),
        "partly": (_table1(1.2, 2.0, 1.5), PARTLY),
        "not reproduced": (_table1(10.0, 60.0, 1.5), NOT_REPRODUCED),
    },
    "table1-representation": {
        "reproduced": (_table1(1.2, 60.0, 1.5), HOLDS_BY_CONSTRUCTION),
        "not reproduced": (_table1(1.2, 60.0, 1.5, linear_bytes=4), NOT_REPRODUCED),
    },
    "table1-encoding": {
        "reproduced": (_table1(1.2, 60.0, 1.5), REPRODUCED),
        "partly": (_table1(1.2, 60.0, 4.0), PARTLY),
        "not reproduced": (_table1(1.2, 60.0, 0.9), NOT_REPRODUCED),
    },
}

CASES: dict[str, dict[str, dict[str, tuple[Writer, str]]]] = {
    "convluna": CONVLUNA,
    "clustered": CLUSTERED,
    "agglomerative": AGGLOMERATIVE,
    "dispersed": DISPERSED,
    "cheap_linear": CHEAP_LINEAR,
}


def test_agglomerative_reports_the_attention_alone(tmp_path):
    """The projections record's cores are reported in the detail; without it the claim is incomplete."""
    _timing(2.0, 1.0, 300.0)(tmp_path)
    outcome = registry.find("agglomerative", "fig1-timing")[1][0].outcome(tmp_path)
    assert "attention alone, projections excluded" in outcome.detail and "unmasked" in outcome.detail
    (tmp_path / agglomerative.PROJECTIONS).unlink()
    assert registry.find("agglomerative", "fig1-timing")[1][0].outcome(tmp_path).missing == (agglomerative.PROJECTIONS,)


def _branch_verdict(expected: str) -> str:
    """The rule's own word for a verdict (a construction claim's "reproduced" is reported renamed)."""
    return REPRODUCED if expected == HOLDS_BY_CONSTRUCTION else expected


@pytest.mark.parametrize(
    "paper, claim_id, branch",
    [
        (paper, claim_id, branch)
        for paper, claims in CASES.items()
        for claim_id, branches in claims.items()
        for branch in branches
    ],
)
def test_each_branch_gives_its_verdict(tmp_path, paper, claim_id, branch):
    write, expected = CASES[paper][claim_id][branch]
    write(tmp_path)
    outcome = registry.find(paper, claim_id)[1][0].outcome(tmp_path)
    assert outcome.verdict == expected, outcome


def _named_branches(rule: str) -> set[str]:
    """The verdicts a rule's words name: reproduced always, partly when said, and the else branch."""
    named = {REPRODUCED, NOT_REPRODUCED}
    if "partly" in rule:
        named.add(PARTLY)
    return named


def _all_cases() -> dict[str, dict[str, dict[str, tuple[Writer, str]]]]:
    """These cases and those of the claims whose tests live in their own file (run there, counted here)."""
    from test_listops_paper_study import PAPER_CASES
    from test_reproduce_agglomerative_table1 import TABLE1_CASES
    from test_reproduce_appendix import APPENDIX_CASES
    from test_reproduce_confirm import CONFIRM_CASES
    from test_reproduce_long import LONG_CASES
    from test_reproduce_recall import RECALL_CASES

    return {
        **CASES,
        "convluna": {**CASES["convluna"], **CONFIRM_CASES, **APPENDIX_CASES, **LONG_CASES, **PAPER_CASES},
        "agglomerative": {**CASES["agglomerative"], **TABLE1_CASES},
        "cheap_linear": {**CASES["cheap_linear"], **RECALL_CASES},
    }


def test_every_testable_claim_has_a_case_for_each_branch_its_words_name():
    all_cases = _all_cases()
    for key, paper in registry.papers().items():
        for claim in paper.claims:
            if not claim.testable:
                continue
            cases = all_cases.get(key, {}).get(claim.id)
            assert cases, f"{key} {claim.id}: no synthetic-record cases in tests/test_reproduce_rules.py"
            covered = {_branch_verdict(expected) for _, expected in cases.values()}
            assert covered == _named_branches(claim.rule), (key, claim.id, covered)


def test_dispersed_formulas_at_the_hand_worked_length():
    """N = 10, w = 4, worked by hand from the paper: eq. 3 gives 44 (Table 1's window column), Algorithm 1
    18 (62 - 44), and equation 10 as printed (x = 1, S_1 = 3, remainder 3 x 0) 47."""
    assert dispersed_formulas.window_count(10, 4) == 44
    assert dispersed_formulas.algorithm_1(10, 4) == 18
    assert dispersed_formulas.equation_10(10, 4) == 47


def _judge_source(judge: Callable) -> str:
    """The judge's source and that of the functions of its own module it calls (a shared rule helper)."""
    sources = [inspect.getsource(judge)]
    for name in judge.__code__.co_names:
        helper = judge.__globals__.get(name)
        if inspect.isfunction(helper) and helper.__module__ == judge.__module__:
            sources.append(inspect.getsource(helper))
    return "\n".join(sources)


def test_words_and_code_name_the_same_branches():
    """A judge that returns "partly" has words that say when; words that say "partly" have the code."""
    for key, paper in registry.papers().items():
        for claim in paper.claims:
            if not claim.testable:
                continue
            # a rule registered as data (lra_lab.reproduce.rules): the shared judge of its kind of test
            judge = claim.registration.test.judge if claim.registration is not None else claim.judge
            assert ("PARTLY" in _judge_source(judge)) == ("partly" in claim.rule), (key, claim.id)


def test_the_attribution_cases_revert_a_row_the_sweep_has():
    """The attribution's partly / not reproduced cases change the mask_padding row: the sweep must have it."""
    assert "model.mask_padding" in {field for field, _ in sweep.CONVLUNA_REFERENCE_REVERTS}
