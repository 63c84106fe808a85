"""Image with dispersed hierarchical attention (Mukund S & Easwarakumar): a sliding window of w
tokens plus keys at cumulative gaps 2, 3, ..., 180 beyond it on each side (paper: w = 4).

Options: paper | cpu | smoke, window=W, max_gap=G, scale_scores=false, block_size=K (offsets per step),
chunk_size=C (positions per chunk; both speed only), implementation=auto|chunks|gather (auto: chunks
on a CPU, gather on GPU/TPU; the same function). Same parameter
tree as the Transformer baseline (pre-norm, CLS pooling), so softmax-trained weights evaluate with it.

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("image", "dispersed", arg)
