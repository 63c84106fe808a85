"""``:reference``: what the option changes in a config, the published ConvLuna code's choices.

The ConvLuna paper (Yorsh, Holeňa, Bojar, Herel: *On Difficulties of Attention Factorization through Shared Memory*,
ICLR 2024 Tiny Papers, arXiv:2404.00798) reports runs of its authors' code (vladyorsh/lra_efficient_transformers).
``:reference`` switches to that code's behaviour where it differs, its two bugs included; each switch is a field in
:data:`DIVERGENCES`, which docs/reference.md mirrors (a test keeps them in step) and explains."""

from __future__ import annotations

from typing import Any, NamedTuple

import ml_collections

from lra.errors import InputError

REFERENCE_FAMILIES = ("luna", "convluna")  # not softmax: the code's TBlock.forward calls an undefined layernorm_input


class Divergence(NamedTuple):
    """One place where the paper's text, the published code and our default may differ."""

    detail: str
    paper: str
    code: str
    default: str
    field: str  # the config field that switches it


DIVERGENCES: tuple[Divergence, ...] = (
    Divergence("Initial memory", "silent", "N(0, 1)", "N(0, 1) (was N(0, 1/D))", "model.memory_init_scale"),
    Divergence(
        "Matching head input (Luna, ConvLuna)",
        "concatenated representations",
        "[u, v]",
        "[u, v] (Transformer rows: LRA's [u, v, u*v, u-v])",
        "model.dual_combine",
    ),
    Divergence("Classifier head activation", "GELU (Table 2)", "GELU", "GELU (was ReLU)", "model.head_activation"),
    Divergence(
        "ConvLuna unpacking logits",
        "x d^-1/2",
        "unscaled (temperature passed as `affine`)",
        "x d^-1/2",
        "attention_kwargs.scale_unpacking",
    ),
    Divergence(
        "Padding masks",
        "silent",
        "none (`--mask_inputs False`; ConvLuna forces `mask=None`): a bug",
        "masked everywhere",
        "model.mask_padding",
    ),
    Divergence(
        "Max-pool / strided filter windows",
        "silent",
        "'valid' (no padding)",
        "'same', padding-safe",
        "attention_kwargs.filter_padding",
    ),
    Divergence("LayerNorm before pooling", "silent", "yes (single-input heads)", "no", "model.pre_pool_norm"),
    Divergence(
        "Dropout on attention output before the residual",
        "none in the equations",
        "none",
        "none for Luna/ConvLuna; yes for the other families (LRA's Transformer)",
        "model.attention_residual_dropout",
    ),
    Divergence("Dropout on the input embedding", "silent", "none", "yes (LRA's encoders)", "model.embedding_dropout"),
    Divergence("CIFAR head", "silent", "two GELU layers (mlp_dim, mlp_dim)", "one", "model.head_hidden_layers"),
    Divergence(
        "CIFAR input embedding",
        "silent",
        "x * w + b of (pixel/255 - 0.48)/0.24",
        "token table of 256 levels",
        "model.embedding",
    ),
    Divergence(
        "Luna: projections shared by packing and unpacking",
        "silent",
        "all (one attention module)",
        "none",
        "attention_kwargs.share_projections",
    ),
    Divergence(
        "ConvLuna: projections shared by packing and unpacking",
        '"share projection matrices"',
        "W^Q, W^K, W^O (`SimplifiedConvLunaBlock`; W^V = I)",
        "W^Q, W^K, W^O (W^V = I): the same",
        "attention_kwargs.share_projections",
    ),
    Divergence(
        "GELU (FFN and head)",
        "GELU (Table 2)",
        "exact erf form (`nn.GELU()`)",
        "exact for Luna/ConvLuna; tanh approximation for the other rows (LRA's Flax code)",
        "model.gelu_approximate",
    ),
    Divergence(
        "Padding token's embedding",
        "silent",
        "a fixed zero (`padding_idx=0`)",
        "a learned row (unused where padding is masked)",
        "model.zero_padding_embedding",
    ),
    Divergence(
        "Sequence padding",
        "silent",
        "every batch padded to the full length",
        "full length (paper preset); length buckets in the cpu preset",
        "data.buckets",
    ),
    Divergence(
        "Luna [CLS] position",
        "silent",
        "none (positions added before [CLS] is prepended)",
        "position 0 of the table",
        "model.cls_position",
    ),
    Divergence(
        "Initialisation",
        "silent",
        "PyTorch's defaults: Linear U(+-1/sqrt(fan_in)) weights and biases, positions 0, [CLS] xavier",
        "xavier-uniform weights, zero biases, positions and [CLS] N(0, 0.02)",
        "model.param_init",
    ),
    Divergence(
        "Luna pooling", "memory average (Table 2)", "[CLS] (`--use_cls True`)", "memory average", "model.pooling"
    ),
    Divergence(
        "Text validation split", "silent", "the test split (LRA's pipeline)", "10% of train", "data.lra_val_is_test"
    ),
    Divergence("ListOps weight decay", "0.01", "0.002", "0.01", "weight_decay"),
    Divergence("Matching blocks", "4", "6", "4 (6 under `reference` at paper scale only)", "model.num_layers"),
)


def divergence_table() -> str:
    """:data:`DIVERGENCES` as docs/reference.md's markdown table (a test keeps that copy equal)."""
    rows = ["| detail | paper (text) | published code | `lra` default | field (`config.` …) |", "|---|---|---|---|---|"]
    rows += [f"| {d.detail} | {d.paper} | {d.code} | {d.default} | `{d.field}` |" for d in DIVERGENCES]
    return "\n".join(rows)


def apply_reference(c: ml_collections.ConfigDict, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Switch ``c`` (after its preset, whose sizes stay) to the published code's choices; the attention kwargs."""
    attention = c.model.attention
    if attention not in REFERENCE_FAMILIES:
        raise InputError(
            f"option 'reference' reproduces the published ConvLuna code, which has only "
            f"{', '.join(REFERENCE_FAMILIES)} (attention {attention!r} has no published reference there)"
        )
    kwargs = dict(kwargs)
    m = c.model
    m.mask_padding = False
    m.attention_residual_dropout = False
    m.embedding_dropout = False
    m.head_activation = "gelu"
    m.gelu_approximate = False  # nn.GELU(): the exact erf form
    m.zero_padding_embedding = True  # nn.Embedding(padding_idx=0)
    m.cls_position = False  # TEmbedding adds positions, then prepends [CLS]
    m.param_init = "pytorch"  # its effect: results/reference/init_listops_cpu (lra_lab.reference.init_effect)
    c.data.buckets = ()  # the code pads every batch to full length; unmasked, the padding is input
    m.pre_pool_norm = c.task != "matching"  # the code's DualClassifier has no norm
    if c.task == "image":
        m.head_hidden_layers = 2
        m.embedding = "linear"
    if c.task == "text":
        c.data.lra_val_is_test = True
    if c.task == "listops":
        c.weight_decay = 0.002
    if c.task == "matching" and c.preset == "paper":
        m.num_layers = 6
    if attention == "luna":
        m.pooling = "cls"
        kwargs["share_projections"] = True
    if attention == "convluna":
        kwargs["share_projections"] = "qko"  # SimplifiedConvLunaBlock: unpacking shares q, k, lin; no W^V
        kwargs["scale_unpacking"] = False
        # The code pads convolutions 'same' at stride 1; pooling and strided filters are 'valid'.
        if kwargs.get("filter", "maxpool") == "maxpool" or kwargs.get("stride", 1) > 1:
            kwargs["filter_padding"] = "valid"
    return kwargs
