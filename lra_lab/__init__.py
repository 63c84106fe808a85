"""The laboratory beside the ``lra`` library: the studies, benchmarks and checks that use the library
and that the library never imports (tests/test_layering.py; docs/design.md, Layout).

Read from the bottom up; each layer imports the library and the layers beneath it, none above:

1. ``reports/`` (figures and comparisons of finished runs: learning curves against the trivial baseline,
   two sweeps' curves side by side, ConvLuna's memory diagnostics, Pathfinder figures), ``diagnose``
   (``python -m lra_lab.diagnose memory``), ``experiments/`` (sweeps, masked copy, a measurement's
   record) and ``reference/`` (the published ConvLuna code beside ours).
2. ``bench/`` (attention and step benchmarks, kernel launches, peers, profiling) and ``preflight/``
   (cost and fit before a run, compiled for an accelerator on this machine).
3. ``reproduce/``: each paper's claims with verdicts from committed records, the pre-registration
   audit, replications, the docs' numbers checked.

Until issue 55 these packages lived inside ``lra/`` (``lra.reproduce``, ``lra.bench``, ...): a record
written before that names its command as it was then (``python -m lra.bench.laptop`` is
``python -m lra_lab.bench.laptop`` now); the audit reads old commits in their own layout.
"""
