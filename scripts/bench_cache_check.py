"""What sealing the token cache costs at load (lra_lab/bench/cache_check.py): SHA-256 of every array +
the token/label range check, on a paper-scale ListOps entry; --help for every flag.

    python scripts/bench_cache_check.py --out results/bench/cache_check.json   # paper-scale ListOps (the record)
    python scripts/bench_cache_check.py --rows 2000     # a quick look
"""

from __future__ import annotations

import sys

from lra_lab.bench.cache_check import main

if __name__ == "__main__":
    sys.exit(main())
