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

from lra_lab.reproduce import clustered_prop2, evidence
from lra_lab.reproduce.claims import (
    CONSTRUCTION,
    INCOMPLETE,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    Claim,
    Outcome,
    Paper,
    not_testable,
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


CLUSTERED_SPECS = tuple(f"{name}:{c}" for name in ("clustered", "improved_clustered") for c in CLUSTERS)
# Figure 5's L = 63 row at the budget L = 127 had (every committed L = 63 clustered model was still
# descending at step 800), and Table 1's swap on a model whose attention matters (full attention solves
# L = 63 at 800 steps: 99.9%), replacing the ListOps swap that sits on the majority plateau.
BUDGET_LENGTH, BUDGET_STEPS = 63, 2400
BUDGET = f"{OUT}/masked_copy_L63_steps2400/results.json"
SWAP_COPY = f"{OUT}/swap_masked_copy_L63/results.json"


# Appendix C.1 / Figure 4 on this CPU: one layer of 6 heads x 64 (the paper's), forward + backward,
# clustered with 100 clusters, 63 bits, 10 Lloyd steps, improved with top-k 32; batch 1 (per sample).
FIG4 = f"{OUT}/fig4_cpu.json"
FIG4_LENGTHS = (512, 1024, 2048, 4096, 8192)
FIG4_FAMILIES = ("softmax", "clustered:num_clusters=100", "improved_clustered:num_clusters=100,topk=32")
FIG4_COMMAND = (f"python scripts/bench_attention.py --families {' '.join(FIG4_FAMILIES)} --lengths "
                f"{' '.join(map(str, FIG4_LENGTHS))} --batch 1 --dim 384 --heads 6 --qkv-dim 384 --repeats 5 "
                f"--out {OUT} --name fig4_cpu")


def masked_copy_command(length: int, steps: int | None = None, out: str | None = None) -> str:
    return (f"python scripts/masked_copy.py --seq-len {length} --steps {steps or STEPS[length]} --variants softmax "
            f"{' '.join(CLUSTERED_SPECS)} --out {out or f'{OUT}/masked_copy_L{length}'}")


SWAP_COPY_COMMAND = (f"python scripts/masked_copy.py --seq-len 63 --steps {STEPS[63]} --variants softmax --swap-eval "
                     f"{' '.join(CLUSTERED_SPECS)} --out {Path(SWAP_COPY).parent}")


def _cell(run: dict, length: int) -> tuple[str, int, int]:
    kwargs = run.get("attention_kwargs") or {}
    attention = run.get("attention")  # masked_copy records name it in every run
    family = "full" if attention == "softmax" else str(attention)
    return family, length, int(kwargs.get("num_clusters", 0))


def _partial_runs(root: Path, length: int) -> list[dict]:
    """The variants an interrupted call at ``length`` finished (its partial file), at this
    experiment's steps; a damaged file shows none (it is only drawn, never judged)."""
    from lra_lab.experiments import masked_copy

    path = (root / masked_copy_record(length)).parent / masked_copy.PARTIAL
    try:
        entries = masked_copy.partial_entries(path)
    except ValueError:
        return []
    return [e["run"] for e in entries if isinstance(e["settings"], dict) and e["settings"].get("steps") == STEPS[length]]


def read_masked_copy(root: Path, rel: str, length: int, steps: int) -> tuple[list | None, list[str]]:
    """The runs of the masked-copy record ``rel`` if it is this experiment's (L and steps), else what is missing."""
    record = evidence.read_json(root / rel)
    runs = record.get("runs") if record else None
    if record is None or not isinstance(runs, list):
        return None, [rel]
    settings = record.get("settings") or {}
    if settings.get("steps") != steps:  # a record of another scale is not this experiment's
        return None, [f"{rel} at {steps} steps (it holds {settings.get('steps')})"]
    if settings.get("seq_len") != length:  # a foreign record copied into this length's folder
        return None, [f"{rel} (it holds L = {settings.get('seq_len')}, not {length})"]
    return runs, []


def masked_copy_cells(runs: list, rel: str, length: int) -> tuple[dict[tuple[str, int, int], float], list[str]]:
    """(family, L, clusters) -> masked accuracy of each run whose accuracy is a number in [0, 1]."""
    cells, missing = {}, []
    for run in runs:
        accuracy = run.get("masked_accuracy") if isinstance(run, dict) else None
        if not isinstance(accuracy, (int, float)) or isinstance(accuracy, bool) or not 0.0 <= accuracy <= 1.0:
            missing.append(f"{rel}: a run's masked_accuracy {accuracy!r} is not in [0, 1]")
            continue
        cells[_cell(run, length)] = float(accuracy)
    return cells, missing


def _absent(cells: dict, rel: str, length: int, families=("clustered", "improved_clustered")) -> list[str]:
    return [f"{rel}: {family} with {c} clusters" for family, c in [("full", 0)] + [(f, c) for f in families
                                                                                  for c in CLUSTERS]
            if (family, length, c) not in cells]


def masked_copy_grid(root: Path) -> tuple[dict[tuple[str, int, int], float], list[str]]:
    """(family, L, clusters) -> masked accuracy; family "full" has clusters 0."""
    grid: dict[tuple[str, int, int], float] = {}
    missing: list[str] = []
    for length in LENGTHS:
        rel = masked_copy_record(length)
        runs, problems = read_masked_copy(root, rel, length, STEPS[length])
        if runs is None:
            if problems == [rel]:  # no record yet: an interrupted call's finished cells are drawn, not judged
                for run in _partial_runs(root, length):
                    grid[_cell(run, length)] = float(run["masked_accuracy"])
            missing += problems
            continue
        cells, problems = masked_copy_cells(runs, rel, length)
        grid.update(cells)
        missing += problems + _absent(grid, rel, length)
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


def swap_gaps(full: float, acc: dict[tuple[str, int], float], counts: list[int]) -> tuple[str, str]:
    """Table 1's rule on accuracies in points: improved's gap to full attention against clustered's at
    each cluster count. Returns (verdict, the gaps as text)."""
    gaps = [(c, abs(full - acc[("clustered", c)]), abs(full - acc[("improved_clustered", c)])) for c in counts]
    no_worse = all(gi <= gc for _, gc, gi in gaps)
    better_somewhere = any(gi + SWAP_MARGIN <= gc for _, gc, gi in gaps)
    text = "gap to softmax (points), clustered / improved: " + ", ".join(f"{c}: {gc:.1f} / {gi:.1f}" for c, gc, gi in gaps)
    return (REPRODUCED if no_worse and better_somewhere else (PARTLY if better_somewhere else NOT_REPRODUCED)), text


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
    ours = f"softmax-trained, evaluated with softmax {full:.1f}%; " + "; ".join(
        f"{c} clusters: clustered {acc[('clustered', c)]:.1f}%, improved {acc[('improved_clustered', c)]:.1f}%"
        for c in counts)
    verdict, gaps = swap_gaps(full, acc, counts)
    return Outcome(verdict, ours, gaps + " (one trained model, 1,000 test examples)")


def _swap_masked_copy(root: Path) -> Outcome:
    """Table 1 on the masked copy: full attention's weights evaluated with both clustered attentions."""
    runs, missing = read_masked_copy(root, SWAP_COPY, 63, STEPS[63])
    if runs is None:
        return Outcome(INCOMPLETE, missing=tuple(missing))
    full_run = next((r for r in runs if isinstance(r, dict) and r.get("attention") == "softmax"), None)
    swaps = full_run.get("swap_eval") if full_run else None
    if not isinstance(swaps, list):
        return Outcome(INCOMPLETE, missing=(f"{SWAP_COPY}: the softmax run's swap_eval",))
    cells, missing = masked_copy_cells([full_run, *swaps], SWAP_COPY, 63)
    missing += _absent(cells, SWAP_COPY, 63)
    if missing:
        return Outcome(INCOMPLETE, missing=tuple(missing))
    full = 100 * cells[("full", 63, 0)]
    acc = {(f, c): 100 * cells[(f, 63, c)] for f in ("clustered", "improved_clustered") for c in CLUSTERS}
    ours = f"full attention {full:.1f}% masked accuracy; its weights evaluated with " + "; ".join(
        f"{c} clusters: clustered {acc[('clustered', c)]:.1f}%, improved {acc[('improved_clustered', c)]:.1f}%"
        for c in CLUSTERS)
    if full < 100 * SOLVED:
        return Outcome(NOT_REPRODUCED, ours, f"full attention {full:.1f}% < {SOLVED:.0%}",
                       detail="full attention did not solve L = 63: there is no learnt attention to approximate")
    verdict, gaps = swap_gaps(full, acc, list(CLUSTERS))
    return Outcome(verdict, ours, gaps + " (one trained model, masked symbols of 8 evaluation batches)")


def _fig5_budget(root: Path) -> Outcome:
    """Figure 5's L = 63 row at 2,400 steps: does improved clustered solve it given L = 127's budget?"""
    runs, missing = read_masked_copy(root, BUDGET, BUDGET_LENGTH, BUDGET_STEPS)
    if runs is None:
        return Outcome(INCOMPLETE, missing=tuple(missing))
    cells, missing = masked_copy_cells(runs, BUDGET, BUDGET_LENGTH)
    missing += _absent(cells, BUDGET, BUDGET_LENGTH)
    if missing:
        return Outcome(INCOMPLETE, missing=tuple(missing))
    full = cells[("full", BUDGET_LENGTH, 0)]
    solved = {f: [c for c in CLUSTERS if cells[(f, BUDGET_LENGTH, c)] >= SOLVED] for f in ("improved_clustered", "clustered")}
    ours = (f"L={BUDGET_LENGTH}, {BUDGET_STEPS} steps: full {100 * full:.0f}%; improved clustered solves "
            f"{len(solved['improved_clustered'])}/{len(CLUSTERS)} cluster counts, clustered "
            f"{len(solved['clustered'])}/{len(CLUSTERS)} ("
            + ", ".join(f"{c}: {100 * cells[('improved_clustered', BUDGET_LENGTH, c)]:.0f}% / "
                        f"{100 * cells[('clustered', BUDGET_LENGTH, c)]:.0f}%" for c in CLUSTERS) + ")")
    stat = f"solved = masked-symbol accuracy >= {SOLVED:.0%}, one seed per cell (improved / clustered per count)"
    if full < SOLVED:
        verdict = NOT_REPRODUCED
    else:
        n = len(solved["improved_clustered"])
        verdict = REPRODUCED if n == len(CLUSTERS) else (PARTLY if n >= 2 else NOT_REPRODUCED)
    return Outcome(verdict, ours, stat)


def _fig4(root: Path) -> Outcome:
    """Where clustered and improved clustered overtake full attention on this CPU, in time and in memory."""
    from lra_lab.reproduce.agglomerative import crossover

    record = evidence.read_json(root / FIG4)
    cases = record.get("cases") if record else None
    if not isinstance(cases, list):
        return Outcome(INCOMPLETE, missing=(FIG4,))
    full_name, clustered_name, improved_name = FIG4_FAMILIES

    def series(family: str, value) -> dict[int, float]:
        return {c["n"]: value(c) for c in cases if c.get("family") == family and c.get("status") == "ok"}

    seconds = {f: series(f, lambda c: c["seconds"]) for f in FIG4_FAMILIES}
    memory = {f: series(f, lambda c: c["memory"]["total_bytes"]) for f in FIG4_FAMILIES}
    if any(len(seconds[f]) < len(FIG4_LENGTHS) for f in FIG4_FAMILIES):
        return Outcome(INCOMPLETE, missing=tuple(f"{FIG4}: {f} at N = {', '.join(map(str, FIG4_LENGTHS))}"
                                                 for f in FIG4_FAMILIES if len(seconds[f]) < len(FIG4_LENGTHS)))
    time_cross = {f: crossover(seconds[full_name], seconds[f]) for f in (clustered_name, improved_name)}
    memory_cross = {f: crossover(memory[full_name], memory[f]) for f in (clustered_name, improved_name)}
    c, i = time_cross[clustered_name], time_cross[improved_name]
    time_ok = c is not None and i is not None and c <= i
    memory_ok = all(x is not None for x in memory_cross.values())
    n = max(FIG4_LENGTHS)

    def where(x: int | None) -> str:
        return "never" if x is None else f"from N={x}"
    ours = (f"faster than full attention: clustered {where(c)}, improved {where(i)} (the paper, on a GPU: 1,000 and "
            f"2,000); less memory: clustered {where(memory_cross[clustered_name])}, improved "
            f"{where(memory_cross[improved_name])}; at N={n}: full {1e3 * seconds[full_name][n]:.0f} ms / "
            f"{memory[full_name][n] / 2**20:.0f} MiB, clustered {1e3 * seconds[clustered_name][n]:.0f} ms / "
            f"{memory[clustered_name][n] / 2**20:.0f} MiB, improved {1e3 * seconds[improved_name][n]:.0f} ms / "
            f"{memory[improved_name][n] / 2**20:.0f} MiB")
    stat = ("one layer, forward + backward, batch 1, median of the timed calls; memory = the compiled step's "
            "arguments, outputs and temporaries (XLA's memory analysis)")
    verdict = REPRODUCED if time_ok and memory_ok else (PARTLY if time_ok or memory_ok else NOT_REPRODUCED)
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
        Claim("table1-swap-masked-copy", "Table 1 (train with one, evaluate with another), on the masked copy",
              "Improved clustered approximates a model trained with full attention better than clustered does.",
              "WSJ PER, trained full: full 5.14, clustered-100 ~10-46 depending on the row, i-clustered-100 5.95",
              f"full attention trained on the masked copy at L = 63 ({STEPS[63]} steps, `scripts/masked_copy.py` "
              "defaults: it solved L = 63 at 99.9% in the Figure 5 record), its weights evaluated with clustered and "
              f"improved clustered at {', '.join(map(str, CLUSTERS))} clusters on the same 8 batches "
              "(`--swap-eval`); replaces table1-swap-eval's ListOps model, which sits on the majority plateau",
              "first full attention must solve L = 63 (masked-symbol accuracy >= 90%), else not reproduced (no learnt "
              "attention to approximate); then reproduced if improved clustered's gap to full attention is <= "
              "clustered's at every cluster count and smaller by >= 1 point at one at least; partly if smaller by "
              ">= 1 point somewhere but larger elsewhere; not reproduced if no difference reaches 1 point",
              _swap_masked_copy, (SWAP_COPY_COMMAND,), (SWAP_COPY,), cpu_minutes=12),
        Claim("fig5-L63-budget", "Appendix C.2, Figure 5 (L = 63 at more steps)",
              "Improved clustered attention solves the masked copy at L = 63 for every cluster count, given the "
              "training budget L = 127 had.",
              "L = 63: improved clustered ~100% at 15, 30, 60 and 100 clusters (heatmap)",
              f"as fig5-masked-copy at L = {BUDGET_LENGTH} with {BUDGET_STEPS} steps instead of {STEPS[63]}: at 800 "
              "steps improved clustered solved 1 of 4 cluster counts and every clustered model's loss was still "
              "falling at the last step",
              f"reproduced if full attention solves L = {BUDGET_LENGTH} (>= 90%) and improved clustered solves all 4 "
              "cluster counts; partly if it solves 2 or 3 (more than the 1 at 800 steps); not reproduced if it solves "
              "at most 1, or full attention does not solve it",
              _fig5_budget, (masked_copy_command(BUDGET_LENGTH, BUDGET_STEPS, str(Path(BUDGET).parent)),), (BUDGET,),
              cpu_minutes=215),
        Claim("fig4-cost", "Appendix C.1, Figure 4 (on this CPU)",
              "Clustered attention becomes faster than full attention from about 1,000 elements, improved clustered "
              "from about 2,000, and both need less memory per sample than full attention.",
              "GPU curves: crossovers at about 1,000 (clustered) and 2,000 (improved) elements; full does not fit "
              "beyond 2^13",
              f"`scripts/bench_attention.py` on this CPU: one layer of 6 heads x 64 (the paper's), forward + "
              f"backward, batch 1, N = {', '.join(map(str, FIG4_LENGTHS))}, clustered 100 clusters (63 bits, 10 "
              "Lloyd steps), improved top-k 32",
              "reproduced if clustered and improved clustered each become faster than full attention from some N of "
              "the grid on (clustered no later than improved) and each needs less memory than full attention from "
              "some N on; partly if only the time or only the memory part holds; else not reproduced. Where the "
              "crossovers fall is reported against the paper's GPU numbers, not judged (another machine)",
              _fig4, (FIG4_COMMAND,), (FIG4,), cpu_minutes=15,
              cannot_fail=f"full attention's cost grows as N^2, clustered's as N x clusters: on a grid up to "
                          f"N = {FIG4_LENGTHS[-1]:,} a crossover somewhere is near certain; where it falls is the "
                          "finding, and it is reported, not judged"),
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
