"""Clustered attention: *Fast Transformers with Clustered Attention* (arXiv:2007.04825).

Two laptop-scale claims: Appendix C.2 / Figure 5 (masked copy over sequence length x clusters) and
Table 1's "train with one attention, evaluate with another", here on ListOps ``cpu`` instead of
WSJ speech. The masked-copy reduction from the paper's setting (4 layers, 6 heads of 32, FFN 768,
R-Adam at 2e-4, 5,000 iterations) to ``scripts/masked_copy.py``'s defaults (2 layers, 4 heads of
16, FFN 128, Adam with warmup at 3e-3) with 800 steps at L = 31 and 63 and 2,400 at L = 127
(``STEPS``, chosen from full attention alone) keeps the grid near two hours on 2 cores; the rule
only judges lengths that full attention still solves at this reduction.
"""

from __future__ import annotations

from pathlib import Path

from lra.reproduce import clustered_prop2, evidence
from lra.reproduce.registry import (
    CONSTRUCTION, INCOMPLETE, NOT_REPRODUCED, PARTLY, REPRODUCED, Claim, Outcome, Paper, not_testable,
)

LENGTHS = (31, 63, 127)
CLUSTERS = (15, 30, 60, 100)
# Training steps per length, chosen from full attention alone (before any clustered run): at 800
# steps it solved L=31 (results/masked_copy) and L=63 (99.9% masked accuracy) but not L=127 (13.4%,
# its loss flat from step 300): results/reproductions/clustered/calibration/. At 2,400 steps, three
# times as many, full attention solves L=127 (100% masked accuracy; its loss stayed at the 0.46
# plateau until step ~1,250 and fell to 0.002 by step 1,350): the first run of the L=127 record.
STEPS = {31: 800, 63: 800, 127: 2400}
CALIBRATION = "results/reproductions/clustered/calibration"
SOLVED = 0.9  # masked-symbol accuracy that counts as solving the task (the paper's cells are ~1.0)
OUT = "results/reproductions/clustered"
SWAP = "results/swap_eval_listops_cpu/swap_eval.json"
SWAP_MARGIN = 1.0  # points: 10 of the 1,000 test examples; smaller differences are within one model's noise


def masked_copy_record(length: int) -> str:
    return f"{OUT}/masked_copy_L{length}/results.json"


def masked_copy_command(length: int) -> str:
    variants = " ".join(["softmax"] + [f"{name}:{c}" for name in ("clustered", "improved_clustered")
                                       for c in CLUSTERS])
    return (f"python scripts/masked_copy.py --seq-len {length} --steps {STEPS[length]} --variants {variants} "
            f"--out {OUT}/masked_copy_L{length}")


def _cell(run: dict, length: int) -> tuple[str, int, int]:
    kwargs = run.get("attention_kwargs") or {}
    family = {"softmax": "full"}.get(run.get("attention"), run.get("attention"))
    return family, length, int(kwargs.get("num_clusters", 0))


def _partial_runs(root: Path, length: int) -> list[dict]:
    """The variants an interrupted call at ``length`` finished (its partial file), at this
    experiment's steps; a damaged file shows none (it is only drawn, never judged)."""
    from lra.experiments import masked_copy

    path = (root / masked_copy_record(length)).parent / masked_copy.PARTIAL
    try:
        entries = masked_copy.partial_entries(path)
    except ValueError:
        return []
    return [e["run"] for e in entries if isinstance(e["settings"], dict) and e["settings"].get("steps") == STEPS[length]]


def masked_copy_grid(root: Path) -> tuple[dict[tuple[str, int, int], float], list[str]]:
    """(family, L, clusters) -> masked accuracy; family "full" has clusters 0."""
    grid: dict[tuple[str, int, int], float] = {}
    missing: list[str] = []
    for length in LENGTHS:
        record = evidence.read_json(root / masked_copy_record(length))
        runs = record.get("runs") if record else None
        if not isinstance(runs, list):
            done = _partial_runs(root, length)
            for run in done:  # drawn in the figure; the verdict waits for results.json
                grid[_cell(run, length)] = float(run["masked_accuracy"])
            missing.append(masked_copy_record(length))
            continue
        settings = record.get("settings") or {}
        steps = settings.get("steps")
        if steps != STEPS[length]:  # a record of another scale is not this experiment's
            missing.append(f"{masked_copy_record(length)} at {STEPS[length]} steps (it holds {steps})")
            continue
        if settings.get("seq_len") != length:  # a foreign record copied into this length's folder
            missing.append(f"{masked_copy_record(length)} (it holds L = {settings.get('seq_len')}, not {length})")
            continue
        for run in runs:
            accuracy = run.get("masked_accuracy") if isinstance(run, dict) else None
            if not isinstance(accuracy, (int, float)) or isinstance(accuracy, bool) or not 0.0 <= accuracy <= 1.0:
                missing.append(f"{masked_copy_record(length)}: a run's masked_accuracy {accuracy!r} is not in [0, 1]")
                continue
            grid[_cell(run, length)] = float(accuracy)
        for family, c in [("full", 0)] + [(f, c) for f in ("clustered", "improved_clustered") for c in CLUSTERS]:
            if (family, length, c) not in grid:
                missing.append(f"{masked_copy_record(length)}: {family} with {c} clusters")
    return grid, missing


def _fig5(root: Path) -> Outcome:
    grid, missing = masked_copy_grid(root)
    if missing:
        return Outcome(INCOMPLETE, missing=tuple(missing))
    judged = [L for L in LENGTHS if grid[("full", L, 0)] >= SOLVED]
    full = ", ".join(f"L={L}: {100 * grid[('full', L, 0)]:.0f}%" for L in LENGTHS)
    if not judged:
        return Outcome(NOT_REPRODUCED, f"full attention {full}", "",
                       detail="the reduction is too strong: full attention solves no length")
    cells = [(L, c) for L in judged for c in CLUSTERS]
    improved_ok = [cell for cell in cells if grid[("improved_clustered", *cell)] >= SOLVED]
    failures = [sum(grid[("clustered", L, c)] < SOLVED for c in CLUSTERS) for L in judged]
    ours = (f"full {full}; improved clustered solves {len(improved_ok)}/{len(cells)} cells, clustered fails "
            + ", ".join(f"{n}/{len(CLUSTERS)} at L={L}" for n, L in zip(failures, judged)))
    stat = f"solved = masked-symbol accuracy >= {SOLVED:.0%}, one seed per cell; judged lengths {judged}"
    # "clustered needs more clusters as the sequence grows" (the paper: a trend, not a failure at every
    # length): its unsolved cells never decrease with L and some remain at the longest judged length.
    # The code was meant (issue 37): the words said ">= 1" without saying where; they now say it.
    grows = failures == sorted(failures) and failures[-1] > 0
    if len(improved_ok) == len(cells) and grows:
        verdict = REPRODUCED
    elif len(improved_ok) >= 0.75 * len(cells) or grows:
        verdict = PARTLY
    else:
        verdict = NOT_REPRODUCED
    return Outcome(verdict, ours, stat)


def _swap_eval(root: Path) -> Outcome:
    record = evidence.read_json(root / SWAP)
    rows = record.get("rows") if record else None
    if not isinstance(rows, list):
        return Outcome(INCOMPLETE, missing=(SWAP,))
    acc = {(r["attention"], (r.get("attention_kwargs") or {}).get("num_clusters", 0)): 100 * r["accuracy"]
           for r in rows}
    full = acc.get(("softmax", 0))
    counts = sorted(c for a, c in acc if a == "clustered" and ("improved_clustered", c) in acc)
    if full is None or not counts:
        return Outcome(INCOMPLETE, missing=(f"{SWAP}: softmax and both clustered variants at equal clusters",))
    gaps = [(c, abs(full - acc[("clustered", c)]), abs(full - acc[("improved_clustered", c)])) for c in counts]
    ours = f"softmax-trained, evaluated with softmax {full:.1f}%; " + "; ".join(
        f"{c} clusters: clustered {acc[('clustered', c)]:.1f}%, improved {acc[('improved_clustered', c)]:.1f}%"
        for c in counts)
    no_worse = all(gi <= gc for _, gc, gi in gaps)
    better_somewhere = any(gi + SWAP_MARGIN <= gc for _, gc, gi in gaps)
    stat = "gap to softmax (points), clustered / improved: " + ", ".join(
        f"{c}: {gc:.1f} / {gi:.1f}" for c, gc, gi in gaps) + " (one trained model, 1,000 test examples)"
    verdict = REPRODUCED if no_worse and better_somewhere else (PARTLY if better_somewhere else NOT_REPRODUCED)
    return Outcome(verdict, ours, stat)


PAPER = Paper(
    key="clustered",
    title="Fast Transformers with Clustered Attention",
    citation="Vyas, Katharopoulos & Fleuret, NeurIPS 2020, arXiv:2007.04825",
    claims=(
        Claim("fig5-masked-copy", "Appendix C.2, Figure 5",
              "Improved clustered attention solves the masked copy task for every length and cluster count; "
              "clustered attention needs more clusters as the sequence grows.",
              "L in {31, 63, 127, 255} x clusters {15, 30, 60, 100}: improved clustered and full ~100% everywhere; "
              "clustered falls off at long L and few clusters (heatmap, no table)",
              f"`scripts/masked_copy.py` defaults (2 layers, 4 heads x 16, FFN 128, R-Adam 3e-3, top-k 16, one seed; the "
              f"paper: 4 layers, 6 heads x 32, FFN 768, R-Adam 2e-4, top-k 32, 5,000 steps) at L in {LENGTHS} x "
              f"clusters {CLUSTERS}, steps per L {STEPS} (calibrated on full attention alone), full attention as "
              "the reference row",
              f"a cell is solved at masked-symbol accuracy >= {SOLVED:.0%}; only lengths full attention solves are "
              "judged; reproduced if improved clustered solves every judged cell and clustered's unsolved cells "
              "do not decrease with L and number >= 1 at the longest judged length; partly if improved solves >= 75% "
              "of cells or that clustered trend holds; else not reproduced (also when full attention solves no length)",
              _fig5, tuple(masked_copy_command(L) for L in LENGTHS),
              # measured: 17 / 71 / 248 core-minutes of training at L = 31 / 63 / 127 (records' train_seconds,
              # one model per core, under load), i.e. about 170 minutes with both cores busy
              tuple(masked_copy_record(L) for L in LENGTHS), cpu_minutes=170),
        Claim("table1-swap-eval", "Table 1 (train with one, evaluate with another)",
              "Improved clustered approximates a model trained with full attention better than clustered does.",
              "WSJ PER, trained full: full 5.14, clustered-100 ~10-46 depending on the row, i-clustered-100 5.95",
              "one ListOps `cpu` Transformer (the lra_families sweep's seed 0, its best checkpoint) evaluated on the "
              "1,000 test examples with softmax, clustered and improved clustered at 8/16/32 clusters "
              "(`scripts/swap_eval.py`); that model is itself near the majority plateau (about 36%), so there is "
              "little learnt attention to approximate: a model trained further would test the claim harder",
              "reproduced if improved clustered's gap to softmax is <= clustered's at every cluster count and smaller "
              "by >= 1 point (10 test examples) at one at least; partly if smaller by >= 1 point somewhere but larger "
              "elsewhere; not reproduced if no difference reaches 1 point",
              _swap_eval,
              ("python scripts/swap_eval.py --workdir runs/sweeps/lra_families_cpu/listops_transformer/seed0 "
               "--out results/swap_eval_listops_cpu softmax clustered:clusters=8 clustered:clusters=16 "
               "clustered:clusters=32 improved_clustered:clusters=8 improved_clustered:clusters=16 "
               "improved_clustered:clusters=32",),
              (SWAP,), cpu_minutes=3),
        Claim("prop2-approximation", "Section 3.3.1, Proposition 2 (proof: Appendix B)",
              "For every query, improved clustered attention's row is at least as close (L1) to full attention's "
              "row as clustered attention's: ||A^t_i - A_i||_1 <= ||A^c_j - A_i||_1.",
              "a proof; no numbers",
              "the dense rows of `lra.attention.clustered.attention_matrix` (which the modules' outputs are tested "
              "to equal) against float64 softmax rows, every real query, on random queries and keys clustered by "
              f"the module's LSH + K-means: N {clustered_prop2.LENGTHS} x clusters {clustered_prop2.CLUSTERS} x "
              f"top-k {clustered_prop2.TOPK} x scale {clustered_prop2.SCALES} x seeds {clustered_prop2.SEEDS}, one "
              "sequence of each batch padded; no trained model's inputs (no checkpoint is committed)",
              f"reproduced if no query's improved error exceeds its clustered error by more than "
              f"{clustered_prop2.TOLERANCE:g} (float32 rounding); not reproduced if any does",
              clustered_prop2.judge, (clustered_prop2.COMMAND,), (clustered_prop2.RECORD,), cpu_minutes=2,
              kind=CONSTRUCTION),
        not_testable("speech-wsj-switchboard", "Tables 1-2, Figures 2-3",
                     "Clustered attention matches full attention's phone/word error rate on WSJ and Switchboard "
                     "at a fraction of the GPU time.",
                     "WSJ: full 5.14 PER, i-clustered-100 5.95; Switchboard WER 15.0 vs 15.1",
                     "the licensed WSJ and Switchboard corpora and a GPU (the paper trains for days on GTX 1080 Ti)",
                     ""),
        not_testable("glue-squad-approximation", "Table 3",
                     "Improved clustered attention approximates a pre-trained RoBERTa on GLUE and SQuAD without retraining.",
                     "e.g. SQuAD F1 within 1 point with 25 clusters",
                     "pre-trained RoBERTa weights and the GLUE/SQuAD sets (no downloads here)",
                     ""),
    ),
)
