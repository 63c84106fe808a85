"""IMDB byte-level text classification with the softmax Transformer baseline (options: paper | cpu | smoke).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
GPU fused attention: implementation=cudnn (needs bf16 and --config.model.attention_dropout_rate=0).
"""

from lra.defaults import make_config


def get_config(arg: str | None = None):
    return make_config("text", "softmax", arg, label="Transformer")
