"""IMDB byte-level text classification with the softmax Transformer baseline (options: paper | cpu | smoke).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
GPU fused attention: implementation=cudnn (needs bf16 and --config.model.attention_dropout_rate=0).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("text", "softmax", arg)
