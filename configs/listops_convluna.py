"""ListOps with ConvLuna, Table 2: Conv K=32, stride 1.

Options: paper | cpu | smoke, mem=1|16|256, only_scaling | only_filtering (Appendix E), and
reference (the published code's choices, lra/reference/).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.attention.luna import CONVLUNA_FLAGS
from lra.defaults import MEMORY_FAMILY_MODEL, make_config


def get_config(arg: str | None = None):
    return make_config("listops", "convluna", arg, label="ConvLuna-{memory_size}",
                       attention_kwargs=dict(filter="conv", kernel_size=32, stride=1),
                       model=MEMORY_FAMILY_MODEL, flags=CONVLUNA_FLAGS)
