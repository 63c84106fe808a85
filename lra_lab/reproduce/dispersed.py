"""Dispersed hierarchical attention (Ajay Mukund S & Easwarakumar, ICON 2023; ACL Anthology
2023.icon-1.10, no arXiv version).

The paper's only quantitative evaluation is Table 1: the number of attention scores that full,
sliding-window (w = 4) and dispersed hierarchical attention compute for N = 10 ... 16,384 tokens.
We count ours two ways and compare both with every row:

* from the pattern's definition (``lra.attention.dispersed.num_scores``, O(#offsets) per N), and
* from the module itself: for N <= 500 the Jacobian of ``DispersedAttention``'s output with respect
  to its input is computed and its nonzero (query, key) blocks are counted, so the count is of what
  the implementation attends to, not of a formula beside it.

    python -m lra_lab.reproduce.dispersed --out results/reproductions/dispersed/table1_counts.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra_lab.reproduce import dispersed_formulas, evidence
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

RECORD = "results/reproductions/dispersed/table1_counts.json"
COMMAND = f"python -m lra_lab.reproduce.dispersed --out {RECORD}"
WINDOW = 4
# The paper's Table 1 as printed: N -> (full, sliding window, dispersed hierarchical).
PAPER_TABLE1 = {
    10: (100, 44, 62), 50: (2500, 244, 700), 100: (10000, 494, 1962), 500: (250000, 2494, 21524),
    1000: (1000000, 4994, 60550), 5000: (25000000, 24994, 671500), 10000: (10000000, 49994, 1895358),
    15000: (225000000, 74994, 3478806), 16384: (268435456, 81914, 3970510),
}
MODULE_LENGTHS = (10, 50, 100, 500)  # Jacobian-counted (N x N blocks: small N only)
GROWTH_LENGTHS = tuple(2 ** k for k in range(10, 21))


def module_count(n: int, features: int = 8) -> int:
    """(query, key) pairs whose key moves the query's output in ``DispersedAttention`` (Jacobian blocks)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from lra.attention.dispersed import DispersedAttention

    attn = DispersedAttention(num_heads=1, qkv_dim=features, window=WINDOW)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, n, features))
    mask = jnp.ones((1, n), bool)
    params = attn.init(jax.random.PRNGKey(1), x, mask)
    jac = jax.jacrev(lambda x: attn.apply(params, x, mask)[0][0])(x)  # N x D x 1 x N x D
    blocks = np.abs(np.asarray(jac[:, :, 0])).max(axis=(1, 3))  # N (query) x N (key)
    return int((blocks > 0).sum())


def measure() -> dict[str, Any]:
    from lra.attention.dispersed import num_scores, offsets

    rows = []
    for n, (paper_full, paper_window, paper_dispersed) in sorted(PAPER_TABLE1.items()):
        rows.append(dict(
            n=n, paper_full=paper_full, paper_window=paper_window, paper_dispersed=paper_dispersed,
            full=n * n, window=num_scores(n, WINDOW, max_gap=1), dispersed=num_scores(n, WINDOW),
            module=module_count(n) if n in MODULE_LENGTHS else None))
        print(f"  N={n:6d}: dispersed {rows[-1]['dispersed']:>9d} (paper {paper_dispersed:>9d}), module "
              f"{rows[-1]['module']}", flush=True)
    growth = [dict(n=n, scores=num_scores(n, WINDOW)) for n in GROWTH_LENGTHS]
    return dict(rows=rows, growth=growth, keys_per_query_bound=int(len(offsets(WINDOW))), window=WINDOW)


def _load(root: Path) -> dict[str, Any] | None:
    record = evidence.read_json(root / RECORD)
    return record if record and record.get("rows") else None


def _table1(root: Path) -> Outcome:
    record = _load(root)
    if record is None:
        return Outcome(INCOMPLETE, missing=(RECORD,))
    rows = record["rows"]
    dispersed_ok = [r["n"] for r in rows if r["dispersed"] == r["paper_dispersed"]]
    window_ok = [r["n"] for r in rows if r["window"] == r["paper_window"]]
    module_rows = [r for r in rows if r.get("module") is not None]
    module_ok = [r["n"] for r in module_rows if r["module"] == r["dispersed"]]
    misprints = [f"N={r['n']}: printed {r['paper_full']:,}, N^2 = {r['full']:,}" for r in rows
                 if r["paper_full"] != r["full"]]
    ours = (f"dispersed column equal in {len(dispersed_ok)}/{len(rows)} rows, sliding window in "
            f"{len(window_ok)}/{len(rows)}; the module's Jacobian count equals the pattern's in "
            f"{len(module_ok)}/{len(module_rows)} lengths ({', '.join(map(str, MODULE_LENGTHS))})")
    stat = "exact integer equality" + (f"; the paper's full-attention column has misprints ({'; '.join(misprints)})"
                                       if misprints else "")
    everything = len(dispersed_ok) == len(window_ok) == len(rows) and len(module_ok) == len(module_rows)
    verdict = REPRODUCED if everything else (PARTLY if dispersed_ok else NOT_REPRODUCED)
    return Outcome(verdict, ours, stat)


def _linear_growth(root: Path) -> Outcome:
    """Linear complexity as a bound that holds for every N, not a slope at the grid's last point.

    Issue 37: the earlier rule added a "partly" its words lacked and turned on the growth per doubling
    at N = 2^20 (2.0105 against 2.01: one more doubling would flip it). The count is scores <= K N with K
    the pattern's number of offsets, a constant of the window and the gaps (``offsets`` takes no N), so
    the rule checks that bound at every N of the grid; the pre-asymptotic growth is reported, not judged.
    """
    record = _load(root)
    if record is None or not record.get("growth"):
        return Outcome(INCOMPLETE, missing=(RECORD,))
    growth = sorted(record["growth"], key=lambda g: g["n"])
    bound = record["keys_per_query_bound"]
    per_query = [g["scores"] / g["n"] for g in growth]
    doubling = [b["scores"] / a["scores"] for a, b in zip(growth, growth[1:])]
    over = [g["n"] for g, p in zip(growth, per_query) if p > bound]
    ours = (f"scores per query {per_query[0]:.0f} at N={growth[0]['n']:,}, {per_query[-1]:.1f} at "
            f"N={growth[-1]['n']:,}, never above the pattern's {bound} offsets"
            + (f" except at N = {', '.join(map(str, over))}" if over else ""))
    stat = (f"scores / N <= K = {bound} (offsets of Algorithm 2 for window {record.get('window')}, gaps 2..180, "
            f"independent of N) at all {len(growth)} lengths N = 2^10 ... 2^20")
    verdict = NOT_REPRODUCED if over else REPRODUCED
    detail = (f"linear only asymptotically: scores grow x{doubling[0]:.2f} per doubling at N={growth[0]['n']:,} and "
              f"x{doubling[-1]:.3f} at N={growth[-1]['n']:,}; below N ~ 33K the keys per query still grow (the gaps "
              "run out at N ~ 2 x 16,290), so in the range of Table 1 the count grows faster than N")
    return Outcome(verdict, ours, stat, detail=detail)


PAPER = Paper(
    key="dispersed",
    title="Dispersed Hierarchical Attention Network for Machine Translation and Language Understanding on "
          "Long Documents with Linear Complexity",
    citation="Ajay Mukund S & Easwarakumar, ICON 2023 (ACL Anthology 2023.icon-1.10)",
    claims=(
        Claim("table1-counts", "Table 1",
              "Dispersed hierarchical attention computes the listed number of attention scores for N = 10 ... 16,384 "
              "(window 4): 62 ... 3,970,510, about 1.5% of full attention at 16K.",
              "dispersed column 62, 700, 1,962, 21,524, 60,550, 671,500, 1,895,358, 3,478,806, 3,970,510",
              "count the pattern of `lra.attention.dispersed` at every N of the table, and the module's own "
              f"Jacobian nonzeros at N in {MODULE_LENGTHS}",
              "reproduced if the dispersed and sliding-window columns equal ours at every N and the module's Jacobian "
              "count equals the pattern's; partly if only some dispersed rows match",
              _table1, (COMMAND,), (RECORD,), cpu_minutes=1, kind=CONSTRUCTION),
        Claim("linear-complexity", "Title, Sections 4-5",
              "The number of attention scores grows linearly with the document length.",
              "\"achieves linear complexity\"; Table 1 shows 1.48% of N^2 at 16K",
              "the pattern's scores at N = 2^10 ... 2^20 against K N (K: its number of offsets); the bound holds "
              "by construction (a fixed set of offsets), so this checks the implementation, not the paper",
              "reproduced if the scores per query (scores / N) are at most K, the pattern's number of offsets (a "
              "constant of the window and the gaps, independent of N), at every N of the grid: then scores <= K N "
              "for every N, not only where the grid stops; not reproduced if scores / N exceeds K at any N",
              _linear_growth, (COMMAND,), (RECORD,), cpu_minutes=1, kind=CONSTRUCTION),
        Claim("equation-10", "Section 3, equations 3-10",
              "The closed form Att = Att_Window + S_x + Remainder gives the number of attention scores.",
              "equation 10 (with eqs. 3, 4, 8, 9); Table 1's dispersed column is what it should give",
              "equation 10 as printed, reading the undefined d of equation 9 as x (the sum then runs over the x "
              "complete groups of the series), against the pattern's count (equal to Table 1) at Table 1's N, "
              "window 4; Algorithm 1 + eq. 3 recorded beside it",
              "reproduced if equation 10 equals the pattern's count at every N of Table 1; partly if at some; "
              "not reproduced if at none",
              dispersed_formulas.judge_equation_10, (dispersed_formulas.COMMAND,), (dispersed_formulas.RECORD,),
              cpu_minutes=1),
        Claim("window-invariance", "Section 5",
              "Varying the sliding window size does not change the deviation from full attention substantially.",
              "\"Even if the sliding window size w is varied, the results don't vary substantially in terms of "
              "deviation\" (no numbers; hence w = 4)",
              f"the pattern's scores / N^2 at Table 1's N for windows {dispersed_formulas.OTHER_WINDOWS} against "
              f"{dispersed_formulas.WINDOW}",
              f"reproduced if at every N of Table 1 each window's deviation is within "
              f"{dispersed_formulas.RELATIVE:.0%} (relative) of w = 4's; partly if that holds at every "
              f"N >= {dispersed_formulas.LONG} only; else not reproduced",
              dispersed_formulas.judge_window, (dispersed_formulas.COMMAND,), (dispersed_formulas.RECORD,),
              cpu_minutes=1),
        not_testable("downstream-tasks", "Section 6",
                     "The attention serves machine translation and language understanding on long documents.",
                     "none: the paper reports no task results",
                     "a translation or summarisation corpus of long documents and a decoder (the paper itself "
                     "leaves this to future work)",
                     ""),
    ),
)


def main(argv: list[str] | None = None) -> int:
    from lra_lab.experiments.records import measure_main

    return measure_main('Dispersed attention, Table 1: attention-score counts.', RECORD, measure, argv)


if __name__ == "__main__":
    raise SystemExit(main())
