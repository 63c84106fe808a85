"""Text with improved clustered attention (Vyas et al., 2020): C clusters + exact top-32 keys.

Options: paper | cpu | smoke, clusters=N (num_clusters), topk=, bits=, iterations=. Same parameter
tree as the Transformer baseline (pre-norm, CLS pooling), so softmax-trained weights evaluate with it.

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.defaults import make_config


def get_config(arg: str | None = None):
    return make_config("text", "improved_clustered", arg, label="i-Clustered-{num_clusters}",
                       attention_kwargs=dict(num_clusters=100, topk=32, bits=63, iterations=10))
