"""Kernel launches per training step on a GPU, from a deviceless compile on this machine (lra_lab/bench/launches.py).

LRA_PREFLIGHT_GPU_SPECS=../gpuspecs python scripts/bench_launches.py --python ../gpuenv/bin/python   # the record
LRA_PREFLIGHT_GPU_SPECS=../gpuspecs python scripts/bench_launches.py --python ../gpuenv/bin/python \\
    --families clustered --lengths 1024 --name launches_look                                      # a quick look
"""

from __future__ import annotations

import sys

from lra_lab.bench.launches import main

if __name__ == "__main__":
    sys.exit(main())
