"""Experiments: grids of training runs and small studies of their own. Read in this order:

- ``sweep``: named grids (tasks x variants x seeds) expanded into ``python -m lra.train`` runs,
  listed, run (finished ones skipped, unfinished ones resumed) or written as a SLURM array
  (scripts/sweep.py); the grids the reproductions and preflight read.
  Its parts: ``sweep_grids`` (the grids), ``sweep_runs`` (a grid's runs, their configs and state),
  ``sweep_cli`` (the command line, ``--config.FIELD=VALUE``, the runs a command selects).
- ``masked_copy``: the clustered-attention paper's masked-copy task, full vs clustered vs improved
  clustered, trained in-process (scripts/masked_copy.py; resumable per variant).
- ``records``: a measurement's record written with its provenance and seal (``write_record``) and the
  one-record command line (``measure_main``), for the benchmarks, preflight and the reproductions.

Experiments are the laboratory's lowest layer: above the library, below ``bench``, ``preflight`` and
``reproduce`` (tests/test_layering.py).
"""
