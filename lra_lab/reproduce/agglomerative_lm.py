"""The agglomerative paper's layers and language model, for its Figure 1 and Table 1 claims.

Imported lazily (it imports Flax, hence JAX): ``python -m lra_lab.reproduce.agglomerative`` must pin
itself to one core before JAX loads. Full attention is written out here because the suite's
softmax family has no causal mode (LRA's tasks are encoders); agglomerative attention is
``lra.attention.AgglomerativeAttention`` itself.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.attention.agglomerative import AgglomerativeAttention


class FullAttention(nn.Module):
    """Multi-head dot-product attention (q/k/v in one projection, then out; biases like the suite's),
    over all keys or, ``causal``, over the prefix."""

    dim: int
    heads: int
    causal: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, _ = x.shape
        head = self.dim // self.heads
        qkv = nn.Dense(3 * self.dim, name="qkv")(x).reshape(b, t, 3, self.heads, head)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head)
        if self.causal:
            logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -1e9)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)
        return nn.Dense(x.shape[-1], name="out")(out.reshape(b, t, self.dim))


def attention_layer(kind: str, width: int, classes: int, causal: bool = True) -> nn.Module:
    """The paper's two self-attention layers at ``width``: 8 heads or 8 classes of width / 8 each."""
    if kind == "full":
        return FullAttention(width, classes, causal)
    return AgglomerativeAttention(num_heads=classes, qkv_dim=width, num_classes=classes, causal=causal)


def apply_attention(layer: nn.Module, x: jax.Array) -> jax.Array:
    """Either layer's output on unpadded ``x`` (the suite's families take a mask and return a pair)."""
    if isinstance(layer, AgglomerativeAttention):
        return layer(x, jnp.ones(x.shape[:2], bool))[0]
    return layer(x)


def coordinate_signal(length: int, width: int) -> np.ndarray:
    """Fixed sinusoidal position signal (the paper's "sequence embedding", no weights)."""
    position = np.arange(length)[:, None]
    rates = np.exp(-math.log(10_000.0) * np.arange(0, width, 2) / width)
    signal = np.zeros((length, width), np.float32)
    signal[:, 0::2], signal[:, 1::2] = np.sin(position * rates), np.cos(position * rates)
    return signal


class _Block(nn.Module):
    """One post-norm transformer block: causal attention, then a 4x feed-forward transition."""

    kind: str
    width: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.LayerNorm()(x + apply_attention(attention_layer(self.kind, self.width, self.classes), x))
        h = nn.Dense(self.width)(nn.relu(nn.Dense(4 * self.width)(x)))
        return nn.LayerNorm()(x + h)


class LanguageModel(nn.Module):
    """A universal-transformer decoder (one block's weights applied ``depth`` times), tied embedding."""

    kind: str  # "full" | "agglomerative"
    vocab: int
    width: int
    depth: int
    classes: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(self.vocab, self.width)
        x = embed(tokens) + coordinate_signal(tokens.shape[1], self.width)
        block = _Block(self.kind, self.width, self.classes)
        for _ in range(self.depth):
            x = block(x)
        return embed.attend(x)


def count(params: object) -> int:
    """Number of weights in a parameter tree."""
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(params))
