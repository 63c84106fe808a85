"""ListOps with ConvLuna, Table 2: Conv K=32, stride 1.

Options: paper | cpu | smoke, mem=1|16|256, only_scaling | only_filtering (Appendix E), and
reference (the published code's choices, lra_lab/reference/).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("listops", "convluna", arg)
