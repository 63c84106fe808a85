"""Long Range Arena in JAX/Flax: efficient attention families, one encoder, one training loop.

The floor plan, read from the bottom up: the library, then the laboratory beside it (each layer
imports only the layers beneath it, the library never the laboratory, and no modules import each
other in a circle; a test, tests/test_layering.py, fails when one does; docs/design.md has the whole map).

The library, what a user imports and extends:

1. ``attention/`` (one module per family; the registry) and ``data/`` (one loader per task,
   batching, caches, the download): neither imports the other.
2. ``model`` (the encoder and its heads) and ``defaults`` (Table 2's task defaults, presets, the
   option parser, config files), with ``reference_config`` (what ``:reference`` changes in a config).
3. ``training/``: the loop and everything a run needs, in eight modules (its ``__init__`` gives the
   reading order). Beneath every layer: ``errors`` (the error classes and exit codes), ``console``,
   ``cpu_speed`` (the bit-identical CPU speed settings the loop and the runners opt into), ``papers/``.
4. ``reports/`` (tables, statistics, plots, diagnostics).
5. The library's command lines: ``python -m lra.train``, ``lra.evaluate``, ``lra_lab.diagnose`` (here)
   and ``python -m lra.data`` (``data/prepare``).

The laboratory, the studies that use the library:

6. ``experiments/`` (sweeps, masked copy, a measurement's record) and ``reference/`` (the published
   ConvLuna code beside ours).
7. ``bench/`` (attention and step benchmarks, peers, profiling) and ``preflight/`` (cost and fit
   before a run).
8. ``reproduce/`` (each paper's claims with verdicts; replications; the docs' numbers checked).

Entry points (``python -m lra_lab.reproduce``, ``lra_lab.preflight``: their packages' ``__main__``) sit on
top; scripts/ holds thin entry points into both parts.
"""
