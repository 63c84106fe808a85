"""Image (CIFAR-10) with Luna (Appendix B; options: paper | cpu | smoke,
mem=1|16|256, reference).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.defaults import MEMORY_FAMILY_MODEL, make_config


def get_config(arg: str | None = None):
    return make_config("image", "luna", arg, label="Luna-{memory_size}",
                       model=MEMORY_FAMILY_MODEL)
