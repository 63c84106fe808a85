"""The laboratory's reports: figures and comparisons of finished runs, beside the library's tables.

- ``learning_curves``: a study's curves per step against the trivial baseline (lra.reports.listops_baseline).
- ``curve_compare``: two sweeps' training-loss curves run by run (scripts/compare_curves.py).
- ``diagnostics``, ``memory_report`` and ``memory_figures``: ``python -m lra_lab.diagnose memory``, the
  ConvLuna paper's Figure 1 (memory heatmaps and statistics of finished Luna / ConvLuna runs; the
  statistics themselves are the library's, lra.memory_stats).
- ``pathfinder_figures``: Pathfinder example images and a run's validation curve (scripts/pathfinder_figures.py).
"""
