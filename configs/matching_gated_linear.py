"""Matching (AAN retrieval) with gated linear attention (options: paper | cpu | smoke, gate_on=key|value|both).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.defaults import make_config


def get_config(arg: str | None = None):
    return make_config("matching", "gated_linear", arg, label="Gated Linear")
