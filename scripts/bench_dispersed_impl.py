"""Compare ways of computing dispersed attention on this machine (lra_lab/bench/dispersed_impl.py):
the module's query chunks at several sizes, shifted copies (looped or scanned) and softmax for
scale, checked against each other, then timed forward + backward. Writes
results/bench/dispersed_impl.{json,md}.

    python scripts/bench_dispersed_impl.py                  # N = 1024, 4096; width 128, 4 heads
    python scripts/bench_dispersed_impl.py --lengths 4096 --repeats 10
    python scripts/bench_dispersed_impl.py --report-only    # rewrite the .md from the .json
"""

from __future__ import annotations

from lra_lab.bench.dispersed_impl import main

if __name__ == "__main__":
    main()
