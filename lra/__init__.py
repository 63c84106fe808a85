"""Long Range Arena in JAX/Flax: efficient attention families, one encoder, one training loop.

The floor plan, read from the bottom up (each layer imports only the layers beneath it; a test,
tests/test_layering.py, fails when one reaches up; docs/design.md has the whole map):

1. ``attention/`` (one module per family; the registry) and ``data/`` (one loader per task,
   batching, caches): neither imports the other.
2. ``model`` (the encoder and its heads) and ``defaults`` (Table 2's task defaults, presets, the
   option parser, config files), with ``reference`` (what ``:reference`` changes in a config).
3. ``training/``: the loop and everything a run needs, in eight modules (its ``__init__`` gives the
   reading order). Beneath every layer: ``errors`` (the error classes and exit codes), ``console``,
   ``cpu_speed`` (the bit-identical CPU speed settings the loop and the runners opt into), ``papers/``.
4. What uses training runs: ``bench/`` (attention and step benchmarks, peers, profiling),
   ``reports/`` (tables, statistics, plots, diagnostics), ``experiments/`` (sweeps, masked copy),
   ``reproduce/`` (each paper's claims with verdicts), ``preflight/`` (cost and fit before a run),
   and ``reference.published_code`` / ``reference.init_effect``.
5. The command lines: ``python -m lra.train``, ``lra.evaluate``, ``lra.diagnose`` (here),
   ``lra.data``, ``lra.reproduce``, ``lra.preflight`` (their packages' ``__main__``); scripts/ holds
   thin entry points into layers 4 and 5.
"""
