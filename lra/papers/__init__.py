"""What a paper fixes, one module per paper, kept out of the generic layers.

A paper's numbers and names are data the generic code is given. These modules import nothing of lra, so every layer
may read them (tests/test_layering.py).

- ``convluna``: Yorsh, Holeňa, Bojar, Herel, *On Difficulties of Attention Factorization through Shared Memory*
  (arXiv:2404.00798).
"""
