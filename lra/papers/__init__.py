"""What a paper fixes, one module per paper, kept out of the generic layers.

A paper's numbers and names (its memory sizes, its table's row order, its ablation flags, its
task defaults, its sweep grids' rows) are data the generic code is given, not knowledge it holds. These modules import
nothing of lra, so every layer may read them (tests/test_layering.py: beside ``lra.errors``).

- ``convluna``: Yorsh, Holeňa, Bojar, Herel, *On Difficulties of Attention Factorization through
  Shared Memory* (arXiv:2404.00798).
"""
