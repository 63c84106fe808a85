"""The common encoder and the classifier heads every attention family plugs into.

Token embedding (or, ``embedding="linear"``, the published ConvLuna code's affine pixel
embedding) + learnable absolute positions, ``num_layers`` blocks (pre- or post-LayerNorm),
optionally a LayerNorm (``pre_pool_norm``), pooling (``cls`` | ``mean`` over real tokens |
``memory`` average for memory families), and a classifier head (GELU by default, Table 2): one
input, or two inputs for matching (the same encoder on both documents, combined as
[u, v, u*v, u-v] (LRA's) or [u, v] (``dual_combine="concat"``, the memory families' configs)).

Padding is masked everywhere unless ``mask_padding=False`` (the published code's setting, for
reproduction only: padding then changes the result). The attention output goes through dropout
before its residual unless ``attention_residual_dropout=False`` (the memory families' configs:
Appendix B's equations and the published code have none).

Memory families (``Attention.uses_memory``): the encoder owns the learned initial memory
(``memory_size`` x D) and threads it through the blocks. A block calls
``y, packed = attn(x, mask, memory=mem)`` and applies the residuals itself; post-LN (the Luna
paper's block): X' = LN(X + y), P' = LN(P + packed), X'' = LN(FFN(X') + X'): the memory skips
the FFN. Pre-LN: the attention sees LN(x), LN(mem) and both residuals are plain sums. The
initial memory is drawn from N(0, ``memory_init_scale``^2), 1.0 as in the published code (the
paper is silent). Each block sows its output memory (``intermediates``) for ``lra.diagnose``.

The final norm is applied for pre-LN stacks only: a post-LN block already ends in a LayerNorm.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from lra import attention as attention_registry
from lra.data.types import PAD_ID

POOLINGS = ("cls", "mean", "memory")
NORMS = ("pre", "post")
DUAL_COMBINES = ("concat_mul_sub", "concat")
HEAD_ACTIVATIONS = ("gelu", "relu")
EMBEDDINGS = ("table", "linear")
_ACTIVATIONS = {"gelu": nn.gelu, "relu": nn.relu}


def _dtype(name: str) -> Any:
    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]


class MlpBlock(nn.Module):
    """Dense(mlp_dim) -> GELU -> dropout -> Dense(D) -> dropout."""

    mlp_dim: int
    dropout_rate: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        d = x.shape[-1]
        h = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform())(x)
        h = nn.gelu(h)
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
        # Dropout on the attention output before the residual: LRA's Transformer has it; the Luna
        # equations and the published ConvLuna code do not (config.model.attention_residual_dropout).
        sub_drop = drop if cfg.attention_residual_dropout else (lambda a, deterministic: a)
        x = x + sub_drop(y, deterministic=deterministic)
        if memory is not None:
            memory = memory + sub_drop(packed, deterministic=deterministic)
            if not pre:
                memory = ln("memory_norm")(memory)
            self.sow("intermediates", "memory", memory)  # this block's output memory, for lra.diagnose
        if not pre:
            x = ln("attention_norm")(x)

        mlp = MlpBlock(cfg.mlp_dim, cfg.dropout_rate, dtype=dtype, name="mlp")
        if pre:
            x = x + mlp(ln("mlp_norm")(x), deterministic)
        else:
            x = ln("mlp_norm")(x + mlp(x, deterministic))
        return x, memory


class PixelEmbed(nn.Module):
    """Pixel tokens (value v as token v + 1) -> ((v / 255 - mean) / std) * w + b, a D-vector per
    pixel: the published ConvLuna code's CIFAR embedding (``IEmbedding``: w ~ N(0, 1), b ~ N(0, 0.1^2))."""

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
        # mask_padding=False is the published code's setting (--mask_inputs False): every position,
        # padding included, is attended to and pooled. Kept as an option for reproduction only.
        mask = tokens_BxN != PAD_ID if cfg.mask_padding else jnp.ones(tokens_BxN.shape, bool)
        if cfg.embedding == "linear":
            x = PixelEmbed(cfg.emb_dim, cfg.pixel_mean, cfg.pixel_std, name="embed")(tokens_BxN)
        else:
            x = nn.Embed(
                self.vocab_size, cfg.emb_dim, embedding_init=nn.initializers.normal(stddev=1.0), name="embed"
            )(tokens_BxN)
        if cfg.pooling == "cls":
            cls = self.param("cls", nn.initializers.normal(stddev=0.02), (cfg.emb_dim,))
            x = jnp.concatenate([jnp.broadcast_to(cls, (batch, 1, cfg.emb_dim)), x], axis=1)
            mask = jnp.concatenate([jnp.ones((batch, 1), bool), mask], axis=1)
        positions = x.shape[1]
        if positions > cfg.max_len + (cfg.pooling == "cls"):
            raise ValueError(
                f"sequence length {n} exceeds the position table (config.model.max_len="
                f"{cfg.max_len}): raise config.model.max_len or shorten config.data.max_len"
            )
        pos = self.param(
            "pos_embedding",
            nn.initializers.normal(stddev=0.02),
            (cfg.max_len + (cfg.pooling == "cls"), cfg.emb_dim),
        )
        x = (x + pos[None, :positions]).astype(dtype)
        if cfg.embedding_dropout:  # LRA's encoders; the published ConvLuna code has none
            x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)

        memory = None
        attn_cls = attention_registry.get(cfg.attention)
        if attn_cls.uses_memory:
            cells = dict(cfg.attention_kwargs).get("memory_size", attn_cls.memory_size)
            # N(0, memory_init_scale^2): 1.0 is the published code's nn.init.normal_; the former
            # D^-1/2 made the first block's memories nearly identical from step 0.
            mem0 = self.param("memory", nn.initializers.normal(stddev=cfg.memory_init_scale), (cells, cfg.emb_dim))
            memory = jnp.broadcast_to(mem0, (batch, cells, cfg.emb_dim)).astype(dtype)

        for i in range(cfg.num_layers):
            x, memory = EncoderBlock(cfg, name=f"block_{i}")(x, mask, memory, deterministic)
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
        return jnp.mean(memory, axis=1)


class Classifier(nn.Module):
    """Encoder + classifier head. Inputs B x N (one input) or B x 2 x N (matching).

    Head: ``head_hidden_layers`` Dense(mlp_dim) layers (two of mlp_dim and mlp_dim/2 for
    matching), each followed by ``head_activation`` (GELU: Table 2 of the ConvLuna paper), then
    the logits.
    """

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
        act = _ACTIVATIONS[cfg.head_activation]
        for i, width in enumerate(widths):
            h = act(dense(width, "head_hidden" + (str(i + 1) if i else ""))(h))
        return dense(self.num_classes, "logits")(h)


def build_model(
    model_config: ml_collections.ConfigDict, vocab_size: int, num_classes: int, dual: bool
) -> Classifier:
    """The classifier for a task; validate the config with lra.training.validation first."""
    return Classifier(model_config, vocab_size=vocab_size, num_classes=num_classes, dual=dual)
