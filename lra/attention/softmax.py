"""The baseline: full multi-head scaled dot-product attention (Vaswani et al., 2017).

Paper: *Attention Is All You Need*, arXiv:1706.03762.

Quadratic in length by design; the efficient families are measured against it.

Implementations of the same function (``attention_kwargs.implementation``):

* ``"xla"``: our :func:`lra.attention.base.dot_product_attention`; any device, any dtype,
  attention dropout. The reference, and what every CPU run computes.
* ``"cudnn"``: ``jax.nn.dot_product_attention(..., implementation="cudnn")``, cuDNN's fused
  (flash) attention, for GPU runs: no B x H x N x N tensor is stored, so long sequences train
  faster and in far less memory. cuDNN has no attention dropout and no float32 kernel, so it needs
  ``config.model.attention_dropout_rate=0`` and ``config.model.dtype=bfloat16`` (or float16).
* ``"auto"`` (default): ``"cudnn"`` where it applies (:func:`choose_implementation`: a CUDA GPU
  backend with cuDNN, compute capability >= 8.0, bfloat16/float16, no attention dropout, a head
  size that is a multiple of 8 and <= 128), ``"xla"`` otherwise. On a CPU, and for the paper's
  rows (attention dropout > 0), that is ``"xla"``: nothing they compute changes.

Sequence length. jax 0.10.2's cuDNN training path (``jax/_src/cudnn/fused_attention_stablehlo.py``,
``_dot_product_attention_fwd_rule`` -> ``check_is_flash_attention``) raises
``Unsupported sequence length Q 4097, KV 4097`` unless both lengths are even: it passes a
placeholder bias array, so its "training with bias needs T % 2 == 0 and S % 2 == 0" check always
applies. The encoder's [CLS] token makes every suite length odd (N + 1: 2,001, 4,001, 4,097), so
:func:`cudnn_args` pads q, k and v with zeros to a multiple of :data:`CUDNN_LENGTH_MULTIPLE` (2).
Exact: the padded keys lie past every row's count of real keys (``key_value_seq_lengths``), so
they get no weight, and :func:`fused_attention` slices the padded queries' outputs off.

Key padding reaches cuDNN as per-row counts of real keys (``key_value_seq_lengths``), which mask
the keys at positions >= count, so the mask must be a contiguous real prefix per row. The data
guarantee it: real tokens first and padding (PAD_ID 0) after them (checked by
``lra.data.prepare``), [CLS] in front, or no mask at all (``model.mask_padding=False``).
``attention_kwargs.assume_prefix_mask`` chooses what the cuDNN path does with that guarantee:

* ``True`` (default): it trusts it and counts the real keys, and checks it on the fly at O(B N)
  cost: a row whose mask is not a prefix gets NaN outputs, so a broken guarantee stops the run at
  its non-finite check (a loud failure, never silently wrong attention).
* ``False``: exact for any mask. Attention is invariant to the order of the keys (q, k, v are
  already projected, positions were added before), so each row's real keys are stably moved to
  the front (an argsort and a gather of K and V on every call) before they are counted.
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
# jax 0.10.2's cuDNN training path needs even query and key lengths (see the module docstring).
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
    """The arguments of ``jax.nn.dot_product_attention`` that compute our masked attention.

    Separate from the call so a CPU test can run exactly these with ``implementation="xla"``.
    q, k and v are zero-padded to even lengths (:data:`CUDNN_LENGTH_MULTIPLE`); the query outputs
    past N are to be sliced off (:func:`fused_attention`). With ``assume_prefix_mask=False`` the
    real keys of each row are moved to the front first (stable, so a prefix mask is unchanged);
    with True the mask is taken as a prefix (checked by :func:`fused_attention`). A row without
    real keys gets count 1: cuDNN's output for count 0 is not specified, and such rows occur only
    at padding (their outputs are discarded), but a NaN there would still poison a loss through
    ``0 * NaN``.
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
    """Masked attention through ``jax.nn.dot_product_attention``; B x N x H x Dh.

    Every query row attends to the real keys of its row (no query lengths are passed), so the
    outputs at padded queries are finite, as in our implementation; the module zeroes them. With
    ``assume_prefix_mask`` a row whose mask is not a prefix gets NaN outputs (module docstring).
    """
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
    """``"xla"`` or ``"cudnn"``: ``implementation`` itself unless it is ``"auto"``, which picks
    cuDNN where it applies (module docstring) and our XLA path everywhere else. ``on_gpu``
    (default: :func:`_on_cuda_gpu`) is a parameter so the rule is tested on CPU."""
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
    """softmax(Q K^T / sqrt(Dh)) V over the real keys, with attention dropout.

    Attributes:
      implementation: ``"auto"`` (cuDNN where it applies, else XLA), ``"xla"`` (ours,
        everywhere) or ``"cudnn"`` (cuDNN fused attention on GPU: bfloat16/float16, no attention
        dropout); see the module docstring.
      assume_prefix_mask: the cuDNN path takes the mask as a real prefix per row (the data's
        guarantee, checked: a row that is not gets NaN outputs); False moves each row's real keys
        to the front first (exact for any mask, an argsort and a gather per call).
    """

    implementation: str = "auto"
    assume_prefix_mask: bool = True

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
