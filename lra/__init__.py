"""Long Range Arena in JAX/Flax: efficient attention families, one encoder, one training loop.

The library; its studies are the laboratory beside it (``lra_lab``), never imported here. Read from the bottom up:
each layer imports only those beneath it (tests/test_layering.py; the map: docs/design.md).

1. ``attention/`` (a module per family; the registry) and ``data/`` (a loader per task): neither imports the other.
2. ``model`` (the encoder and its heads), ``defaults`` (Table 2's task defaults, presets, the option parser) and
   ``reference_config`` (what ``:reference`` changes).
3. ``training/``: the loop and what a run needs (its ``__init__`` gives the order); ``memory_stats`` (the memory
   families' statistics, which the loop logs). Beneath every layer: ``errors``,
   ``console``, ``cpu_speed`` (bit-identical CPU speed settings), ``papers/``.
4. ``reports/`` (tables, statistics, the trivial ListOps baseline, plots).
5. The command lines: ``python -m lra.train``, ``lra.evaluate`` and ``python -m lra.data``.
"""
