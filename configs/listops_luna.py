"""ListOps with Luna (Appendix B; options: paper | cpu | smoke,
mem=1|16|256, reference).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("listops", "luna", arg)
