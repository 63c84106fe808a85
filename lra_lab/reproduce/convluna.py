"""ConvLuna: *On Difficulties of Attention Factorization through Shared Memory* (arXiv:2404.00798).

Laptop scale: ListOps at the ``cpu`` preset (generated ListOps, lengths 32-256, 2 blocks, width
64, 1,500 steps), five seeds per row trained in one vmapped program, with the published code's
choices (``:reference``: its projection sharing, exact GELU, zero padding row, no padding masks,
full-length padding). Why ``reference``: with this suite's defaults every row sat at 34-36% on
ListOps ``cpu`` (the retired 35-run Table 1), while the published code's choices gave ConvLuna-16
39.6 / 34.8 / 39.8% against Luna-16 35.1 / 35.4 / 33.0% on three seeds (issue 27's lead), so that
is where a gap can show. The Transformer row uses this suite's defaults (the paper takes its
Transformer numbers from the LRA paper, not from the published ConvLuna code).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from lra_lab.reproduce import evidence
from lra_lab.reproduce.claims import (
    INCOMPLETE,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    Claim,
    Outcome,
    Paper,
    not_testable,
)

SEEDS = (0, 1, 2, 3, 4)
# Training steps: None is the cpu preset's 1,500. Longer training is one line here (set it before the
# runs, never after seeing them): the sweep then gets --config.num_train_steps=N and its own folders.
TRAIN_STEPS: int | None = None
_TAIL = f"_num-train-steps-{TRAIN_STEPS}" if TRAIN_STEPS else ""  # lra_lab.experiments.sweep.default_root's suffix
RUNS = f"results/runs/convluna_listops_cpu{_TAIL}"
MEMDEG = "results/memory_degradation_listops_cpu/memory_stats.json"
MIN_GAIN = 2.0  # points: the gap Table 1 reports is 7.2 (44.14 vs 36.98); 2 is a conservative bar
ALPHA = 0.05


def _slug(label: str) -> str:
    from lra_lab.experiments.sweep import slug

    return slug(label)


def run_dir(label: str) -> str:
    return f"{RUNS}/listops_{_slug(label)}"


def sweep_command(*labels: str) -> str:
    """The sweep of every row a claim reads (the sweep skips finished runs, so shared rows run once)."""
    rows = " ".join(f'"{label}"' for label in labels)
    steps = f" --config.num_train_steps={TRAIN_STEPS}" if TRAIN_STEPS else ""
    return f"python scripts/sweep.py convluna_listops --preset cpu{steps} --group-seeds on --variants {rows} --run"


EXPORT = f"python scripts/export_runs.py runs/sweeps/convluna_listops_cpu{_TAIL} {RUNS}"
SCALE = (f"ListOps `cpu` preset (lengths 32-256, 2 blocks, width 64, {TRAIN_STEPS or 1500:,} steps), 5 seeds "
         "trained in one vmapped program per row")


def accuracies(root: Path, label: str) -> tuple[dict[int, float], list[str]]:
    """A row's test accuracy (%) per seed at this experiment's steps, and its missing records."""
    return evidence.seed_accuracies(root, run_dir(label), SEEDS, steps=TRAIN_STEPS or 1500, variant=label,
                                    task="listops")


def rows_with_runs(root: Path) -> dict[str, dict[int, float]]:
    """Every convluna_listops row with at least one finished seed: label -> {seed: test accuracy %}."""
    from lra_lab.experiments.sweep import GRIDS

    rows = {}
    for variant in GRIDS["convluna_listops"].variants:
        found, _ = accuracies(root, variant.label)
        if found:
            rows[variant.label] = found
    return rows


def _records(*labels: str) -> tuple[str, ...]:
    return tuple(f"{run_dir(label)}/seed{k}/result.json" for label in labels for k in SEEDS)


def _beats(winner: str, loser: str, min_gain: float = MIN_GAIN):
    """Rule: ``winner`` beats ``loser`` by >= min_gain points, paired over 5 seeds, one-sided p < 0.05."""
    def judge(root: Path) -> Outcome:
        a, miss_a = accuracies(root, winner)
        b, miss_b = accuracies(root, loser)
        if miss_a or miss_b:
            return Outcome(INCOMPLETE, missing=tuple(miss_a + miss_b))
        gain, p, n = evidence.paired_greater(a, b)
        ours = (f"{winner} {evidence.fmt_mean_std(list(a.values()))}, "
                f"{loser} {evidence.fmt_mean_std(list(b.values()))}")
        stat = f"paired gain {gain:+.2f} points over {n} seeds, one-sided paired t p = {p:.3g}"
        if gain >= min_gain and p < ALPHA:
            verdict = REPRODUCED
        elif gain > 0 and p < ALPHA:
            verdict = PARTLY  # the ordering holds, the size does not
        else:
            verdict = NOT_REPRODUCED
        return Outcome(verdict, ours, stat)
    return judge


def _ablation(root: Path) -> Outcome:
    """Table 3: filtering alone keeps most of ConvLuna's gain over Luna; scaling alone keeps little."""
    labels = ("Luna-16 (reference)", "ConvLuna-16 (reference)",
              "OnlyFiltering-16 (reference)", "OnlyScaling-16 (reference)")
    acc, missing = {}, {}
    for label in labels:
        acc[label], missing[label] = accuracies(root, label)
    if missing[labels[0]] or missing[labels[1]]:
        return Outcome(INCOMPLETE, missing=tuple(missing[labels[0]] + missing[labels[1]]))
    full_gain, p_full, n = evidence.paired_greater(acc[labels[1]], acc[labels[0]])
    if not (full_gain > 0 and p_full < ALPHA):  # the rule's first step decides without the ablation rows
        pair = ", ".join(f"{label.split(' ')[0]} {evidence.fmt_mean_std(list(acc[label].values()))}"
                         for label in labels[:2])
        return Outcome(NOT_REPRODUCED, pair, f"ConvLuna-16's gain over Luna-16 {full_gain:+.2f} points, paired "
                                             f"one-sided t p = {p_full:.3g} over {n} seeds",
                       detail="there is no significant gain over Luna to attribute, so the ablation rows are not needed")
    rows_missing = tuple(m for label in labels[2:] for m in missing[label])
    if rows_missing:
        return Outcome(INCOMPLETE, missing=rows_missing)
    luna, conv, filt, scal = (acc[label] for label in labels)
    filt_gain, p_filt, _ = evidence.paired_greater(filt, luna)
    scal_gain, p_scal, _ = evidence.paired_greater(scal, luna)
    ours = ", ".join(f"{label.split(' ')[0]} {evidence.fmt_mean_std(list(acc[label].values()))}"
                     for label in labels)
    stat = (f"gain over Luna-16: ConvLuna {full_gain:+.2f} (p {p_full:.3g}), OnlyFiltering "
            f"{filt_gain:+.2f} (p {p_filt:.3g}), OnlyScaling {scal_gain:+.2f} (p {p_scal:.3g}); paired one-sided t")
    filtering_carries = filt_gain >= 0.5 * full_gain and p_filt < ALPHA
    scaling_little = scal_gain < 0.5 * full_gain
    verdict = REPRODUCED if filtering_carries and scaling_little else (
        PARTLY if filtering_carries or scaling_little else NOT_REPRODUCED)
    return Outcome(verdict, ours, stat)


def revert_label(field: str, value: str) -> str:
    """The convluna_listops row of ConvLuna-16 (reference) with ``field`` put back to our default."""
    return f"ConvLuna-16 (reference) [{field}={value}]"


def _reverts() -> tuple[tuple[str, str], ...]:
    from lra_lab.experiments.sweep import CONVLUNA_REFERENCE_REVERTS

    return CONVLUNA_REFERENCE_REVERTS


def _attribution(root: Path) -> Outcome:
    """Which published-code choice does ConvLuna-16 (reference)'s gain over Luna-16 (reference) need?"""
    reverts = _reverts()
    labels = ("ConvLuna-16 (reference)", "Luna-16 (reference)") + tuple(revert_label(f, v) for f, v in reverts)
    acc, missing = {}, {}
    for label in labels:
        acc[label], missing[label] = accuracies(root, label)
    if missing[labels[0]] or missing[labels[1]]:
        return Outcome(INCOMPLETE, missing=tuple(m for label in labels for m in missing[label]))
    # the rule's first step reads the pair alone: without a gain, no reverted row is needed
    conv, luna = acc[labels[0]], acc[labels[1]]
    gap, p_gap, n = evidence.paired_greater(conv, luna)
    pair = (f"ConvLuna-16 (reference) {evidence.fmt_mean_std(list(conv.values()))}, Luna-16 (reference) "
            f"{evidence.fmt_mean_std(list(luna.values()))}")
    if not (gap > 0 and p_gap < ALPHA):
        return Outcome(NOT_REPRODUCED, pair, f"gap over Luna-16 (reference) {gap:+.2f} points, p = {p_gap:.3g} "
                                             f"over {n} seeds",
                       detail="ConvLuna-16 (reference) is not significantly above Luna-16 (reference): there is no "
                              "gain to attribute, so by the rule the reverted rows are not needed (see init-lead "
                              "for the initialisation)")
    rows_missing = tuple(m for label in labels[2:] for m in missing[label])
    if rows_missing:
        return Outcome(INCOMPLETE, missing=rows_missing)
    ours = pair + "; reverted: " + ", ".join(
        f"{f.rsplit('.', 1)[-1]}={v} {evidence.fmt_mean_std(list(acc[revert_label(f, v)].values()))}"
        for f, v in reverts)
    losses = [evidence.paired_greater(conv, acc[revert_label(f, v)]) for f, v in reverts]
    adjusted = evidence.holm([p for _, p, _ in losses])
    needed = [(f, v) for (f, v), (loss, _, _), q in zip(reverts, losses, adjusted) if loss >= MIN_GAIN and q < ALPHA]
    stat = (f"gap over Luna-16 (reference) {gap:+.2f} points (p = {p_gap:.3g}); accuracy lost when reverting, "
            "paired over 5 seeds, one-sided t, Holm over the " + f"{len(reverts)} rows: " + "; ".join(
                f"{f}={v}: {loss:+.2f} (p_holm {q:.3g})" for (f, v), (loss, _, _), q in zip(reverts, losses, adjusted)))
    if not needed:
        return Outcome(REPRODUCED, ours, stat, detail="no single published-code choice is needed for the gain")
    still_above = [evidence.paired_greater(acc[revert_label(f, v)], luna) for f, v in needed]
    names = ", ".join(f"{f}={v}" for f, v in needed)
    if all(g > 0 and p < ALPHA for g, p, _ in still_above):
        return Outcome(PARTLY, ours, stat, detail=f"reverting {names} loses >= {MIN_GAIN} points, but ConvLuna stays "
                                                 "significantly above Luna-16 (reference) without it")
    return Outcome(NOT_REPRODUCED, ours, stat, detail=f"the gain needs the published code's {names}: "
                                                      "reverting it loses the gap over Luna-16 (reference)")


def _memory_size(root: Path) -> Outcome:
    """Figure 2: Friedman over memory sizes 1/16/256 (5 seeds as blocks), p >= 0.05 for both models."""
    parts, missing, rejected = [], [], []
    for family in ("Luna", "ConvLuna"):
        samples = []
        for m in (1, 16, 256):
            acc, miss = accuracies(root, f"{family}-{m} (reference)")
            missing += miss
            samples.append([acc.get(k) for k in SEEDS])
        if not missing:
            p = evidence.friedman_p(samples)
            parts.append(f"{family} p = {p:.3g}")
            if p < ALPHA:
                rejected.append(family)
    if missing:
        return Outcome(INCOMPLETE, missing=tuple(missing))
    stat = "Friedman over memory 1/16/256, seeds as blocks: " + ", ".join(parts)
    return Outcome(NOT_REPRODUCED if rejected else REPRODUCED, "", stat,
                   detail=f"memory size matters significantly for {', '.join(rejected)}" if rejected else
                   "no significant effect of memory size, as the paper found")


def _memory_degradation(root: Path) -> Outcome:
    """Figure 1 / Section 2: Luna's packing attention is nearer uniform than ConvLuna's, and its cells collapse."""
    record = evidence.read_json(root / MEMDEG)
    runs = record.get("runs") if record else None
    if not isinstance(runs, list):
        return Outcome(INCOMPLETE, missing=(MEMDEG,))
    by_variant = {r.get("variant"): r.get("stats", {}) for r in runs if isinstance(r, dict)}
    pairs, uniform_holds, collapse = [], [], []
    for suffix in ("", " (reference)"):
        for m in (16, 256):
            luna, conv = by_variant.get(f"Luna-{m}{suffix}"), by_variant.get(f"ConvLuna-{m}{suffix}")
            if luna is None or conv is None:
                return Outcome(INCOMPLETE, missing=(f"{MEMDEG}: Luna-{m}{suffix} / ConvLuna-{m}{suffix}",))
            le, ce = luna.get("block1/packing_entropy"), conv.get("block1/packing_entropy")
            pairs.append(f"m={m}{' ref' if suffix else ''}: {le:.2f} vs {ce:.2f}")
            uniform_holds.append(le > ce)
            collapse.append(luna.get("block1/distinct_vectors", m) <= m / 2)
    ours = "last-block packing entropy / log(tokens), Luna vs ConvLuna: " + "; ".join(pairs)
    stat = (f"Luna nearer uniform in {sum(uniform_holds)}/4 pairs; Luna's cells collapsed to <= half "
            f"distinct vectors in {sum(collapse)}/4 runs (1 seed each)")
    if all(uniform_holds) and all(collapse):
        verdict = REPRODUCED
    elif all(uniform_holds) or all(collapse):  # "partly if only one holds": each condition over all 4
        verdict = PARTLY
    else:
        verdict = NOT_REPRODUCED
    return Outcome(verdict, ours, stat)


def _plan(judge: Callable[[Path], Outcome], labels: tuple[str, ...]) -> Callable[[Path], tuple[str, ...]]:
    """The sweep of only the rows whose records the judge still misses (committed ones are finished)."""
    def plan(root: Path) -> tuple[str, ...]:
        missing = judge(root).missing
        rows = [label for label in labels if any(m.startswith(run_dir(label) + "/") for m in missing)]
        return (sweep_command(*rows), EXPORT) if rows else ()
    return plan


def _rows(claim_id: str) -> tuple[str, ...]:
    """The convluna_listops rows a claim may read (its sweep command's)."""
    pair = ("Luna-16 (reference)", "ConvLuna-16 (reference)")
    return {
        "table1-listops": pair,
        "table1-defaults": ("Luna-16", "ConvLuna-16"),
        "reference-attribution": pair + tuple(revert_label(f, v) for f, v in _reverts()),
        "init-lead": ("Luna-16 (reference) [model.param_init=xavier]", revert_label("model.param_init", "xavier")),
        "table1-vs-transformer": ("ConvLuna-16 (reference)", "Transformer"),
        "table3-listops": pair + ("OnlyScaling-16 (reference)", "OnlyFiltering-16 (reference)"),
        "fig2-memory-size": tuple(f"{f}-{m} (reference)" for f in ("Luna", "ConvLuna") for m in (1, 16, 256)),
    }.get(claim_id, ())


def _with_plans(paper: Paper) -> Paper:
    claims = tuple(dataclasses.replace(c, plan=_plan(c.judge, _rows(c.id))) if _rows(c.id) else c
                   for c in paper.claims)
    return dataclasses.replace(paper, claims=claims)


def _confirmatory() -> tuple[Claim, ...]:
    """The pre-registered confirmatory claims on fresh seeds (issue 35): their own module, never edited after."""
    from lra_lab.reproduce import convluna_appendix, convluna_confirm, convluna_long, listops_paper_study

    return convluna_confirm.CLAIMS + convluna_appendix.CLAIMS + convluna_long.CLAIMS + listops_paper_study.CLAIMS


PAPER = Paper(
    key="convluna",
    title="On Difficulties of Attention Factorization through Shared Memory",
    citation="Yorsh, Bojar, Holeňa & Herel, ICLR 2024 Tiny Papers, arXiv:2404.00798",
    claims=(
        Claim("table1-listops", "Table 1 (ListOps)",
              "ConvLuna-16 is more accurate on ListOps than Luna-16.",
              "ConvLuna-16 44.14 +- 0.69 vs Luna-16 36.98 +- 0.30 (5 runs each)",
              f"{SCALE}; rows `listops_luna.py:cpu,mem=16,reference` and `listops_convluna.py:cpu,mem=16,reference`",
              f"reproduced if ConvLuna-16 beats Luna-16 by >= {MIN_GAIN} points on the paired mean over seeds 0-4 "
              f"with a one-sided paired t-test p < {ALPHA}; partly if the gain is positive and significant but smaller",
              _beats("ConvLuna-16 (reference)", "Luna-16 (reference)"),
              (sweep_command("Luna-16 (reference)", "ConvLuna-16 (reference)"), EXPORT),
              _records("Luna-16 (reference)", "ConvLuna-16 (reference)"), cpu_minutes=63),  # measured: 24 + 39 min
        Claim("table1-defaults", "Table 1 (ListOps), with this suite's defaults",
              "ConvLuna-16 is more accurate on ListOps than Luna-16 as an architecture: also with this suite's "
              "defaults (padding masked, length buckets, our initialisation), not only with the published code's choices.",
              "ConvLuna-16 44.14 +- 0.69 vs Luna-16 36.98 +- 0.30 (the published code's runs)",
              f"{SCALE}; rows `listops_luna.py:cpu,mem=16` and `listops_convluna.py:cpu,mem=16` (no `reference`)",
              f"as table1-listops: reproduced if ConvLuna-16 beats Luna-16 by >= {MIN_GAIN} points, paired one-sided "
              f"t p < {ALPHA} over seeds 0-4; partly if the gain is positive and significant but smaller",
              _beats("ConvLuna-16", "Luna-16"),
              (sweep_command("Luna-16", "ConvLuna-16"), EXPORT),
              _records("Luna-16", "ConvLuna-16"), cpu_minutes=30),
        Claim("reference-attribution", "Table 1 (ListOps) and the published code",
              "ConvLuna-16's ListOps gain over Luna-16 under the published code's choices does not hinge on any one "
              "of its incidental choices (padding masks off, full-length padding, zero padding row, PyTorch "
              "initialisation, unscaled unpacking logits, LayerNorm before pooling, no embedding dropout, weight "
              "decay 0.002).",
              "none directly: the paper attributes the gain to the convolutional filtering (Table 3)",
              f"{SCALE}; ConvLuna-16 `:cpu,mem=16,reference` with one choice put back to our default per row "
              "(lra_lab.experiments.sweep.CONVLUNA_REFERENCE_REVERTS, 8 rows), against ConvLuna-16 and Luna-16 `reference`",
              "first ConvLuna-16 (reference) must beat Luna-16 (reference) (paired one-sided t p < 0.05), else not "
              f"reproduced (no gain to attribute); a choice is needed if reverting it loses >= {MIN_GAIN} points, "
              f"paired one-sided t over seeds 0-4 with Holm's correction over the 8 rows at {ALPHA}; reproduced if no "
              "choice is needed; partly if every needed choice's row still beats Luna-16 (reference) significantly; "
              "else not reproduced",
              _attribution,
              (sweep_command("Luna-16 (reference)", "ConvLuna-16 (reference)",
                             *(revert_label(f, v) for f, v in _reverts())), EXPORT),
              # the pair alone: the rule reads the reverted rows only when the pair shows a gain (the judge
              # then lists those that are missing)
              _records("ConvLuna-16 (reference)", "Luna-16 (reference)"), cpu_minutes=255),  # the pair measured 63; 8 reverted ConvLuna rows at its 24
        Claim("init-lead", "Table 1 (ListOps): the earlier lead",
              "With the published code's choices but this suite's initialisation (xavier-uniform weights, zero "
              "biases: the setting of the 3-seed lead that motivated `reference`, which ran before "
              "`model.param_init` existed), ConvLuna-16 beats Luna-16 on ListOps.",
              "none: the published code initialises as PyTorch does (the paper's 44.14 vs 36.98 ran with it)",
              f"{SCALE}; rows ConvLuna-16 and Luna-16 `:cpu,mem=16,reference` with "
              "`--config.model.param_init=xavier` (results/reference/init_listops_cpu had ConvLuna-16 at "
              "38.6 / 40.7 / 35.7% with xavier against 37.1 / 38.1 / 34.2% with PyTorch's init on seeds 0-2)",
              f"as table1-listops: reproduced if ConvLuna-16 beats Luna-16 by >= {MIN_GAIN} points, paired one-sided "
              f"t p < {ALPHA} over seeds 0-4; partly if the gain is positive and significant but smaller",
              _beats(revert_label("model.param_init", "xavier"), "Luna-16 (reference) [model.param_init=xavier]"),
              (sweep_command("Luna-16 (reference) [model.param_init=xavier]", revert_label("model.param_init", "xavier")),
               EXPORT),
              _records("Luna-16 (reference) [model.param_init=xavier]", revert_label("model.param_init", "xavier")),
              cpu_minutes=99),  # measured: 44 + 55 min
        Claim("table1-vs-transformer", "Table 1 (ListOps)",
              "ConvLuna-16 is more accurate on ListOps than the Transformer.",
              "ConvLuna-16 44.14 +- 0.69 vs Transformer 36.37 (from the LRA paper)",
              f"{SCALE}; `listops_transformer.py:cpu` (this suite's defaults) against ConvLuna-16 `:reference`",
              f"as table1-listops: reproduced if ConvLuna-16 beats the Transformer by >= {MIN_GAIN} points, paired "
              f"one-sided t p < {ALPHA} over seeds 0-4; partly if the gain is positive and significant but smaller",
              _beats("ConvLuna-16 (reference)", "Transformer"),
              (sweep_command("ConvLuna-16 (reference)", "Transformer"), EXPORT),
              _records("ConvLuna-16 (reference)", "Transformer"), cpu_minutes=50),
        Claim("table3-listops", "Table 3 (ListOps)",
              "Filtering the packing input carries most of ConvLuna's gain; the learnable scaling alone adds little.",
              "OnlyFiltering-16 41.48 +- 1.74, OnlyScaling-16 37.08 +- 0.18, ConvLuna-16 44.14, Luna-16 36.98",
              f"{SCALE}; OnlyFiltering-16 and OnlyScaling-16 with `reference` next to Table 1's pair",
              "first ConvLuna-16 must beat Luna-16 significantly (paired one-sided t p < 0.05), else not reproduced "
              "(no gain to attribute; the ablation rows are then not needed); then reproduced if OnlyFiltering-16 "
              "keeps >= half of the gain (p < 0.05) and OnlyScaling-16 keeps < half; partly if one of the two "
              "holds; else not reproduced",
              _ablation,
              (sweep_command("Luna-16 (reference)", "ConvLuna-16 (reference)", "OnlyScaling-16 (reference)",
                             "OnlyFiltering-16 (reference)"), EXPORT),
              # the pair alone: the ablation rows are read only when the pair shows a gain (then listed if missing)
              _records("Luna-16 (reference)", "ConvLuna-16 (reference)"), cpu_minutes=125),  # the pair measured 63
        Claim("fig2-memory-size", "Figure 2",
              "Memory size (1, 16, 256) has no statistically significant effect on accuracy (Friedman, Holm-corrected).",
              "no setup rejects H0 at 5% (ListOps: Luna 37.02 / 36.98 / 37.21, ConvLuna 43.95 / 44.14 / 43.56)",
              f"{SCALE}; Luna and ConvLuna at memory 1, 16, 256, all `reference`",
              f"reproduced if the Friedman test over memory sizes (seeds as blocks) gives p >= {ALPHA} for both "
              "Luna and ConvLuna (uncorrected: Holm would only raise the p-values)",
              _memory_size,
              (sweep_command(*(f"{f}-{m} (reference)" for f in ("Luna", "ConvLuna") for m in (1, 16, 256))), EXPORT),
              _records(*(f"{f}-{m} (reference)" for f in ("Luna", "ConvLuna") for m in (1, 16, 256))),
              cpu_minutes=120),
        Claim("fig1-memory-degradation", "Section 2, Figure 1",
              "Luna's memory degrades: its packing attention stays near uniform and its cells converge to few "
              "distinct vectors; ConvLuna's filtering counters it.",
              "heatmaps of a trained Luna's memory: cells nearly identical (qualitative, no numbers)",
              "ListOps `cpu`, one seed per run: Luna-16/256 and ConvLuna-16/256, defaults and `reference` "
              "(the memory_degradation sweep), diagnosed with `python -m lra_lab.diagnose memory`",
              "reproduced if Luna's last-block packing entropy exceeds ConvLuna's in all 4 pairs AND Luna's cells "
              "collapse to <= half as many distinct vectors (cosine >= 0.99) in all 4 runs; partly if only one holds",
              _memory_degradation,
              ("python scripts/sweep.py memory_degradation --preset cpu --tasks listops --seeds 0 --run",
               "python scripts/export_runs.py runs/sweeps/memory_degradation_cpu results/runs/memory_degradation_cpu",
               "python -m lra_lab.diagnose memory --workdir runs/sweeps/memory_degradation_cpu/listops_*/seed0 "
               "--out results/memory_degradation_listops_cpu"),
              (MEMDEG,), cpu_minutes=55),
        not_testable("table1-other-tasks", "Table 1 (Text, Matching, CIFAR-10)",
                     "ConvLuna beats Luna and the Transformer on byte-level IMDB, AAN matching and CIFAR-10.",
                     "ConvLuna-16 84.25 / 80.47 / 56.93 vs Luna-16 65.53 / 75.93 / 50.36",
                     "the LRA release (IMDB, AAN, CIFAR-10; no downloads on these machines) and a GPU/TPU: "
                     "paper scale is 4K-token inputs and up to 50k steps per run, 140 runs "
                     "(preflight estimates the whole grid at about 36 h on a TPU v5e 2x2, 142 chip-hours, at 30% MFU: "
                     "results/preflight/convluna_table1_paper_v5e-2x2.md; the matching Transformer needs a smaller "
                     "per-chip batch, bf16 or more chips there)",
                     "python scripts/sweep.py convluna_table1 --preset paper --tasks text matching image --run"),
        not_testable("table1-paper-scale", "Table 1 (ListOps, paper scale)",
                     "The same ranking at the paper's scale (6 blocks, length 2,000, Table 2's hyperparameters).",
                     "ListOps: Transformer 36.37, Luna-16 36.98, ConvLuna-16 44.14",
                     "a GPU/TPU: one paper-scale ListOps step takes 9.4 s for ConvLuna on this CPU and the "
                     "Transformer does not fit 24 GiB at batch 32",
                     "python scripts/sweep.py convluna_table1 --preset paper --tasks listops --run"),
    ) + _confirmatory(),
)
PAPER = _with_plans(PAPER)
