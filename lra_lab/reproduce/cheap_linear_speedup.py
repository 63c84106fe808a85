"""Cheap linear attention, Section 5: the lookup speed-up over softmax at the paper's own sizes.

The paper (CNN QA: documents of n = 750 words on average, k = 100 hidden units, m = 4 questions per
document) predicts "a speedup of n k m / (m k^2) = n / k ~ 7 for each attention lookup" for an
optimised implementation. Timed here with the same lookups as Table 1 (a), ``cheap_linear_lookups.lookups``:
one-head ``LinearAttention`` (C q, then the output projection) against softmax over the projected
document H (n x k), for a batch of documents, each with its m = 4 queries. Two timings, each the
median of ``CALLS`` calls, apart in the same process: the rule uses each, the report their spread.

    python -m lra_lab.reproduce.cheap_linear_speedup --out results/reproductions/cheap_linear/lookup_speedup.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra_lab.reproduce import evidence
from lra_lab.reproduce.claims import INCOMPLETE, NOT_REPRODUCED, PARTLY, REPRODUCED, Outcome

RECORD = "results/reproductions/cheap_linear/lookup_speedup.json"
COMMAND = f"python -m lra_lab.reproduce.cheap_linear_speedup --out {RECORD}"
N, K, M = 750, 100, 4  # the paper's average document length, hidden size, questions per document
DOCUMENTS = 512  # documents per call: enough work per call that dispatch does not dominate
TIMINGS = 2
PREDICTED = N / K  # 7.5, the paper's "~ 7"
BAND = 2.0  # reproduced within a factor of 2 of the prediction


def measure() -> dict[str, Any]:
    from lra_lab.reproduce.cheap_linear_lookups import _median_seconds, lookups

    f = lookups(N, width=K, batch=DOCUMENTS, queries=M)
    timings = []
    for i in range(TIMINGS):
        linear = _median_seconds(f["lookup_linear"], f["c"], f["xq"])
        softmax = _median_seconds(f["lookup_softmax"], f["h"], f["xq"])
        timings.append(dict(lookup_seconds_linear=linear, lookup_seconds_softmax=softmax, speedup=softmax / linear))
        print(f"  timing {i + 1}: linear {1e3 * linear:.3f} ms, softmax {1e3 * softmax:.3f} ms per call of "
              f"{DOCUMENTS} documents x {M} queries: speed-up {softmax / linear:.2f}x", flush=True)
    return dict(timings=timings, n=N, k=K, m=M, documents=DOCUMENTS)


def judge(root: Path) -> Outcome:
    record = evidence.read_json(root / RECORD)
    timings = record.get("timings") if record else None
    if not timings:
        return Outcome(INCOMPLETE, missing=(RECORD,))
    speedups = [t["speedup"] for t in timings]
    ours = (f"softmax / linear lookup time at n = {N}, k = {K}, m = {M}: "
            + ", ".join(f"{x:.2f}x" for x in speedups)
            + f" ({len(speedups)} timings, spread {max(speedups) - min(speedups):.2f}); the paper predicts n/k = "
            f"{PREDICTED:.1f}")
    stat = (f"each timing the median of the calls, {record.get('documents')} documents x {M} queries per call; "
            f"band [{PREDICTED / BAND:.2f}, {PREDICTED * BAND:.1f}]")
    within = all(PREDICTED / BAND <= x <= PREDICTED * BAND for x in speedups)
    faster = all(x > 1 for x in speedups)
    verdict = REPRODUCED if within else (PARTLY if faster else NOT_REPRODUCED)
    return Outcome(verdict, ours, stat)


def main(argv: list[str] | None = None) -> int:
    from lra_lab.experiments.records import measure_main

    return measure_main('Cheap linear attention: lookup speed-up at n = 750, k = 100.', RECORD, measure, argv)


if __name__ == "__main__":
    raise SystemExit(main())
