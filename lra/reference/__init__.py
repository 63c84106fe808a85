"""``:reference``: the published ConvLuna code's behaviour, one config option away.

The ConvLuna paper (Yorsh, Holeňa, Bojar, Herel: *On Difficulties of Attention Factorization
through Shared Memory*, ICLR 2024 Tiny Papers, arXiv:2404.00798) reports Tables 1 and 3 from runs of its
authors' public PyTorch code
(github vladyorsh/lra_efficient_transformers: ``lra/layers.py``, ``lra/models.py``,
``lra/setups.py``, ``lra_run.py``). Where that code differs from the paper's text or from this
suite's defaults, ``configs/<task>_<luna|convluna>.py:reference`` switches to the
code's behaviour. Every switch is also its own config field, listed in :data:`DIVERGENCES`
(which docs/reference.md's divergence table mirrors; a test keeps them in step).

Our defaults follow the paper's text and, where it is silent, the published code. Two of the
code's behaviours are bugs we reproduce only under ``reference``: it runs without padding masks
(``--mask_inputs False`` by default, and ``ConvLunaClassifier`` forces ``mask=None``), and its
ConvLuna unpacking attention receives its temperature in the ``affine`` argument slot, so its
logits are never scaled (the paper says d^-1/2).

Read in this order:

- ``lra.reference_config`` (a library module, beside ``lra.defaults``, which applies it):
  :data:`DIVERGENCES` and ``apply_reference``, what ``:reference`` changes in a config;
- ``published_code``: their PyTorch model beside ours, weights copied, logits and gradients
  compared (scripts/check_published_code.py);
- ``init_effect``: whether their PyTorch initialisation changes training
  (``python -m lra.reference.init_effect``).

This package is the laboratory's: it builds models and reads runs, in the layer of
``lra.experiments`` (tests/test_layering.py).
"""
