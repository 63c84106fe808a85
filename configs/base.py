"""Task defaults at paper scale (Table 2 of the ConvLuna paper, arXiv:2404.00798), softmax attention.

The defaults live in ``lra/defaults.py`` so the package can import them; this file exposes them
to ``--config configs/base.py:TASK``.
"""

from lra.defaults import task_config


def get_config(arg: str | None = None):
    return task_config(arg or "listops")
