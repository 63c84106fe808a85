"""Benchmarks: what the attention families and the training step cost on a machine. Read in this order:

- ``attention``: one attention layer's forward + backward time and memory against length, every
  family (scripts/bench_attention.py; a case in its own process: ``python -m lra_lab.bench.attention``);
  ``attention_report`` its checks, table and figure, ``projections`` its reference row.
- ``device_info``: device memory counters, a compiled step's memory, a report's environment block
  (``attention`` and ``steps`` both record them).
- ``steps``: whole training steps of each family's ListOps config: steps/s, FLOPs, MFU, memory, and
  seeds vmapped against sequential runs (scripts/bench_training.py; ``python -m lra_lab.bench.steps``).
- ``launch_diff``: why a step's launch count changes with N (one config compiled for a GPU at two
  lengths, its cuBLAS calls and fusions side by side; ``python -m lra_lab.bench.launch_diff``).
- ``device_turns``: benchmark processes sharing one accelerator compile together and time alone.
- ``profile_summary``: ``python -m lra_lab.bench.profile_summary DIR``: a ``lra.train --profile`` trace as
  host input, device busy, gaps and top ops.
- ``peers``: lra's attention cores against fast-transformers, XLA's and PyTorch's (scripts/bench_peers.py).
- ``dispersed_impl``: ways of computing dispersed attention, timed side by side
  (scripts/bench_dispersed_impl.py).
- ``conv_window``: ways of assembling ConvLuna's convolution windows, checked bit for bit against the
  suite's and timed in a layer's forward + backward (``python -m lra_lab.bench.conv_window``).
- ``cache_check``: what sealing the token cache costs at load (SHA-256 of every array + range check)
  on a paper-scale ListOps entry (scripts/bench_cache_check.py).

Benchmarks sit above ``lra.training`` (they build its steps) and below the command lines; nothing in
the layers beneath imports them (tests/test_layering.py).
"""
