"""lra_lab.bench.conv_window: the ways of assembling ConvLuna's convolution windows compute what they claim."""

from __future__ import annotations

import numpy as np
import pytest

from lra_lab.bench import conv_window

SHAPE = (2, 37, 2, 8, 32)  # B x N x H x Dh x K: two blocks, a ragged tail


@pytest.mark.parametrize("way", [w for w, (_, same) in conv_window.WAYS.items() if same and w != "toeplitz"])
def test_ways_feeding_the_same_matmul_are_bit_identical(way):
    (row,) = conv_window.check_bits([way], shapes=(SHAPE,))
    assert row["identical"] == {"y": True, "dx": True, "dkernel": True}, row


@pytest.mark.parametrize("way", [w for w, (_, same) in conv_window.WAYS.items() if not same])
def test_other_ways_compute_the_same_convolution(way):
    (row,) = conv_window.check_bits([way], shapes=(SHAPE,))
    assert row["max_abs_diff"] < 1e-4, row


def test_toeplitz_taps_is_the_band_of_the_kernel():
    import jax
    import jax.numpy as jnp

    from lra.attention.luna import toeplitz_taps

    kernel = np.arange(1.0, 9.0, dtype=np.float32).reshape(4, 2)  # K = 4 taps, 2 heads
    taps = np.asarray(jax.jit(toeplitz_taps, static_argnums=1)(jnp.asarray(kernel), 3))  # H x C x (C + K - 1)
    assert taps.shape == (2, 3, 6)
    for c in range(3):
        for w in range(6):
            want = kernel[w - c] if 0 <= w - c < 4 else np.zeros(2)
            np.testing.assert_array_equal(taps[:, c, w], want)
