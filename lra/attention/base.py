"""Pieces every attention family shares: the module fields, the q/k/v/out projections, masks.

The call contract: docs/design.md ("The attention contract"). Families built on :func:`project_qkv` and
:func:`project_out` (``query``, ``key``, ``value``, ``out``) share softmax's parameter tree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, ClassVar, Literal, Protocol, overload, runtime_checkable

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.errors import InputError

Dtype = Any

# Logit of masked keys: finite, so a fully masked row (only at padded queries, discarded) is uniform, not NaN.
MASK_LOGIT = -1e9


class Attention(nn.Module):
    """Base class: the fields every family takes. ``dropout_rate`` acts on attention weights (families without them
    ignore it); ``dtype`` is the compute dtype, while parameters and softmax/normalisation statistics stay float32."""

    num_heads: int = 4
    qkv_dim: int = 128
    dropout_rate: float = 0.0
    dtype: Dtype = jnp.float32

    # True for memory families (Luna, ConvLuna), which declare ``memory_size`` (:class:`MemoryAttention`).
    uses_memory: ClassVar[bool] = False

    def dropout_rng(self, deterministic: bool) -> jax.Array | None:
        """The attention-dropout key, or None when dropout is off."""
        if deterministic or self.dropout_rate == 0.0:
            return None
        return self.make_rng("dropout")

    @property
    def head_dim(self) -> int:
        check_heads(self.num_heads, self.qkv_dim)
        return self.qkv_dim // self.num_heads


@runtime_checkable
class MemoryAttention(Protocol):
    """A memory family as the encoder reads it: a ``memory_size`` field with a default (the cells of the encoder's
    learned initial memory); the call returns the packed memory (same shape), not None."""

    uses_memory: ClassVar[bool]
    memory_size: int

    def __call__(
        self, x_BxNxD: jax.Array, mask_BxN: jax.Array, memory: jax.Array | None = None, deterministic: bool = True
    ) -> tuple[jax.Array, jax.Array]: ...


def memory_cells(cls: type[Attention], options: Mapping[str, Any]) -> int:
    """``options["memory_size"]``, else the family's default; a TypeError names a family with ``uses_memory`` but
    no ``memory_size`` field (a bug in that family)."""
    if not cls.uses_memory:
        raise TypeError(f"{cls.__name__} has no memory (uses_memory is False): it has no memory cells")
    if "memory_size" not in getattr(cls, "__dataclass_fields__", {}):
        raise TypeError(
            f"{cls.__name__} sets uses_memory = True but declares no memory_size field "
            f"(lra.attention.base.MemoryAttention)"
        )
    return options.get("memory_size", cls.memory_size)  # type: ignore[attr-defined]


def check_heads(num_heads: int, qkv_dim: int) -> None:
    """Raise a clear error when the heads do not divide the qkv width."""
    if num_heads < 1 or qkv_dim % num_heads:
        raise InputError(
            f"qkv_dim={qkv_dim} is not divisible by num_heads={num_heads}: set "
            f"config.model.qkv_dim to a multiple of config.model.num_heads."
        )


def dense_heads(num_heads: int, head_dim: int, name: str, dtype: Dtype) -> nn.DenseGeneral:
    """A projection D -> H x Dh (one of ``query``, ``key``, ``value``)."""
    return nn.DenseGeneral(
        features=(num_heads, head_dim),
        dtype=dtype,
        kernel_init=nn.initializers.xavier_uniform(),
        name=name,
    )


QKV = ("query", "key", "value")


def qkv_modules(attn: Attention) -> dict[str, Callable[[], nn.DenseGeneral]]:
    """The :data:`QKV` projections as :func:`project_heads` takes them."""
    return {n: partial(dense_heads, attn.num_heads, attn.head_dim, n, attn.dtype) for n in QKV}


def project_qkv(
    attn: Attention, x_q_BxNxD: jax.Array, x_kv_BxMxD: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-head q, k, v (B x N x H x Dh) inside a compact method; self-attention goes through :func:`project_heads`."""
    h, dh = attn.num_heads, attn.head_dim
    if x_kv_BxMxD is None:
        q, k, v = project_heads(attn, x_q_BxNxD, qkv_modules(attn))
        return q, k, v
    q = dense_heads(h, dh, "query", attn.dtype)(x_q_BxNxD)
    k = dense_heads(h, dh, "key", attn.dtype)(x_kv_BxMxD)
    v = dense_heads(h, dh, "value", attn.dtype)(x_kv_BxMxD)
    return q, k, v


def project_heads(
    attn: Attention, x_BxNxD: jax.Array, modules: Mapping[str, Callable[[], nn.DenseGeneral]]
) -> list[jax.Array]:
    """Projections D -> H x Dh of one input (``modules``: name -> its DenseGeneral), in order, inside a compact method:
    one GEMM on a GPU/TPU, op for op ``nn.DenseGeneral`` on a CPU (chosen at lowering), the parameters the modules' own.
    Why: docs/design.md ("The attention contract")."""
    if attn.is_initializing():
        return [make()(x_BxNxD) for make in modules.values()]
    params = attn.variables["params"]
    args = [params[name][part] for name in modules for part in ("kernel", "bias")]
    separate, merged = partial(_separate, dtype=attn.dtype), partial(_merged, dtype=attn.dtype)
    return list(jax.lax.platform_dependent(x_BxNxD, *args, cpu=separate, default=merged))


def _dense(x_BxNxD: jax.Array, kernel_DxHxDh: jax.Array, bias_HxDh: jax.Array, dtype: Dtype) -> jax.Array:
    """What ``nn.DenseGeneral(features=(H, Dh))`` computes, op for op."""
    x, kernel, bias = nn.dtypes.promote_dtype(x_BxNxD, kernel_DxHxDh, bias_HxDh, dtype=dtype)
    out = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))
    return out + jnp.reshape(bias, (1,) * (x.ndim - 1) + bias.shape)


def _separate(x_BxNxD: jax.Array, *kernels_biases: jax.Array, dtype: Dtype) -> tuple[jax.Array, ...]:
    """One GEMM per projection (``kernels_biases``: kernel, bias, kernel, bias, ...)."""
    pairs = zip(kernels_biases[0::2], kernels_biases[1::2], strict=True)
    return tuple(_dense(x_BxNxD, kernel, bias, dtype) for kernel, bias in pairs)


def _merged(x_BxNxD: jax.Array, *kernels_biases: jax.Array, dtype: Dtype) -> tuple[jax.Array, ...]:
    """One GEMM for all the projections: kernels D x P x H x Dh side by side, outputs split after."""
    kernel_DxPxHxDh = jnp.stack(kernels_biases[0::2], axis=1)
    bias_PxHxDh = jnp.stack(kernels_biases[1::2], axis=0)
    y_BxNxPxHxDh = _dense(x_BxNxD, kernel_DxPxHxDh, bias_PxHxDh, dtype)
    return tuple(y_BxNxPxHxDh[..., i, :, :] for i in range(kernel_DxPxHxDh.shape[1]))


def project_out(attn: Attention, y_BxNxHxDh: jax.Array, features: int) -> jax.Array:
    """Merge the heads back to the model width with the ``out`` projection."""
    return nn.DenseGeneral(
        features=features,
        axis=(-2, -1),
        dtype=attn.dtype,
        kernel_init=nn.initializers.xavier_uniform(),
        name="out",
    )(y_BxNxHxDh)


def key_mask_bias(mask_BxM: jax.Array) -> jax.Array:
    """Additive logit bias (B x 1 x 1 x M): 0 on real keys, MASK_LOGIT on padding."""
    return jnp.where(mask_BxM, 0.0, MASK_LOGIT)[:, None, None, :].astype(jnp.float32)


def zero_padding(y_BxNx___: jax.Array, mask_BxN: jax.Array) -> jax.Array:
    """Zero the outputs at padded positions, so nothing computed there can leak downstream."""
    shape = mask_BxN.shape + (1,) * (y_BxNx___.ndim - mask_BxN.ndim)
    return jnp.where(mask_BxN.reshape(shape), y_BxNx___, 0).astype(y_BxNx___.dtype)


def split_chunks(a_BxNx___: jax.Array, size: int) -> jax.Array:
    """B x N x ... -> B x C x L x ...: chunks of L = min(``size``, N) tokens, the last zero-padded. Summing per chunk
    keeps XLA's CPU transposes of N-long sums (k^T v, class sums) inside L2 (results/bench/chunked_sums.md)."""
    b, n = a_BxNx___.shape[:2]
    size = max(1, min(size, n))
    pad = (-n) % size
    a = jnp.pad(a_BxNx___, ((0, 0), (0, pad)) + ((0, 0),) * (a_BxNx___.ndim - 2))
    return a.reshape((b, (n + pad) // size, size) + a_BxNx___.shape[2:])


def per_chunk(summary_Bx___: jax.Array, num_chunks: int) -> jax.Array:
    """The summary repeated per chunk (B x C x ...): reading it is chunk-batched, its gradient a chunk-local sum."""
    return jnp.broadcast_to(summary_Bx___[:, None], (summary_Bx___.shape[0], num_chunks) + summary_Bx___.shape[1:])


@overload
def dot_product_attention(
    q_BxNxHxD: jax.Array,
    k_BxMxHxD: jax.Array,
    v_BxMxHxD: jax.Array,
    kv_mask_BxM: jax.Array | None,
    *,
    scale: jax.Array | float | None = None,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    return_weights: Literal[False] = False,
) -> jax.Array: ...


@overload
def dot_product_attention(
    q_BxNxHxD: jax.Array,
    k_BxMxHxD: jax.Array,
    v_BxMxHxD: jax.Array,
    kv_mask_BxM: jax.Array | None,
    *,
    scale: jax.Array | float | None = None,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    return_weights: Literal[True],
) -> tuple[jax.Array, jax.Array]: ...


def dot_product_attention(
    q_BxNxHxD: jax.Array,
    k_BxMxHxD: jax.Array,
    v_BxMxHxD: jax.Array,
    kv_mask_BxM: jax.Array | None,
    *,
    scale: jax.Array | float | None = None,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    deterministic: bool = True,
    return_weights: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Masked multi-head softmax attention, O(N x M) memory. Logits and softmax in float32, the weighted sum in
    v's dtype; ``scale`` defaults to Dh^-1/2; ``return_weights`` adds the weights (B x H x N x M, before dropout)."""
    if scale is None:
        scale = q_BxNxHxD.shape[-1] ** -0.5
    logits_BxHxNxM = jnp.einsum("bnhd,bmhd->bhnm", q_BxNxHxD, k_BxMxHxD, preferred_element_type=jnp.float32)
    logits_BxHxNxM = logits_BxHxNxM * scale
    if kv_mask_BxM is not None:
        logits_BxHxNxM = logits_BxHxNxM + key_mask_bias(kv_mask_BxM)
    probs = weights = jax.nn.softmax(logits_BxHxNxM, axis=-1)
    if not deterministic and dropout_rate > 0.0:
        assert dropout_rng is not None, "attention dropout in training needs dropout_rng"
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
    y = jnp.einsum("bhnm,bmhd->bnhd", weights.astype(v_BxMxHxD.dtype), v_BxMxHxD)
    return (y, probs) if return_weights else y
