"""Our parameter path -> their ``state_dict`` name and array conversion, for :mod:`lra_lab.reference.published_code`.

Written from their module layout (``lra/layers.py``, ``lra/models.py`` of github
vladyorsh/lra_efficient_transformers): every weight of their Luna / ConvLuna model copied into the
parameters of our ``:reference`` model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lra_lab.reference.authors_models import Case, attention_options

Tensor = Any  # torch.Tensor
Mapping = dict[tuple[str, ...], tuple[str, Callable[[np.ndarray], np.ndarray]]]


def _linear(our: tuple[str, ...], their: str, heads: tuple[int, int] | None = None, to_heads: bool = False) -> Mapping:
    """nn.Linear(in, out) -> Dense / DenseGeneral: weight (out, in) -> kernel (in, out), reshaped to
    (D, H, Dh) for W^Q/W^K/W^V (``to_heads``) or (H, Dh, D) for W^O (``heads`` given)."""

    def kernel(w: np.ndarray) -> np.ndarray:
        k = w.T
        if to_heads:
            return k.reshape(k.shape[0], *heads)
        if heads is not None:
            return k.reshape(*heads, k.shape[1])
        return k

    def bias(b: np.ndarray) -> np.ndarray:
        return b.reshape(heads) if to_heads else b

    return {our + ("kernel",): (f"{their}.weight", kernel), our + ("bias",): (f"{their}.bias", bias)}


def _norm(our: tuple[str, ...], their: str) -> Mapping:
    same = lambda a: a  # noqa: E731
    return {our + ("scale",): (f"{their}.weight", same), our + ("bias",): (f"{their}.bias", same)}


def weight_map(case: Case, config: Any) -> Mapping:
    """Our parameter path -> (their state_dict name, how to turn their array into ours)."""
    m = config.model
    heads = (m.num_heads, m.qkv_dim // m.num_heads)
    same = lambda a: a  # noqa: E731
    enc = ("encoder",)
    out: Mapping = {
        enc + ("embed", "embedding"): ("embed_layer.embedding.weight", same),
        enc + ("pos_embedding",): ("embed_layer.pos_embeds", lambda a: a[0]),
        enc + ("memory",): ("mem", lambda a: a[0]),
    }
    if m.pooling == "cls":
        out[enc + ("cls",)] = ("embed_layer.cls", lambda a: a.reshape(-1))
    for i in range(m.num_layers):
        ours, theirs = enc + (f"block_{i}",), f"encoder.blocks.{i}"
        out.update(_norm(ours + ("attention_norm",), f"{theirs}.norm_input"))
        out.update(_norm(ours + ("mlp_norm",), f"{theirs}.norm_inter"))
        out.update(_norm(ours + ("memory_norm",), f"{theirs}.norm_mem"))
        out.update(_linear(ours + ("mlp", "Dense_0"), f"{theirs}.ffn.0"))
        out.update(_linear(ours + ("mlp", "Dense_1"), f"{theirs}.ffn.3"))
        attn = ours + ("attention",)
        projections = ("q", "k", "v") if case.family == "luna" else ("q", "k")  # ConvLuna: W^V = I
        for letter, name in zip(projections, ("query", "key", "value"), strict=False):
            out.update(_linear(attn + (name,), f"{theirs}.attention.{letter}", heads, to_heads=True))
        out.update(_linear(attn + ("out",), f"{theirs}.attention.lin", heads))
        if case.family == "convluna":
            out[attn + ("log_temperature",)] = (f"{theirs}.attention.log_temp", lambda a: a.reshape(()))
            if attention_options(config).filter == "conv":  # Conv2d(H, H, (K, 1), groups=H): (H, 1, K, 1)
                out[attn + ("filter_kernel",)] = (f"{theirs}.attention.kernel.weight", lambda a: a[:, 0, :, 0].T)
    if config.task == "matching":  # DualClassifier: two GELU layers, no norm
        out.update(_linear(("head_hidden",), "classifier.ffn.0"))
        out.update(_linear(("head_hidden2",), "classifier.ffn.2"))
    else:  # TClassifier: LayerNorm, pool, one GELU layer
        out.update(_norm(enc + ("pool_norm",), "classifier.norm"))
        out.update(_linear(("head_hidden",), "classifier.ffn.0"))
    out.update(_linear(("logits",), "classifier.output"))
    return out
