"""Long Range Arena in JAX/Flax: efficient attention families, one encoder, one training loop.

This package is the library, what a user imports and extends; the studies that use it (reproductions,
benchmarks, preflight, experiments, the published-code check) are the laboratory beside it, the
``lra_lab`` package, which this one never imports. Read from the bottom up (each layer imports only the
layers beneath it, and no modules import each other in a circle; tests/test_layering.py fails when one
does; docs/design.md has the whole map):

1. ``attention/`` (one module per family; the registry) and ``data/`` (one loader per task,
   batching, caches, the download): neither imports the other.
2. ``model`` (the encoder and its heads) and ``defaults`` (Table 2's task defaults, presets, the
   option parser, config files), with ``reference_config`` (what ``:reference`` changes in a config).
3. ``training/``: the loop and everything a run needs, in eight modules (its ``__init__`` gives the
   reading order). Beneath every layer: ``errors`` (the error classes and exit codes), ``console``,
   ``cpu_speed`` (the bit-identical CPU speed settings the loop and the runners opt into), ``papers/``.
4. ``reports/`` (tables, statistics, the trivial ListOps baseline, plots).
5. The command lines: ``python -m lra.train``, ``lra.evaluate`` and ``python -m lra.data``
   (``data/prepare``).
"""
