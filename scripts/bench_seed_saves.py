"""Vmapped seeds' checkpoint saves one at a time against side by side (lra_lab/bench/seed_saves.py).

python scripts/bench_seed_saves.py --out results/bench/seed_saves_cpu.json   # the record
python scripts/bench_seed_saves.py --seeds 4 --steps 40 --rounds 1          # a quick look
"""

from __future__ import annotations

import sys

from lra_lab.bench.seed_saves import main

if __name__ == "__main__":
    sys.exit(main())
