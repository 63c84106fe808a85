"""Checkpoint integrity: every flipped bit is found, no NaN state is saved, saves are atomic."""

from __future__ import annotations

import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from lra.errors import NonFiniteLossError
from lra.training import provenance
from lra.training.checkpoints import Checkpoints, CorruptCheckpointError


def _state(value: float = 1.0) -> dict:
    return {
        "params": {"w": jnp.full((4, 3), value, jnp.float32), "b": jnp.arange(3, dtype=jnp.float32)},
        "step": jnp.asarray(7, jnp.int32),
    }


def flip_bit(path: Path, rng: np.random.Generator) -> tuple[int, int]:
    """Flip one random bit of ``path`` in place; returns (byte, bit)."""
    data = bytearray(path.read_bytes())
    byte, bit = int(rng.integers(len(data))), int(rng.integers(8))
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))
    return byte, bit


def test_save_restore_round_trip_and_keeps_two_latest(tmp_path):
    ckpt = Checkpoints(tmp_path)
    for step in (1, 2, 3):
        ckpt.save_latest(step, _state(step))
    assert ckpt.steps("latest") == [2, 3]
    restored = ckpt.restore("latest", 3, _state())
    np.testing.assert_array_equal(restored["params"]["w"], np.full((4, 3), 3.0))
    assert not list((tmp_path / "checkpoints" / "latest").glob(".tmp-*"))


def test_every_single_bit_flip_is_detected(tmp_path):
    """One flip in each file of a checkpoint (data, orbax metadata, the record itself)."""
    rng = np.random.default_rng(13)
    ckpt = Checkpoints(tmp_path)
    ckpt.save_best(5, _state())
    folder = ckpt.path("best", 5)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert len(files) > 5 and folder / "integrity.json" in files
    pristine = {p: p.read_bytes() for p in files}
    for path in files:
        for _ in range(3):
            flip_bit(path, rng)
            with pytest.raises(CorruptCheckpointError, match=f"{folder}"):
                ckpt.restore("best", 5, _state())
            path.write_bytes(pristine[path])
    ckpt.restore("best", 5, _state())  # intact again


def test_missing_or_extra_file_is_detected(tmp_path):
    ckpt = Checkpoints(tmp_path)
    ckpt.save_latest(1, _state())
    data_file = next(p for p in (ckpt.path("latest", 1) / "state").rglob("*") if p.is_file())
    extra = ckpt.path("latest", 1) / "state" / "extra"
    extra.write_text("x")
    with pytest.raises(CorruptCheckpointError, match="not in the record"):
        ckpt.verify("latest", 1)
    extra.unlink()
    data_file.unlink()
    with pytest.raises(CorruptCheckpointError, match="is missing"):
        ckpt.verify("latest", 1)


def test_newest_intact_skips_a_damaged_newest(tmp_path):
    ckpt = Checkpoints(tmp_path)
    ckpt.save_latest(3, _state(3.0))
    ckpt.save_latest(6, _state(6.0))
    flip_bit(ckpt.path("latest", 6) / "integrity.json", np.random.default_rng(0))
    step, damaged = ckpt.newest_intact("latest")
    assert step == 3 and [e.path.name for e in damaged] == ["6"]
    aside = ckpt.set_aside("latest", 6)
    assert aside.name == "6.corrupt" and ckpt.steps("latest") == [3]
    ckpt.save_latest(6, _state(6.0))  # the step can be saved again
    assert ckpt.newest_intact("latest") == (6, [])


def test_non_finite_state_is_never_saved(tmp_path):
    ckpt = Checkpoints(tmp_path)
    bad = _state()
    bad["params"]["w"] = bad["params"]["w"].at[0, 0].set(jnp.nan)
    with pytest.raises(NonFiniteLossError, match=r"step 4.*\['params'\]\['w'\]"):
        ckpt.save_latest(4, bad)
    assert ckpt.steps("latest") == []


def test_interrupted_save_leaves_previous_checkpoint_and_is_cleaned(tmp_path):
    ckpt = Checkpoints(tmp_path)
    ckpt.save_latest(1, _state())
    stale = tmp_path / "checkpoints" / "latest" / ".tmp-2"
    (stale / "state").mkdir(parents=True)
    (stale / "state" / "half").write_bytes(b"\0" * 10)  # what a kill mid-save leaves
    assert ckpt.newest_intact("latest") == (1, [])
    ckpt.save_latest(2, _state())
    assert not stale.exists() and ckpt.steps("latest") == [1, 2]


def test_sealed_json_detects_any_change(tmp_path):
    path = tmp_path / "r.json"
    provenance.write_sealed_json(path, {"a": [1, 2], "b": "x"})
    assert provenance.read_sealed_json(path) == {"a": [1, 2], "b": "x"}
    raw = path.read_bytes()
    for byte in range(len(raw)):
        path.write_bytes(raw[:byte] + bytes([raw[byte] ^ 4]) + raw[byte + 1 :])
        with pytest.raises((provenance.IntegrityError, ValueError)):
            provenance.read_sealed_json(path)
    os.remove(path)
    with pytest.raises(provenance.IntegrityError, match="missing"):
        provenance.read_sealed_json(path)
