"""ListOps with agglomerative attention (options: paper | cpu | smoke, classes=N, causal=true).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.defaults import make_config


def get_config(arg: str | None = None):
    return make_config("listops", "agglomerative", arg, label="Agglomerative")
