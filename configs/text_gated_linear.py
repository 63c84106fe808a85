"""Text (IMDB byte-level) with gated linear attention (options: paper | cpu | smoke, gate_on=key|value|both).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("text", "gated_linear", arg)
