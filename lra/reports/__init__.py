"""Reports: tables, statistics and figures, regenerated from the run records on disk. Read in this order:

- ``tables``: results/ tables from the runs' result.json and metrics.jsonl (scripts/make_tables.py):
  Table 1 / Table 3 layouts, mean +- std, which cells are bold, what is missing. Its parts:
  ``table_runs`` (reading, ordering, grouping), ``table_build`` (one table), ``table_render``
  (markdown, LaTeX), ``table_curves`` (what the curve figures draw).
- ``stats``: mean +- sample std over seeds; the Friedman test over memory sizes with Holm's correction.
- ``compare``: two sets of runs side by side, and the mean +- std line ``lra.train`` prints at the end.
- ``listops_baseline``: the trivial, structure-free ListOps baseline every accuracy is read against.
- ``plots``: the tables' figures (matplotlib imported only when one is drawn).

Reports read what ``lra.training`` wrote: the library's top layer, below its command lines; nothing
here imports the laboratory (``lra_lab``: its own reports, the diagnostics, the reproductions;
tests/test_layering.py).
"""
