"""Task defaults (Table 2 of the ConvLuna paper, arXiv:2404.00798), presets and the config-option parser.

Every ``configs/<task>_<attention>.py`` calls :func:`make_config`. Its option string (``--config path.py:a,b``): a
preset (``paper`` default, ``cpu``, ``laptop``, ``smoke``), family options ``key=value`` (``mem=16``), the config's
flags (``only_scaling``), ``reference`` (lra/reference_config.py), ``bf16`` (docs/accelerators.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_collections

from lra.config_fields import OPTION_ALIASES as OPTION_ALIASES
from lra.config_fields import apply_override as apply_override
from lra.config_fields import existing_field as existing_field
from lra.config_fields import option_type_problem as option_type_problem
from lra.config_fields import parse_option
from lra.config_fields import parse_value as parse_value
from lra.errors import InputError
from lra.papers.convluna import TABLE2_TASKS

TASKS = ("listops", "text", "matching", "image", "pathfinder", "pathx")
PATHFINDER_TASKS = ("pathfinder", "pathx")  # LRA's Pathfinder (32 x 32) and Path-X (128 x 128)
PRESETS = ("paper", "cpu", "laptop", "smoke")
BF16_OPTION = "bf16"  # bfloat16 compute, float32 parameters, optimizer and statistics (make_config)
LAPTOP_STEPS = 4000  # laptop: cpu at lra_lab.reproduce.convluna_confirm.SETTINGS' budget (a test keeps them equal)
LAPTOP_LISTOPS_TRAIN = 96_000

_TABLE2: dict[str, dict[str, Any]] = {  # Table 2, and LRA's Pathfinder / Path-X settings
    **TABLE2_TASKS,
    "pathfinder": dict(  # LRA's (docs/data.md, "Configs"); our 1/sqrt(step) decay peaks at 0.001 after warmup
        max_len=1024,
        batch_size=512,
        num_train_steps=62_400,
        learning_rate=0.001 * 312**0.5,
        weight_decay=0.0,
        warmup_steps=312,
        num_layers=1,
        dropout_rate=0.2,
    ),
    "pathx": dict(
        max_len=16_384,
        batch_size=64,
        num_train_steps=500_000,
        learning_rate=0.001 * 2500**0.5,
        weight_decay=0.0,
        warmup_steps=2500,
        num_layers=1,
        dropout_rate=0.1,
    ),
}


def task_config(task: str) -> ml_collections.ConfigDict:
    """Paper-scale defaults for ``task`` with the softmax baseline."""
    if task not in _TABLE2:
        raise InputError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
    t = _TABLE2[task]
    c = ml_collections.ConfigDict()
    c.task = task
    c.preset = "paper"
    c.variant = "Transformer"
    c.seed = 0
    c.seeds = ()  # --config.seeds=0,1,2,3,4: train these seeds in one program (lra.training.runs); () = (seed,)
    c.data_dir = ""  # empty: $LRA_DATA_DIR, else ~/.cache/lra

    c.data = ml_collections.ConfigDict()
    c.data.max_len = t["max_len"]
    c.data.buckets = ()  # a batch is padded to the smallest bucket holding its longest example; (): max_len
    c.data.bucket_order_seed = -1  # -1: the run's seed (a vmapped program's seeds share the first's order)
    c.data.source = "auto"  # listops: "auto" (release files if present, else generate) | "release" | "generated"
    c.data.min_len = 500  # listops generator: keep 500 < length < max_len (LRA)
    c.data.num_train = 96_000
    c.data.num_val = 2_000
    c.data.num_test = 2_000
    c.data.generator_seed = 0
    c.data.format = "auto"  # "auto" | "original" (aclImdb/, cifar-10-batches-py/) | "tfds"
    c.data.tfds_dir = ""  # empty: <data_dir>/tensorflow_datasets
    c.data.cache_dir = ""  # tokenised arrays; empty: <data_dir>/cache
    c.data.val_fraction = 0.1  # text/image: validation held out from train
    c.data.val_seed = 0  # the same validation set for every training seed
    c.data.val_stratify = True
    c.data.lra_val_is_test = False  # text: LRA's convention (validate on test); off: never select on test
    c.data.grayscale = "lra"  # image: "lra" (tf.image.rgb_to_grayscale) | "pil" (ITU-R 601-2, PIL rounding)
    c.data.image_downsample = 1  # image: average-pool factor (smoke/cpu presets only)
    c.data.aan_unescape = False  # matching: decode the b'...' literals of the AAN TSVs first

    c.model = ml_collections.ConfigDict()
    c.model.attention = "softmax"
    c.model.attention_kwargs = ml_collections.ConfigDict()
    c.model.num_layers = t["num_layers"]
    c.model.num_heads = 4
    c.model.emb_dim = 128
    c.model.qkv_dim = 128
    c.model.mlp_dim = 512
    c.model.dropout_rate = t["dropout_rate"]
    c.model.attention_dropout_rate = t["dropout_rate"]
    c.model.max_len = t["max_len"]  # size of the position table
    c.model.norm = "pre"  # "pre" | "post" LayerNorm blocks
    c.model.pooling = "cls"  # "cls" | "mean" | "memory"
    c.model.dual_combine = "concat_mul_sub"  # matching: [u, v, u*v, u-v] (LRA's) | "concat": [u, v]
    c.model.dtype = "float32"  # "bfloat16" on GPU/TPU
    c.model.memory_init_scale = 1.0  # memory families: initial memory ~ N(0, scale^2)
    c.model.head_activation = "gelu"  # Table 2
    c.model.gelu_approximate = True  # tanh form (LRA's Flax code); False: exact erf (Table 2, memory families)
    c.model.head_hidden_layers = 1  # single-input head: Dense(mlp_dim) layers before the logits
    c.model.pre_pool_norm = False  # LayerNorm right before pooling (the published code's classifier)
    c.model.attention_residual_dropout = True  # dropout on the attention output before the residual
    c.model.embedding_dropout = True  # dropout on token + position embeddings (LRA's encoders)
    c.model.mask_padding = True  # False: no padding masks anywhere (the published code's default)
    c.model.embedding = "table"  # "table" (token embeddings) | "linear" (image: x * w + b of normalised pixels)
    c.model.pixel_mean = 0.48  # embedding="linear": pixels / 255 are normalised as (p - mean) / std
    c.model.pixel_std = 0.24
    # The published ConvLuna code's embedding details, on under ``reference`` (docs/reference.md).
    c.model.zero_padding_embedding = False
    c.model.cls_position = True
    c.model.param_init = "xavier"  # "xavier" (this suite) | "pytorch"
    c.model.remat = False  # jax.checkpoint per block: one block's activations stored, ~one more forward pass

    c.batch_size = t["batch_size"]
    c.eval_batch_size = t["batch_size"]
    c.num_train_steps = t["num_train_steps"]
    c.learning_rate = t["learning_rate"]
    c.weight_decay = t["weight_decay"]
    c.warmup_steps = t["warmup_steps"]
    c.grad_clip_norm = 0.0  # 0: off (Table 2 clips nothing)
    c.microbatches = 1  # gradient accumulation (a divisor of batch_size): the same step in less memory
    c.eval_every = 1000
    c.checkpoint_every = 1000
    c.log_every = 100
    c.max_eval_batches = 0  # 0: the whole split
    c.log_memory_stats = False  # memory families: memory statistics per evaluation (metrics.jsonl "memory")
    if task in PATHFINDER_TASKS:
        _pathfinder_task(c)
    return c


def _pathfinder_task(c: ml_collections.ConfigDict) -> None:
    """LRA's Pathfinder / Path-X settings beyond Table 2's columns (docs/data.md, "Configs")."""
    pathx = c.task == "pathx"
    c.data.pathfinder_resolution = 128 if pathx else 32  # lra/data/pathfinder.py
    c.data.pathfinder_setting = "curv_contour_length_14"  # LRA's "hard" split, the one it reports
    c.data.pathfinder_images = 200_000  # generated when the release is absent (data.source "auto")
    c.model.update(
        num_heads=2 if pathx else 4,
        emb_dim=32 if pathx else 128,
        qkv_dim=16 if pathx else 64,
        mlp_dim=32 if pathx else 128,
        attention_dropout_rate=0.1,
        pooling="mean",
    )
    c.eval_every = c.checkpoint_every = 2500 if pathx else 312  # 160,000 // batch_size: one epoch
    c.grad_clip_norm = 1.0 if pathx else 0.0


LEGACY_FIELDS: dict[str, Any] = {  # what runs did before a field existed: old runs rebuild the model they trained
    "model.memory_init_scale": None,  # None: emb_dim ** -0.5, filled in by upgrade_run_config
    "model.head_activation": "relu",
    "model.head_hidden_layers": 1,
    "model.pre_pool_norm": False,
    "model.attention_residual_dropout": True,
    "model.embedding_dropout": True,
    "model.mask_padding": True,
    "model.embedding": "table",
    "model.pixel_mean": 0.48,
    "model.pixel_std": 0.24,
    "log_memory_stats": False,
    "seeds": (),
    "data.bucket_order_seed": -1,
    "model.gelu_approximate": True,
    "model.zero_padding_embedding": False,
    "model.cls_position": True,
    "model.param_init": "xavier",
    "microbatches": 1,
    "model.remat": False,
}


def load_config_file(path: str | Path) -> Any:
    """The module of a config file; its ``get_config(options)`` builds the config."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_lra_config_{path.stem}", path)
    if spec is None or spec.loader is None:  # not a suffix Python loads (a config is a .py module)
        raise InputError(f"config file {path}: not a Python module (configs/<task>_<attention>.py)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade_run_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A run's recorded config with the fields added since it ran set to :data:`LEGACY_FIELDS`."""
    c = ml_collections.ConfigDict(config.to_dict())
    for dotted, value in LEGACY_FIELDS.items():
        *parents, name = dotted.split(".")
        node = c
        for parent in parents:
            node = node[parent]
        if name not in node:
            node[name] = c.model.emb_dim**-0.5 if dotted == "model.memory_init_scale" else value
    return c


def _apply_preset(c: ml_collections.ConfigDict, preset: str) -> None:
    c.preset = preset
    if preset == "paper":
        return
    if preset == "smoke":  # seconds: a tiny model on tiny data, for tests
        c.model.update(num_layers=1, num_heads=2, emb_dim=32, qkv_dim=32, mlp_dim=64)
        c.update(
            batch_size=8,
            eval_batch_size=8,
            num_train_steps=6,
            warmup_steps=2,
            eval_every=3,
            checkpoint_every=3,
            log_every=1,
        )
        c.data.update(max_len=64, min_len=8, num_train=160, num_val=32, num_test=32, buckets=(), source="generated")
        c.model.max_len = 64
        if c.task == "image":
            c.data.image_downsample = 4  # 8 x 8 pixels
        if c.task in PATHFINDER_TASKS:  # 16 x 16 generated images, the shortest contours
            c.data.update(
                max_len=256, pathfinder_resolution=16, pathfinder_setting="curv_baseline", pathfinder_images=64
            )
            c.model.max_len = 256
        return
    if preset == "cpu":  # minutes on a 2-core CPU: shorter sequences, bucketed, a small model
        c.model.update(num_layers=2, num_heads=4, emb_dim=64, qkv_dim=64, mlp_dim=128)
        c.update(
            batch_size=32,
            eval_batch_size=64,
            num_train_steps=1500,
            warmup_steps=1000,
            learning_rate=0.05,
            eval_every=250,
            checkpoint_every=250,
            log_every=50,
        )
        if c.task == "listops":
            c.data.update(
                max_len=256,
                min_len=32,
                num_train=20_000,
                num_val=1_000,
                num_test=1_000,
                buckets=(64, 128, 256),
                source="generated",
            )
            c.model.max_len = 256
        elif c.task in ("text", "matching"):
            c.data.update(max_len=512, buckets=(128, 256, 512))
            c.model.max_len = 512
        elif c.task == "image":
            c.data.update(max_len=256, image_downsample=2)  # 16 x 16 pixels
            c.model.max_len = 256
        elif c.task in PATHFINDER_TASKS:  # 16 x 16 generated images (both tasks), the shortest contours
            c.data.update(
                max_len=256, pathfinder_resolution=16, pathfinder_setting="curv_baseline", pathfinder_images=20_000
            )
            c.model.update(max_len=256, num_layers=1)  # one layer, as LRA's Pathfinder models: 15 minutes
        return
    if preset == "laptop":  # ~10-20 minutes on 2 cores: the cpu preset where ListOps is learned
        _apply_preset(c, "cpu")
        c.preset = "laptop"
        c.num_train_steps = LAPTOP_STEPS  # warmup 1,000, validation and checkpoints every 250: cpu's
        if c.task == "listops":  # LRA's 96k training split size: each example seen ~1.3 times
            c.data.num_train = LAPTOP_LISTOPS_TRAIN
        return
    raise InputError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")


def make_config(
    task: str,
    attention: str,
    arg: str | None = None,
    *,
    label: str = "Transformer",
    attention_kwargs: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    flags: Mapping[str, Mapping[str, Any]] | None = None,
) -> ml_collections.ConfigDict:
    """The config for ``task`` x ``attention`` with option string ``arg``; ``label``'s ``{field}`` is filled from the
    options, ``flags`` maps a flag to ``{"attention_kwargs": {...}, "label": ...}``."""
    c = task_config(task)
    c.model.attention = attention
    c.model.update(dict(model or {}))
    kwargs: dict[str, Any] = dict(attention_kwargs or {})
    flags = dict(flags or {})
    presets, options, chosen_flags, reference, bf16 = [], {}, [], False, False
    for token in filter(None, (t.strip() for t in (arg or "").split(","))):
        if "=" in token:
            field, value = parse_option(attention, token)
            options[field] = value
        elif token in PRESETS:
            presets.append(token)
        elif token == "reference":
            reference = True
        elif token == BF16_OPTION:
            bf16 = True
        elif token in flags:
            chosen_flags.append(token)
        else:
            raise InputError(
                f"unknown config option {token!r}; valid: presets {', '.join(PRESETS)}"
                + (f"; flags {', '.join(sorted(flags))}" if flags else "")
                + f"; reference; {BF16_OPTION}; or key=value family options"
            )
    if len(presets) > 1:
        raise InputError(f"choose one preset, got {presets}")
    _apply_preset(c, presets[0] if presets else "paper")
    if bf16:
        c.model.dtype = "bfloat16"

    for name in chosen_flags:
        kwargs.update(flags[name].get("attention_kwargs", {}))
        label = flags[name].get("label", label)
    if reference:
        from lra.reference_config import apply_reference

        kwargs = apply_reference(c, kwargs)
        label += " (reference)"
    kwargs.update(options)  # options named after the colon win over flags and reference
    c.model.attention_kwargs = ml_collections.ConfigDict(kwargs)
    from lra import attention as registry  # local: keeps config loading light until needed

    c.variant = registry.format_label(label, {**registry.option_defaults(attention), **kwargs})
    if c.preset in ("cpu", "laptop") and _uses_memory(attention):
        c.log_memory_stats = True
    return c


def _uses_memory(attention: str) -> bool:
    from lra import attention as registry  # local: keeps config loading light until needed

    return registry.get(attention).uses_memory
