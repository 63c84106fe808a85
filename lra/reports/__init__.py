"""Reports: tables, statistics and figures, regenerated from the run records on disk. Read in this order:

- ``tables``: results tables (scripts/make_tables.py); its parts ``table_runs`` (reading, ordering, grouping),
  ``table_build`` (one table), ``table_render`` (markdown, LaTeX), ``table_curves`` (what the curve figures draw).
- ``stats``: mean +- sample std over seeds; the Friedman test over memory sizes with Holm's correction.
- ``compare``: two sets of runs side by side, and the mean +- std line ``lra.train`` prints at the end.
- ``listops_baseline``: the trivial, structure-free ListOps baseline every accuracy is read against.
- ``plots``: the tables' figures (matplotlib imported only when one is drawn).

The library's top layer below its command lines; nothing here imports the laboratory (tests/test_layering.py).
"""
