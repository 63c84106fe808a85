"""lra's attention cores against their peers' own implementations on this CPU (lra_lab/bench/peers.py):
clustered and improved clustered vs fast-transformers, softmax vs XLA's and PyTorch's, dispersed
per attention score. The peers live in their own environment, named by --peer_python:

    python scripts/bench_peers.py --peer_python /work/peers-venv/bin/python --repeats 2

Writes OUT.json and OUT.md (default results/bench/peers); --help for every flag.
"""

from __future__ import annotations

from lra_lab.bench.peers import main

if __name__ == "__main__":
    main()
