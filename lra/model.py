"""The common encoder and the classifier heads every attention family plugs into.

Embedding + learned absolute positions, ``num_layers`` pre- or post-LN blocks, pooling (``cls``, ``mean`` over real
tokens, ``memory``) and a classifier head; matching runs one encoder on both documents (docs/design.md, "The encoder").
The switches that reproduce the published ConvLuna code (``mask_padding``, ``gelu_approximate``, ``cls_position``, ...)
are ``config.model`` fields, each with the paper's and the code's behaviour in lra/reference_config.py. Memory families
(``Attention.uses_memory``): the encoder owns the learned initial memory (``memory_size`` x D, N(0,
``memory_init_scale``^2)) and threads it through the blocks, applying the residuals itself. Post-LN (the Luna paper's
block): X' = LN(X + y), P' = LN(P + packed), X'' = LN(FFN(X') + X'): the memory skips the FFN. Pre-LN: the attention
sees LN(x), LN(mem), both residuals are plain sums, and a final norm follows (a post-LN block already ends in one).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra import attention as attention_registry
from lra.attention.base import memory_cells
from lra.data.types import PAD_ID
from lra.errors import InputError

POOLINGS = ("cls", "mean", "memory")
NORMS = ("pre", "post")
DUAL_COMBINES = ("concat_mul_sub", "concat")
HEAD_ACTIVATIONS = ("gelu", "relu")
EMBEDDINGS = ("table", "linear")
PARAM_INITS = ("xavier", "pytorch")


def activation(name: str, gelu_approximate: bool) -> Callable[[jax.Array], jax.Array]:
    """``gelu`` (tanh approximation or exact erf form, ``model.gelu_approximate``) or ``relu``."""
    if name == "gelu":
        return functools.partial(nn.gelu, approximate=gelu_approximate)
    return {"relu": nn.relu}[name]


def _dtype(name: str) -> Any:
    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]


class MlpBlock(nn.Module):
    """Dense(mlp_dim) -> GELU -> dropout -> Dense(D) -> dropout."""

    mlp_dim: int
    dropout_rate: float
    dtype: Any = jnp.float32
    gelu_approximate: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        d = x.shape[-1]
        h = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform())(x)
        h = nn.gelu(h, approximate=self.gelu_approximate)
        h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
        h = nn.Dense(d, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform())(h)
        return nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)


class EncoderBlock(nn.Module):
    """Attention + residual + MLP + residual, with pre- or post-LayerNorm."""

    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(
        self, x: jax.Array, mask: jax.Array, memory: jax.Array | None, deterministic: bool
    ) -> tuple[jax.Array, jax.Array | None]:
        cfg = self.config
        dtype = _dtype(cfg.dtype)
        attn = attention_registry.get(cfg.attention)(
            num_heads=cfg.num_heads,
            qkv_dim=cfg.qkv_dim,
            dropout_rate=cfg.attention_dropout_rate,
            dtype=dtype,
            name="attention",
            **dict(cfg.attention_kwargs),
        )
        drop = nn.Dropout(cfg.dropout_rate)
        pre = cfg.norm == "pre"
        # LayerNorm statistics in float32 for stability; outputs in the compute dtype.
        ln = lambda name: nn.LayerNorm(dtype=dtype, param_dtype=jnp.float32, name=name)  # noqa: E731

        x_in = ln("attention_norm")(x) if pre else x
        mem_in = memory
        if memory is not None and pre:
            mem_in = ln("memory_norm")(memory)
        y, packed = attn(x_in, mask, memory=mem_in, deterministic=deterministic)
        # Attention-output dropout: LRA's Transformer has it; Luna's equations and ConvLuna's code do not.
        sub_drop = drop if cfg.attention_residual_dropout else (lambda a, deterministic: a)
        x = x + sub_drop(y, deterministic=deterministic)
        if memory is not None:
            memory = memory + sub_drop(packed, deterministic=deterministic)
            if not pre:
                memory = ln("memory_norm")(memory)
            self.sow("intermediates", "memory", memory)  # this block's output memory, for lra_lab.diagnose
        if not pre:
            x = ln("attention_norm")(x)

        mlp = MlpBlock(cfg.mlp_dim, cfg.dropout_rate, dtype=dtype, gelu_approximate=cfg.gelu_approximate, name="mlp")
        if pre:
            x = x + mlp(ln("mlp_norm")(x), deterministic)
        else:
            x = ln("mlp_norm")(x + mlp(x, deterministic))
        return x, memory


class PixelEmbed(nn.Module):
    """Pixel tokens (value v as token v + 1) -> ((v / 255 - mean) / std) * w + b, a D-vector per pixel: the published
    ConvLuna code's CIFAR embedding (``IEmbedding``: w ~ N(0, 1), b ~ N(0, 0.1^2))."""

    features: int
    mean: float
    std: float

    @nn.compact
    def __call__(self, tokens_BxN: jax.Array) -> jax.Array:
        pixels_BxN = ((tokens_BxN.astype(jnp.float32) - 1.0) / 255.0 - self.mean) / self.std
        w = self.param("weight", nn.initializers.normal(stddev=1.0), (self.features,))
        b = self.param("bias", nn.initializers.normal(stddev=0.1), (self.features,))
        return pixels_BxN[..., None] * w + b


class Encoder(nn.Module):
    """Tokens B x N (0 = padding) -> pooled representation B x D."""

    config: ml_collections.ConfigDict
    vocab_size: int

    @nn.compact
    def __call__(self, tokens_BxN: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        dtype = _dtype(cfg.dtype)
        batch, n = tokens_BxN.shape
        # mask_padding=False (the published code's): padding is attended to and pooled; for reproduction only.
        mask = tokens_BxN != PAD_ID if cfg.mask_padding else jnp.ones(tokens_BxN.shape, bool)
        if cfg.embedding == "linear":
            x = PixelEmbed(cfg.emb_dim, cfg.pixel_mean, cfg.pixel_std, name="embed")(tokens_BxN)
        else:
            x = nn.Embed(self.vocab_size, cfg.emb_dim, embedding_init=nn.initializers.normal(stddev=1.0), name="embed")(
                tokens_BxN
            )
            if cfg.zero_padding_embedding:  # PyTorch's padding_idx=0: padding embeds to a fixed zero
                x = jnp.where((tokens_BxN != PAD_ID)[..., None], x, 0.0)
        if n > cfg.max_len:
            raise InputError(
                f"sequence length {n} exceeds the position table (config.model.max_len="
                f"{cfg.max_len}): raise config.model.max_len or shorten config.data.max_len"
            )
        # Keep this creation order (cls, then positions): flax derives each parameter's key from it.
        cls = self.param("cls", nn.initializers.normal(stddev=0.02), (cfg.emb_dim,)) if cfg.pooling == "cls" else None
        cls_slot = cls is not None and cfg.cls_position  # [CLS] takes position 0 of the table
        pos = self.param("pos_embedding", nn.initializers.normal(stddev=0.02), (cfg.max_len + cls_slot, cfg.emb_dim))
        if cls is not None and not cfg.cls_position:  # the published code: positions first, then [CLS] without one
            x = x + pos[None, :n]
        if cls is not None:
            x = jnp.concatenate([jnp.broadcast_to(cls, (batch, 1, cfg.emb_dim)).astype(x.dtype), x], axis=1)
            mask = jnp.concatenate([jnp.ones((batch, 1), bool), mask], axis=1)
        if cls is None or cfg.cls_position:
            x = x + pos[None, : x.shape[1]]
        x = x.astype(dtype)
        if cfg.embedding_dropout:  # LRA's encoders; the published ConvLuna code has none
            x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)

        memory = None
        attn_cls = attention_registry.get(cfg.attention)
        if attn_cls.uses_memory:
            cells = memory_cells(attn_cls, dict(cfg.attention_kwargs))  # the MemoryAttention contract
            # memory_init_scale 1.0 is the published code's (the paper is silent); D^-1/2 made the memories near-equal.
            mem0 = self.param("memory", nn.initializers.normal(stddev=cfg.memory_init_scale), (cells, cfg.emb_dim))
            memory = jnp.broadcast_to(mem0, (batch, cells, cfg.emb_dim)).astype(dtype)

        # remat: activations recomputed in the backward pass; ``deterministic`` is static (argument 4, counting self).
        block = nn.remat(EncoderBlock, static_argnums=(4,)) if cfg.get("remat", False) else EncoderBlock
        for i in range(cfg.num_layers):
            x, memory = block(cfg, name=f"block_{i}")(x, mask, memory, deterministic)
        if cfg.norm == "pre":
            x = nn.LayerNorm(dtype=dtype, param_dtype=jnp.float32, name="final_norm")(x)
            if memory is not None:
                memory = nn.LayerNorm(dtype=dtype, param_dtype=jnp.float32, name="final_memory_norm")(memory)

        if cfg.pre_pool_norm:  # the published code's classifier: LayerNorm, then pool
            pool_norm = nn.LayerNorm(dtype=dtype, param_dtype=jnp.float32, name="pool_norm")
            x = pool_norm(x)
            if memory is not None:
                memory = pool_norm(memory)
        if cfg.pooling == "cls":
            return x[:, 0]
        if cfg.pooling == "mean":
            m = mask[..., None].astype(x.dtype)
            return jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
        assert memory is not None  # pooling="memory" is refused for a family without memory (validation)
        return jnp.mean(memory, axis=1)


class Classifier(nn.Module):
    """Encoder + head on B x N inputs, or B x 2 x N (matching, combined by ``dual_combine``). Head:
    ``head_hidden_layers`` Dense(mlp_dim) (matching: mlp_dim, mlp_dim/2), each with ``head_activation``, then logits."""

    config: ml_collections.ConfigDict
    vocab_size: int
    num_classes: int
    dual: bool = False

    @nn.compact
    def __call__(self, inputs: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        encoder = Encoder(cfg, self.vocab_size, name="encoder")
        dense = lambda f, name: nn.Dense(f, dtype=jnp.float32, name=name)  # noqa: E731
        if self.dual:
            batch = inputs.shape[0]
            # One encoder call on both documents: the same weights, one compiled graph.
            docs_2BxN = jnp.swapaxes(inputs, 0, 1).reshape((2 * batch,) + inputs.shape[2:])
            both = encoder(docs_2BxN, deterministic)  # first documents, then second documents
            u, v = both[:batch].astype(jnp.float32), both[batch:].astype(jnp.float32)
            parts = [u, v] if cfg.dual_combine == "concat" else [u, v, u * v, u - v]
            h = jnp.concatenate(parts, axis=-1)
            widths = [cfg.mlp_dim, cfg.mlp_dim // 2]
        else:
            h = encoder(inputs, deterministic).astype(jnp.float32)
            widths = [cfg.mlp_dim] * cfg.head_hidden_layers
        act = activation(cfg.head_activation, cfg.gelu_approximate)
        for i, width in enumerate(widths):
            h = act(dense(width, "head_hidden" + (str(i + 1) if i else ""))(h))
        return dense(self.num_classes, "logits")(h)


def _pytorch_leaf(path: tuple[str, ...], leaf: jax.Array, key: jax.Array) -> jax.Array:
    """One parameter re-drawn as PyTorch's defaults draw it (the published ConvLuna code)."""
    name, parent = path[-1], (path[-2] if len(path) > 1 else "")
    uniform = lambda bound: jax.random.uniform(key, leaf.shape, leaf.dtype, -bound, bound)  # noqa: E731
    if name == "kernel":  # nn.Linear: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in))
        return uniform(_fan_in(parent, leaf.shape) ** -0.5)
    if name == "pos_embedding":  # nn.Parameter(torch.zeros(1, seq_len, D))
        return jnp.zeros_like(leaf)
    if name == "cls":  # xavier_uniform_ of a (1, 1, D) tensor: fan_in = fan_out = D
        return uniform((3.0 / leaf.shape[-1]) ** 0.5)
    return leaf


def _fan_in(layer: str, kernel_shape: tuple[int, ...]) -> int:
    """The inputs of a Dense/DenseGeneral kernel: W^O's are its heads (H x Dh x D), others the first axis."""
    return int(np.prod(kernel_shape[:-1])) if layer == "out" else kernel_shape[0]


def pytorch_init(params: Any, key: jax.Array) -> Any:
    """``params`` re-drawn with PyTorch's defaults, as in the published ConvLuna code: Linear weights and biases
    U(+-1/sqrt(fan_in)), positions zero, [CLS] xavier-uniform; the rest (embedding rows N(0, 1), the memory N(0, 1),
    the conv filter U(+-1/sqrt(K)), LayerNorms, the temperature) already match and are kept."""
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
    kernels = {path[:-1]: leaf.shape for path, leaf in flat.items() if path[-1] == "kernel"}
    out = {}
    for i, (path, leaf) in enumerate(sorted(flat.items())):
        k = jax.random.fold_in(key, i)
        if path[-1] == "bias" and path[:-1] in kernels:  # a Linear's bias: the bound of its weight
            bound = _fan_in(path[-2] if len(path) > 1 else "", kernels[path[:-1]]) ** -0.5
            out[path] = jax.random.uniform(k, leaf.shape, leaf.dtype, -bound, bound)
        else:
            out[path] = _pytorch_leaf(path, leaf, k)
    return flax.traverse_util.unflatten_dict(out)


def init_params(model: Classifier, key: jax.Array, sample: jax.Array) -> Any:
    """Under ``param_init``: ``xavier`` (xavier-uniform kernels, zero biases, N(0, 0.02) positions) or ``pytorch``."""
    params = model.init(key, sample)["params"]
    if model.config.get("param_init", "xavier") == "pytorch":
        params = pytorch_init(params, jax.random.fold_in(key, 1))
    return params


def build_model(model_config: ml_collections.ConfigDict, vocab_size: int, num_classes: int, dual: bool) -> Classifier:
    """The classifier for a task (validate the config with lra.training.runs first). It holds a frozen copy of
    ``model_config``: Flax module fields are hashable, and later changes to the caller's config cannot reach it."""
    frozen = ml_collections.FrozenConfigDict(model_config)
    return Classifier(frozen, vocab_size=vocab_size, num_classes=num_classes, dual=dual)
