"""ListOps with clustered attention (Vyas et al., 2020): C query clusters, 63-bit LSH, 10 Lloyd steps.

Options: paper | cpu | smoke, clusters=N (num_clusters), bits=, iterations=. Same parameter tree
as the Transformer baseline (pre-norm, CLS pooling), so softmax-trained weights evaluate with it.

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("listops", "clustered", arg)
