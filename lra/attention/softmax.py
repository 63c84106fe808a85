"""The baseline: full multi-head scaled dot-product attention (Vaswani et al., 2017).

Paper: *Attention Is All You Need*, arXiv:1706.03762.

Quadratic in length by design; the efficient families are measured against it.

Two implementations of the same function (``attention_kwargs.implementation``):

* ``"xla"`` (default): our :func:`lra.attention.base.dot_product_attention`; any device, any
  dtype, attention dropout.
* ``"cudnn"``: ``jax.nn.dot_product_attention(..., implementation="cudnn")``, cuDNN's fused
  (flash) attention, for GPU runs: no B x H x N x N tensor is stored, so long sequences train
  faster and in less memory. cuDNN has no attention dropout and no float32 kernel, so it needs
  ``config.model.attention_dropout_rate=0`` and ``config.model.dtype=bfloat16`` (or float16).

Key padding reaches cuDNN as per-row counts of real keys (``key_value_seq_lengths``), which
mask the keys at positions >= count. Our masks are a contiguous real prefix per row: the data
put real tokens first and padding (PAD_ID 0) after them (checked by ``lra.data.prepare``), and
the encoder's CLS token goes in front. A mask that is not a prefix is still handled exactly:
attention is invariant to the order of the keys (q, k, v are already projected; positions were
added before), so :func:`cudnn_args` stably moves each row's real keys to the front before
counting them. For a prefix mask that reorder is the identity (an O(N) gather, small next to the
O(N^2) attention).
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

IMPLEMENTATIONS = ("xla", "cudnn")
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def cudnn_args(
    q_BxNxHxDh: jax.Array, k_BxMxHxDh: jax.Array, v_BxMxHxDh: jax.Array, kv_mask_BxM: jax.Array | None
) -> dict[str, Any]:
    """The arguments of ``jax.nn.dot_product_attention`` that compute our masked attention.

    Separate from the call so a CPU test can run exactly these with ``implementation="xla"``.
    The real keys of each row are moved to the front (stable, so a prefix mask is unchanged) and
    counted. A row without real keys gets count 1: cuDNN's output for count 0 is not specified,
    and such rows occur only at padding (their outputs are discarded), but a NaN there would
    still poison a loss through ``0 * NaN``.
    """
    kwargs: dict[str, Any] = dict(
        query=q_BxNxHxDh, key=k_BxMxHxDh, value=v_BxMxHxDh, scale=q_BxNxHxDh.shape[-1] ** -0.5
    )
    if kv_mask_BxM is None:
        return kwargs
    order_BxM = jnp.argsort(~kv_mask_BxM, axis=-1, stable=True)  # real keys (False) first
    idx = order_BxM[:, :, None, None]
    kwargs["key"] = jnp.take_along_axis(k_BxMxHxDh, idx, axis=1)
    kwargs["value"] = jnp.take_along_axis(v_BxMxHxDh, idx, axis=1)
    lengths_B = jnp.sum(kv_mask_BxM, axis=-1, dtype=jnp.int32)
    kwargs["key_value_seq_lengths"] = jnp.maximum(lengths_B, 1)
    return kwargs


def fused_attention(
    q_BxNxHxDh: jax.Array,
    k_BxMxHxDh: jax.Array,
    v_BxMxHxDh: jax.Array,
    kv_mask_BxM: jax.Array | None,
    implementation: Literal["xla", "cudnn"] = "cudnn",
) -> jax.Array:
    """Masked attention through ``jax.nn.dot_product_attention``; B x N x H x Dh.

    Every query row attends to the real keys of its row (no query lengths are passed), so the
    outputs at padded queries are finite, as in our implementation; the module zeroes them.
    """
    return jax.nn.dot_product_attention(
        **cudnn_args(q_BxNxHxDh, k_BxMxHxDh, v_BxMxHxDh, kv_mask_BxM), implementation=implementation
    )


class SoftmaxAttention(Attention):
    """softmax(Q K^T / sqrt(Dh)) V over the real keys, with attention dropout.

    Attributes:
      implementation: ``"xla"`` (ours, everywhere) or ``"cudnn"`` (cuDNN fused attention on
        GPU: bfloat16/float16, no attention dropout); see the module docstring.
    """

    implementation: str = "xla"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.implementation not in IMPLEMENTATIONS:
            raise InputError(
                f"attention_kwargs.implementation={self.implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}"
            )
        # Checked here, at construction, so a bad pair fails before anything compiles. (The model
        # builds one module for training and evaluation, so the rate is refused even if only
        # evaluation would run: it has no effect there anyway.)
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
        if self.implementation == "cudnn":
            if not deterministic and self.dropout_rate > 0.0:
                raise InputError(self._dropout_error())
            if q.dtype not in CUDNN_DTYPES:
                raise InputError(
                    f"attention_kwargs.implementation='cudnn' runs in bfloat16 or float16 only (cuDNN "
                    f"has no float32 fused attention), got {q.dtype}: set config.model.dtype=bfloat16 "
                    f"(or use implementation='xla')"
                )
            y_BxNxHxDh = fused_attention(q, k, v, mask_BxN)
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
