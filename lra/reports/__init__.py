"""Reports: tables, statistics, figures and diagnostics, regenerated from the run records on disk.
Read in this order:

- ``tables``: results/ tables from the runs' result.json and metrics.jsonl (scripts/make_tables.py):
  Table 1 / Table 3 layouts, mean +- std, which cells are bold, what is missing. Its parts:
  ``table_runs`` (reading, ordering, grouping), ``table_build`` (one table), ``table_render``
  (markdown, LaTeX), ``table_curves`` (what the curve figures draw).
- ``stats``: mean +- sample std over seeds; the Friedman test over memory sizes with Holm's correction.
- ``plots``: every figure (matplotlib imported only when one is drawn).
- ``diagnostics``: ``python -m lra.diagnose memory``: Figure 1's memory heatmaps and statistics of
  finished Luna / ConvLuna runs (the statistics themselves: ``lra.training.metrics``).
- ``curve_compare``: two sweeps' training-loss curves run by run (scripts/compare_curves.py).
- ``pathfinder_figures``: Pathfinder example images and a run's validation curve
  (scripts/pathfinder_figures.py).
- ``replication``: only the old entry point ``python -m lra.reports.replication`` (the committed
  replication records name it); the module is ``lra.reproduce.replication``.

Reports read what ``lra.training`` wrote: the library's top layer, below its command lines; nothing
here imports the laboratory (``lra.reproduce``, ``lra.bench``, ...; tests/test_layering.py). The
checks that read the reproductions (``doc_numbers``, ``replication``) are in ``lra.reproduce``.
"""
