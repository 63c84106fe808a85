"""ListOps with cheap linear attention (options: paper | cpu | smoke, normalize=false, causal=true).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("listops", "linear", arg)
