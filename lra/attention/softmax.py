"""The baseline: full multi-head scaled dot-product attention (Vaswani et al., 2017).

Paper: *Attention Is All You Need*, arXiv:1706.03762; quadratic by design, the efficient families' yardstick.

``implementation`` (one function; docs/accelerators.md): ``"xla"`` (:func:`lra.attention.base.dot_product_attention`,
any device and dtype, attention dropout: the reference), ``"cudnn"`` (cuDNN's fused flash attention: no N x N tensor,
but no attention dropout or float32) or ``"auto"`` (cuDNN where :func:`choose_implementation` allows, else xla; CPU runs
and the paper's rows, with dropout, are unchanged). jax 0.10.2's cuDNN training path (``check_is_flash_attention``)
passes a placeholder bias, so its "bias needs even T and S" check always applies, while [CLS] makes every suite length
odd: :func:`cudnn_args` zero-pads q, k, v to a multiple of :data:`CUDNN_LENGTH_MULTIPLE`, exactly (padded keys lie past
each row's ``key_value_seq_lengths``, padded queries are sliced off). Those counts need each row's mask to be a real
prefix; the data guarantee it (padding after the real tokens, checked by ``lra.data.prepare``; [CLS] in front; or no
mask, ``model.mask_padding=False``). ``assume_prefix_mask=True`` (default) trusts it and checks it at O(B N): a
non-prefix row gets NaN outputs, so the run stops at its non-finite check, never silently wrong. ``False`` is exact for
any mask: attention is invariant to key order (positions are already in q, k, v), so each row's real keys are stably
moved to the front first (an argsort and a gather per call).
"""

from __future__ import annotations

from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.attention.base import (
    Attention,
    dot_product_attention,
    project_out,
    project_qkv,
    zero_padding,
)
from lra.errors import InputError

IMPLEMENTATIONS = ("auto", "xla", "cudnn")
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
# jax 0.10.2's cuDNN training path needs even query and key lengths (module docstring).
CUDNN_LENGTH_MULTIPLE = 2
CUDNN_MAX_HEAD_DIM = 128  # cuDNN flash attention before Hopper (256 from Hopper on); a multiple of 8
CUDNN_MIN_COMPUTE_CAPABILITY = (8, 0)  # cuDNN's fused flash attention: Ampere and later


def padded_length(n: int, multiple: int = CUDNN_LENGTH_MULTIPLE) -> int:
    """The length cuDNN's training path accepts: ``n`` rounded up to ``multiple``."""
    return -(-n // multiple) * multiple


def is_prefix_mask(mask_BxM: jax.Array) -> jax.Array:
    """Per row (B,): True where the real keys form a prefix (True... then False...). O(B M), jittable."""
    lengths_B = jnp.sum(mask_BxM, axis=-1, dtype=jnp.int32)
    prefix_BxM = jnp.arange(mask_BxM.shape[-1])[None, :] < lengths_B[:, None]
    return jnp.all(mask_BxM == prefix_BxM, axis=-1)


def cudnn_args(
    q_BxNxHxDh: jax.Array,
    k_BxMxHxDh: jax.Array,
    v_BxMxHxDh: jax.Array,
    kv_mask_BxM: jax.Array | None,
    assume_prefix_mask: bool = True,
) -> dict[str, Any]:
    """The arguments of ``jax.nn.dot_product_attention`` for our masked attention (separate, so a CPU test runs them
    with ``implementation="xla"``); outputs past N are to be sliced off. A row without real keys gets count 1:
    cuDNN's output for 0 is unspecified, and a NaN at a discarded padding row would still poison a loss via 0 * NaN.
    """
    n, m = q_BxNxHxDh.shape[1], k_BxMxHxDh.shape[1]
    if kv_mask_BxM is not None and not assume_prefix_mask:
        order_BxM = jnp.argsort(~kv_mask_BxM, axis=-1, stable=True)  # real keys (False) first
        idx = order_BxM[:, :, None, None]
        k_BxMxHxDh = jnp.take_along_axis(k_BxMxHxDh, idx, axis=1)
        v_BxMxHxDh = jnp.take_along_axis(v_BxMxHxDh, idx, axis=1)

    def pad(x: jax.Array, length: int) -> jax.Array:
        return jnp.pad(x, [(0, 0), (0, padded_length(length) - length), (0, 0), (0, 0)])

    kwargs: dict[str, Any] = dict(
        query=pad(q_BxNxHxDh, n),
        key=pad(k_BxMxHxDh, m),
        value=pad(v_BxMxHxDh, m),
        scale=q_BxNxHxDh.shape[-1] ** -0.5,
    )
    if kv_mask_BxM is not None:
        lengths_B = jnp.sum(kv_mask_BxM, axis=-1, dtype=jnp.int32)
        kwargs["key_value_seq_lengths"] = jnp.maximum(lengths_B, 1)
    elif padded_length(m) != m:  # no mask, but padded keys: count the real ones
        kwargs["key_value_seq_lengths"] = jnp.full((q_BxNxHxDh.shape[0],), m, jnp.int32)
    return kwargs


def fused_attention(
    q_BxNxHxDh: jax.Array,
    k_BxMxHxDh: jax.Array,
    v_BxMxHxDh: jax.Array,
    kv_mask_BxM: jax.Array | None,
    implementation: Literal["xla", "cudnn"] = "cudnn",
    assume_prefix_mask: bool = True,
) -> jax.Array:
    """Masked attention via ``jax.nn.dot_product_attention``; no query lengths: padded queries' outputs are finite."""
    n = q_BxNxHxDh.shape[1]
    args = cudnn_args(q_BxNxHxDh, k_BxMxHxDh, v_BxMxHxDh, kv_mask_BxM, assume_prefix_mask)
    y_BxNxHxDh = jax.nn.dot_product_attention(**args, implementation=implementation)[:, :n]
    if kv_mask_BxM is not None and assume_prefix_mask:
        ok_B = is_prefix_mask(kv_mask_BxM)
        y_BxNxHxDh = jnp.where(ok_B[:, None, None, None], y_BxNxHxDh, jnp.asarray(jnp.nan, y_BxNxHxDh.dtype))
    return y_BxNxHxDh


def _on_cuda_gpu() -> bool:
    """Whether this process computes on a CUDA GPU with cuDNN and compute capability >= 8.0."""
    if jax.default_backend() != "gpu":
        return False
    try:
        from jax._src.lib import cuda_versions  # None without the CUDA plugin (e.g. ROCm)

        device = jax.devices()[0]
        capability = tuple(int(x) for x in str(getattr(device, "compute_capability", "0.0")).split("."))
    except Exception:  # an unknown runtime: keep the reference path
        return False
    return cuda_versions is not None and capability >= CUDNN_MIN_COMPUTE_CAPABILITY


def choose_implementation(
    implementation: str, dtype: Any, dropout_rate: float, head_dim: int, on_gpu: bool | None = None
) -> str:
    """``"xla"`` or ``"cudnn"``; ``"auto"`` is cuDNN on a CUDA GPU (capability >= 8.0) for bfloat16/float16, no
    attention dropout and a head size that is a multiple of 8 and <= 128. ``on_gpu`` lets a CPU test the rule."""
    if implementation != "auto":
        return implementation
    fits = (
        jnp.dtype(dtype) in [jnp.dtype(d) for d in CUDNN_DTYPES]
        and dropout_rate == 0.0
        and head_dim % 8 == 0
        and head_dim <= CUDNN_MAX_HEAD_DIM
    )
    if not fits:
        return "xla"
    return "cudnn" if (_on_cuda_gpu() if on_gpu is None else on_gpu) else "xla"


class SoftmaxAttention(Attention):
    """softmax(Q K^T / sqrt(Dh)) V over the real keys, with attention dropout; options: module docstring."""

    implementation: str = "auto"
    assume_prefix_mask: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.implementation not in IMPLEMENTATIONS:
            raise InputError(
                f"attention_kwargs.implementation={self.implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}"
            )
        # At construction, so a bad pair fails before compiling; refused even for evaluation (one module serves both).
        if self.implementation == "cudnn" and self.dropout_rate > 0.0:
            raise InputError(self._dropout_error())

    def _dropout_error(self) -> str:
        return (
            f"attention_kwargs.implementation='cudnn' has no attention dropout, but dropout_rate="
            f"{self.dropout_rate}: set config.model.attention_dropout_rate=0 (or use implementation='xla')"
        )

    @nn.compact
    def __call__(
        self,
        x_BxNxD: jax.Array,
        mask_BxN: jax.Array,
        memory: jax.Array | None = None,
        deterministic: bool = True,
    ) -> tuple[jax.Array, None]:
        q, k, v = project_qkv(self, x_BxNxD)
        implementation = choose_implementation(self.implementation, q.dtype, self.dropout_rate, q.shape[-1])
        if implementation == "cudnn":
            if not deterministic and self.dropout_rate > 0.0:
                raise InputError(self._dropout_error())
            if q.dtype not in CUDNN_DTYPES:
                raise InputError(
                    f"attention_kwargs.implementation='cudnn' runs in bfloat16 or float16 only (cuDNN "
                    f"has no float32 fused attention), got {q.dtype}: set config.model.dtype=bfloat16 "
                    f"(or use implementation='xla')"
                )
            y_BxNxHxDh = fused_attention(q, k, v, mask_BxN, assume_prefix_mask=self.assume_prefix_mask)
        else:
            y_BxNxHxDh = dot_product_attention(
                q,
                k,
                v,
                mask_BxN,
                dropout_rate=self.dropout_rate,
                dropout_rng=self.dropout_rng(deterministic),
                deterministic=deterministic,
            )
        y = project_out(self, zero_padding(y_BxNxHxDh, mask_BxN), x_BxNxD.shape[-1])
        return y, None
