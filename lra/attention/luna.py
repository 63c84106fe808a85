"""Luna and ConvLuna: attention factorised through a shared memory.

Luna: Ma et al., *Luna: Linear Unified Nested Attention* (arXiv:2106.01540). ConvLuna: Yorsh, Holeňa, Bojar, Herel,
*On Difficulties of Attention Factorization through Shared Memory* (arXiv:2404.00798), Appendices B-D.

One module is one Luna block's pair of attentions over the memory P (B x M x D) and the input X (B x N x D)::

    P_packed = MultiHeadAttention(P, X~, X~)              # "packing": M queries, N' keys
    Y        = MultiHeadAttention(X, P_packed, P_packed)  # "unpacking": N queries, M keys

returning ``(Y, P_packed)``; the encoder adds the residuals and post-LN norms (Appendix B). Both are linear in N.

ConvLuna (Appendix C) changes only the packing attention:

* ``filter``: X~ = FilterOp(X W) along the length axis, on keys and values. ``conv``: one bias-free K-tap filter per
  head shared by its features ("no depthwise interaction": the reference code's ``Conv2d(H, H, (K, 1), groups=H)``);
  ``maxpool``: a (K, 1) max.
* ``learn_temperature``: logits / exp(tau), tau a learned scalar (``log_temperature``) from 0, instead of Dh^-1/2.
  ``freeze_temperature`` keeps tau = 0 with no parameter: Appendix E asks whether the initial value matters more than
  the learning; the published code learns it (False).
* Unpacking keeps Dh^-1/2 (Figure 3: "we keep the normalization fixed and identical to the vanilla Transformer");
  ``scale_unpacking=False`` is the published code's unscaled bug, which made the paper's numbers (docs/reference.md).

Appendix E's ablations (``only_scaling``, ``only_filtering``, ``fixed_temperature``, ``maxpool``, ``stride2/4``) are
ConvLuna config flags only (``lra.papers.convluna.CONVLUNA_FLAGS``), so a row like "OnlyScaling-16" names one model.

Windows. ``filter_padding="same"`` (default): window j is centred on token j*S, covering
``[j*S - (K-1)//2, j*S - (K-1)//2 + K)`` (PyTorch's 'same' split for even K): ceil(N/S) windows, so N < K works. It is
real iff token j*S is; padded or out-of-sequence tokens in it count as 0 (conv) or -inf (maxpool: the real centre keeps
it finite). Windows centred on padding are masked and zeroed even when they reach real tokens, else the memory would
depend on how much padding follows: padding never reaches the memory or changes real positions. ``"valid"``, the
published code's windows (``MaxPool2d(padding=0)``, its strided convolutions): window j covers [j*S, j*S + K) and is
real iff all its tokens are; a sequence shorter than K then has no real window and packs only W^O's bias. (The published
code runs without masks: ``:reference`` sets ``config.model.mask_padding=False``, docs/reference.md.)

Sharing (Section D: "all ConvLuna models share projection matrices between packing and unpacking attention, and share
the W^K and W^V = I_d weights within a module"): ``share_projections`` is True (all), False or letters of "qkvo"
(the reference code's spelling). The published Luna block shares all four; its ``SimplifiedConvLunaBlock`` shares
"qko" (no W^V): the text's sharing, our ConvLuna default (``scripts/check_published_code.py``: same parameter count
and logits). ``share_kv``: values are the inputs split into heads (W^V = I), keys use W^K; needs ``qkv_dim == D``.

Parameters: shared projections at the top level with softmax's names (``query``, ``key``, ``value``, ``out``), the
others under ``pack/`` and ``unpack/``; ConvLuna adds ``filter_kernel`` (K x H) and ``log_temperature``. Without a
memory argument the module learns its own ``memory`` (memory_size x D, N(0, 1)) to work standalone. The packing
weights (B x H x M x J) and key mask are sown into ``intermediates`` for ``lra_lab.diagnose``.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.attention.base import Attention, Dtype, dense_heads, dot_product_attention, zero_padding
from lra.errors import InputError

FILTERS = ("none", "conv", "maxpool")
WINDOWS = ("same", "valid")


PROJECTIONS = ("query", "key", "value", "out")
_LETTERS = {"q": "query", "k": "key", "v": "value", "o": "out"}


def shared_projections(share: bool | str) -> tuple[str, ...]:
    """Projections shared by packing and unpacking: True (all), False (none) or letters of "qkvo" (``shared_att``)."""
    if share is True:
        return PROJECTIONS
    if share is False or share in ("", "none"):
        return ()
    if isinstance(share, str) and share and set(share) <= set(_LETTERS):
        return tuple(name for letter, name in _LETTERS.items() if letter in share)
    raise InputError(
        f"attention_kwargs.share_projections={share!r}: use true (share W^Q, W^K, W^V, W^O), "
        f"false (share none) or letters of 'qkvo' (e.g. 'qko': W^Q, W^K, W^O, the published ConvLuna code)"
    )


class _Layers(NamedTuple):
    """The projections of one attention; ``value`` is None when W^V = I."""

    query: nn.Module
    key: nn.Module
    value: nn.Module | None
    out: nn.Module


def _make_layer(name: str, num_heads: int, head_dim: int, features: int, dtype: Dtype) -> nn.Module:
    """W^Q, W^K, W^V (D -> H x Dh) or W^O (H x Dh -> D) in the current module scope, named as softmax's."""
    if name == "out":
        return nn.DenseGeneral(
            features, axis=(-2, -1), dtype=dtype, kernel_init=nn.initializers.xavier_uniform(), name="out"
        )
    return dense_heads(num_heads, head_dim, name, dtype)


class _Projections(nn.Module):
    """The projections of one attention (``pack`` or ``unpack``) that are not shared."""

    names: tuple[str, ...]
    num_heads: int
    head_dim: int
    features: int
    dtype: Dtype

    def setup(self) -> None:
        for name in self.names:
            setattr(self, name, _make_layer(name, self.num_heads, self.head_dim, self.features, self.dtype))

    def layers(self) -> dict[str, nn.Module]:
        return {name: getattr(self, name) for name in self.names}


def _maxpool_same(x_BxNxHxDh: jax.Array, kernel_size: int) -> jax.Array:
    """Max over the 'same' window around every position (stride 1), -inf outside. In the consuming matmul's layout:
    in B x N x H x Dh, XLA (CPU) fused the shifted reads into a transpose, its time per token 1.9x from N=1K to 16K."""
    x_BxHxNxDh = jnp.transpose(x_BxNxHxDh, (0, 2, 1, 3))
    n, left = x_BxHxNxDh.shape[2], (kernel_size - 1) // 2
    xp = jnp.pad(x_BxHxNxDh, ((0, 0), (0, 0), (left, kernel_size - 1 - left), (0, 0)), constant_values=-jnp.inf)
    y = xp[:, :, :n]
    for t in range(1, kernel_size):  # K shifted slices: O(N D) memory, fused by XLA
        y = jnp.maximum(y, xp[:, :, t : t + n])
    return jnp.transpose(y, (0, 2, 1, 3))


def _conv_same(x_BxNxHxDh: jax.Array, kernel_KxH: jax.Array, block: int = 32) -> jax.Array:
    """y[n, h] = sum_t w[t, h] x[n - (K-1)//2 + t, h], zero outside: a banded matmul per block of C outputs, more
    multiply-adds than a direct convolution but ~10x faster than K shifted slices on CPU for K = 32; O(N D) memory."""
    b, n, h, dh = x_BxNxHxDh.shape
    k = kernel_KxH.shape[0]
    c = max(block, k)  # the tail of a block's window comes from the next block only: K - 1 <= C
    num_blocks, left = -(-n // c), (k - 1) // 2
    xp = jnp.pad(x_BxNxHxDh, ((0, 0), (left, (num_blocks + 1) * c - n - left), (0, 0), (0, 0)))
    body = xp[:, : num_blocks * c].reshape(b, num_blocks, c, h, dh)
    tail = xp[:, c : (num_blocks + 1) * c].reshape(b, num_blocks, c, h, dh)[:, :, : k - 1]
    windows_BxJxWxHxDh = jnp.concatenate([body, tail], axis=2)  # W = C + K - 1
    y = jnp.einsum("hcw,bjwhd->bjchd", toeplitz_taps(kernel_KxH, c).astype(x_BxNxHxDh.dtype), windows_BxJxWxHxDh)
    return y.reshape(b, num_blocks * c, h, dh)[:, :n]


def toeplitz_taps(kernel_KxH: jax.Array, block: int) -> jax.Array:
    """H x C x (C + K - 1) band from a block's inputs to its C outputs; lra_lab.bench.conv_window uses it too."""
    k = kernel_KxH.shape[0]
    tap_CxW = jnp.arange(block + k - 1)[None, :] - jnp.arange(block)[:, None]  # input r feeds output c via tap r - c
    band = (tap_CxW >= 0) & (tap_CxW < k)
    taps_CxWxH = jnp.where(band[..., None], kernel_KxH[jnp.clip(tap_CxW, 0, k - 1)], 0.0)
    return taps_CxWxH.transpose(2, 0, 1)


def filter_length(
    x_BxNxHxDh: jax.Array,
    mask_BxN: jax.Array,
    kind: str,
    kernel_size: int,
    stride: int,
    kernel_KxH: jax.Array | None = None,
    padding: str = "same",
) -> tuple[jax.Array, jax.Array]:
    """Filter along length (windows: module docstring): (B x J x H x Dh, B x J mask), non-real windows zeroed.
    ``same``: J = ceil(N / S); ``valid``: J = floor((N - K) / S) + 1, at least 1 (a shorter sequence is padded to K)."""
    if padding not in WINDOWS:
        raise InputError(f"unknown filter padding {padding!r}; valid: {', '.join(WINDOWS)}")
    if padding == "valid" and x_BxNxHxDh.shape[1] < kernel_size:
        extra = kernel_size - x_BxNxHxDh.shape[1]
        x_BxNxHxDh = jnp.pad(x_BxNxHxDh, ((0, 0), (0, extra), (0, 0), (0, 0)))
        mask_BxN = jnp.pad(mask_BxN, ((0, 0), (0, extra)))
    real = mask_BxN[:, :, None, None]
    if kind == "maxpool":
        y = _maxpool_same(jnp.where(real, x_BxNxHxDh, -jnp.inf), kernel_size)
    elif kind == "conv":
        assert kernel_KxH is not None, "a conv filter needs its kernel"
        y = _conv_same(jnp.where(real, x_BxNxHxDh, 0.0), kernel_KxH)
    else:
        raise InputError(f"unknown filter {kind!r}; valid: {', '.join(FILTERS)}")
    if padding == "same":
        mask_BxJ = mask_BxN[:, ::stride]
        y = y[:, ::stride]
    else:
        n, left = mask_BxN.shape[1], (kernel_size - 1) // 2
        num_windows = (n - kernel_size) // stride + 1
        y = y[:, left::stride][:, :num_windows]  # the 'same' window centred at j*S + left is [j*S, j*S + K)
        real_count = jnp.pad(jnp.cumsum(mask_BxN.astype(jnp.int32), axis=1), ((0, 0), (1, 0)))
        starts = jnp.arange(num_windows) * stride
        mask_BxJ = (real_count[:, starts + kernel_size] - real_count[:, starts]) == kernel_size
    return jnp.where(mask_BxJ[:, :, None, None], y, 0.0).astype(x_BxNxHxDh.dtype), mask_BxJ


class LunaAttention(Attention):
    """Luna's packing + unpacking attention (Appendix B); ConvLuna's options (module docstring) off by default.
    ``memory_size``: M memory cells (paper: 1, 16, 256); ``kernel_size``, ``stride``: the filter's K and S."""

    memory_size: int = 16
    filter: str = "none"
    kernel_size: int = 4
    stride: int = 1
    filter_padding: str = "same"
    learn_temperature: bool = False
    freeze_temperature: bool = False
    scale_unpacking: bool = True
    share_projections: bool | str = False
    share_kv: bool = False

    uses_memory: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.filter not in FILTERS:
            raise InputError(f"attention_kwargs.filter={self.filter!r}; valid: {', '.join(FILTERS)}")
        if self.filter_padding not in WINDOWS:
            raise InputError(f"attention_kwargs.filter_padding={self.filter_padding!r}; valid: {', '.join(WINDOWS)}")
        shared_projections(self.share_projections)  # raises on a bad value
        if self.freeze_temperature and not self.learn_temperature:
            raise InputError(
                "attention_kwargs.freeze_temperature=True fixes the learned temperature at its initial "
                "value: it needs learn_temperature=True (without it the logits are scaled by Dh^-1/2)"
            )
        for field in ("memory_size", "kernel_size", "stride"):
            if getattr(self, field) < 1:
                raise InputError(f"attention_kwargs.{field} must be >= 1, got {getattr(self, field)}")

    def _check_width(self, d: int) -> None:
        if self.share_kv and d != self.qkv_dim:
            raise InputError(
                f"share_kv=True uses W^V = identity, which needs qkv_dim ({self.qkv_dim}) == the "
                f"model width D ({d}): set config.model.qkv_dim = config.model.emb_dim, or "
                f"config.model.attention_kwargs.share_kv=False."
            )

    def _attend(
        self,
        layers: _Layers,
        xq_BxQxD: jax.Array,
        xkv_BxKxD: jax.Array,
        kv_mask_BxK: jax.Array | None,
        *,
        packing: bool,
        deterministic: bool,
    ) -> jax.Array:
        """Heads of MultiHeadAttention(Xq, Xkv, Xkv), B x Q x H x Dh before W^O; packing masks, filters, scales."""
        q = layers.query(xq_BxQxD)
        k = layers.key(xkv_BxKxD)
        if layers.value is None:  # W^V = I: the inputs themselves, split into heads
            v = xkv_BxKxD.reshape(k.shape).astype(k.dtype)
        else:
            v = layers.value(xkv_BxKxD)
        scale: jax.Array | float | None = None if packing or self.scale_unpacking else 1.0  # None: Dh^-1/2
        if packing:
            assert kv_mask_BxK is not None  # packing attends to the tokens: __call__ passes their mask
            k, v = zero_padding(k, kv_mask_BxK), zero_padding(v, kv_mask_BxK)
            if self.filter != "none":
                kernel = None
                if self.filter == "conv":
                    kernel = self.param(
                        "filter_kernel",
                        # PyTorch's Conv default (the reference's): U(+-1/sqrt(fan_in)), fan_in = K.
                        nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform", in_axis=0, out_axis=1),
                        (self.kernel_size, self.num_heads),
                    )
                opts = (self.filter, self.kernel_size, self.stride, kernel, self.filter_padding)
                k, _ = filter_length(k, kv_mask_BxK, *opts)
                v, kv_mask_BxK = filter_length(v, kv_mask_BxK, *opts)
            if self.learn_temperature and self.freeze_temperature:
                scale = 1.0  # exp(-tau) at tau's initial 0, never trained
            elif self.learn_temperature:
                scale = jnp.exp(-self.param("log_temperature", nn.initializers.zeros, ()))
        dropout_rng = self.dropout_rng(deterministic)
        y, weights_BxHxQxK = dot_product_attention(
            q,
            k,
            v,
            kv_mask_BxK,
            scale=scale,
            dropout_rate=self.dropout_rate,
            dropout_rng=dropout_rng,
            deterministic=deterministic,
            return_weights=True,
        )
        if packing:  # for lra_lab.diagnose (no-ops unless the "intermediates" collection is mutable)
            self.sow("intermediates", "packing_weights", weights_BxHxQxK)
            self.sow("intermediates", "packing_key_mask", kv_mask_BxK)
        return y

    @nn.compact
    def __call__(
        self,
        x_BxNxD: jax.Array,
        mask_BxN: jax.Array,
        memory: jax.Array | None = None,
        deterministic: bool = True,
    ) -> tuple[jax.Array, jax.Array]:
        b, _, d = x_BxNxD.shape
        self._check_width(d)
        if memory is None:  # standalone use; the encoder passes its own learned memory
            mem = self.param("memory", nn.initializers.normal(stddev=1.0), (self.memory_size, d))
            memory = jnp.broadcast_to(mem, (b,) + mem.shape).astype(x_BxNxD.dtype)
        needed = tuple(n for n in PROJECTIONS if not (n == "value" and self.share_kv))
        shared = tuple(n for n in shared_projections(self.share_projections) if n in needed)
        own = tuple(n for n in needed if n not in shared)
        args = (self.num_heads, self.head_dim, d, self.dtype)
        common = {name: _make_layer(name, *args) for name in shared}

        def layers(scope: str) -> _Layers:
            found = dict(common, **(_Projections(own, *args, name=scope).layers() if own else {}))
            return _Layers(found["query"], found["key"], found.get("value"), found["out"])

        pack, unpack = layers("pack"), layers("unpack")

        packed_BxMxHxDh = self._attend(pack, memory, x_BxNxD, mask_BxN, packing=True, deterministic=deterministic)
        packed_BxMxD = pack.out(packed_BxMxHxDh)
        # Unpacking attends to all M packed cells (no mask): they only ever saw real tokens.
        y_BxNxHxDh = self._attend(unpack, x_BxNxD, packed_BxMxD, None, packing=False, deterministic=deterministic)
        y_BxNxD = unpack.out(zero_padding(y_BxNxHxDh, mask_BxN))
        return y_BxNxD, packed_BxMxD


class ConvLunaAttention(LunaAttention):
    """ConvLuna (Appendix C) with Section D's defaults: MaxPool K=4, S=1, learned temperature, all projections
    shared by packing and unpacking, W^V = I. ListOps' config sets ``filter="conv", kernel_size=32``."""

    filter: str = "maxpool"  # kernel_size 4, stride 1: LunaAttention's defaults
    learn_temperature: bool = True
    share_projections: bool | str = True
    share_kv: bool = True
