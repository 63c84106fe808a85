"""The ConvLuna paper's specifics: Yorsh, Holeňa, Bojar, Herel, *On Difficulties of Attention
Factorization through Shared Memory* (arXiv:2404.00798).

Collected here so the generic layers stay generic: the attention registry registers ConvLuna with
these flags and model settings, and the results tables take these sizes and this row order. Plain
data, no imports of lra: any layer may read it (tests/test_layering.py).
"""

from __future__ import annotations

from typing import Any

# Figure 2 / Appendix A: the memory sizes of Table 1, over which the Friedman test runs.
MEMORY_SIZES = (1, 16, 256)

# Table 1's and Table 3's row order (then any other family, by name).
FAMILY_ORDER = ("Transformer", "Luna", "ConvLuna", "OnlyScaling", "OnlyFiltering")

# Ablation presets of Appendix E for the ConvLuna configs (``configs/*_convluna.py:only_scaling``):
# one of ConvLuna's two packing changes at a time, everything else (sharing) unchanged.
CONVLUNA_FLAGS: dict[str, dict[str, Any]] = {
    "only_scaling": {
        "attention_kwargs": {"filter": "none", "learn_temperature": True},
        "label": "OnlyScaling-{memory_size}",
    },
    "only_filtering": {
        "attention_kwargs": {"learn_temperature": False},
        "label": "OnlyFiltering-{memory_size}",
    },
    # Appendix E's initial value without the learning: tau fixed at 0 (not in the paper's tables).
    "fixed_temperature": {
        "attention_kwargs": {"freeze_temperature": True},
        "label": "FixedTemperature-{memory_size}",
    },
    # Appendix D's other filter: Table 2's MaxPool K=4 of the other tasks (for ListOps' Conv K=32 rows).
    "maxpool": {
        "attention_kwargs": {"filter": "maxpool", "kernel_size": 4},
        "label": "MaxPool-{memory_size}",
    },
    # Appendix D's stride (Table 2: 1 everywhere), "the main hyperparameter to trade the throughput
    # for performance"; with ``reference`` the windows are the published code's ('valid').
    **{
        f"stride{s}": {"attention_kwargs": {"stride": s}, "label": f"ConvLuna-{{memory_size}} stride {s}"}
        for s in (2, 4)
    },
}

# Table 2's ConvLuna filter: MaxPool K=4 on every task but ListOps, Conv K=32 there; stride 1.
CONVLUNA_KWARGS: dict[str, Any] = dict(filter="maxpool", kernel_size=4, stride=1)
CONVLUNA_TASK_KWARGS: dict[str, dict[str, Any]] = {"listops": dict(filter="conv", kernel_size=32, stride=1)}

# config.model settings of the memory families (Luna, ConvLuna): post-LN blocks (Appendix B),
# memory-average pooling (Table 2), no dropout between the attention and the residuals (Appendix B's
# equations; the published code has none either), for matching the paper's "concatenated hidden
# representations" [u, v] (the published code's DualClassifier), and the exact GELU (Table 2's; so
# is the published code's nn.GELU()).
MEMORY_FAMILY_MODEL: dict[str, Any] = dict(
    norm="post",
    pooling="memory",
    attention_residual_dropout=False,
    dual_combine="concat",
    gelu_approximate=False,
)


# Table 2 (paper scale), the task defaults of every family (lra.defaults.task_config). Heads 4,
# hidden 128, QKV 128, MLP 512, GELU, learnable absolute positions.
TABLE2_TASKS: dict[str, dict[str, Any]] = {
    "listops": dict(
        max_len=2000,
        batch_size=32,
        num_train_steps=50_000,
        learning_rate=0.005,
        weight_decay=0.01,
        warmup_steps=1000,
        num_layers=6,
        dropout_rate=0.1,
    ),
    "text": dict(
        max_len=4000,
        batch_size=32,
        num_train_steps=25_000,
        learning_rate=0.005,
        weight_decay=0.01,
        warmup_steps=8000,
        num_layers=4,
        dropout_rate=0.1,
    ),
    "matching": dict(
        max_len=4000,
        batch_size=32,
        num_train_steps=30_000,
        learning_rate=0.015,
        weight_decay=0.04,
        warmup_steps=8000,
        num_layers=4,
        dropout_rate=0.1,
    ),
    "image": dict(
        max_len=1024,
        batch_size=64,
        num_train_steps=30_000,
        learning_rate=0.01,
        weight_decay=0.01,
        warmup_steps=700,
        num_layers=8,
        dropout_rate=0.0,
    ),
}
