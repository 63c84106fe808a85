"""``:reference``: the published ConvLuna code's behaviour, one config option away.

What the published code does differently, and why two of its bugs are reproduced only under
``reference``: :mod:`lra.reference_config` (the switch itself lives there, in the library).

Read in this order:

- ``lra.reference_config`` (a library module, beside ``lra.defaults``, which applies it):
  :data:`DIVERGENCES` and ``apply_reference``, what ``:reference`` changes in a config;
- ``published_code``: their PyTorch model beside ours, weights copied, logits and gradients
  compared (scripts/check_published_code.py);
- ``init_effect``: whether their PyTorch initialisation changes training
  (``python -m lra_lab.reference.init_effect``).

This package is the laboratory's: it builds models and reads runs, in the layer of
``lra_lab.experiments`` (tests/test_layering.py).
"""
