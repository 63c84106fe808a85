"""ListOps with agglomerative attention (options: paper | cpu | smoke, classes=N, causal=true).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("listops", "agglomerative", arg)
