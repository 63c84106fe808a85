"""TFRecord files and ``tf.train.Example`` messages without TensorFlow (formats small enough to implement here).

* A record: ``uint64 length`` (little endian), ``uint32 masked_crc32c(length bytes)``, ``data``,
  ``uint32 masked_crc32c(data)``; ``masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2**32)``; both verified.
* ``Example{Features features=1}``, ``Features{map<string,Feature> feature=1}`` (entries ``key=1``, ``value=2``),
  ``Feature{oneof: BytesList bytes_list=1, FloatList float_list=2, Int64List int64_list=3}``, each list
  ``repeated value=1`` (packed or not).
* Writers: for test fixtures built from the spec. CRC32C is vectorised with numpy (Python loops: tens of seconds
  on CIFAR-10's 150 MB)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

_POLY = 0x82F63B78  # CRC32C, reflected


def _make_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table[i] = c
    return table


_TABLE = _make_table()
_TABLE_LIST = [int(v) for v in _TABLE]


def crc32c(data: bytes) -> int:
    """CRC32C of one buffer (a plain loop: for small buffers and the writer)."""
    crc = 0xFFFFFFFF
    table = _TABLE_LIST
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c_many(buffers: Sequence[bytes], chunk: int = 4096) -> np.ndarray:
    """CRC32C of many buffers, vectorised over buffers (longest first: the running ones are a prefix)."""
    lengths = np.fromiter((len(b) for b in buffers), np.int64, len(buffers))
    out = np.zeros(len(buffers), np.uint32)
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), chunk):
        idx = order[start : start + chunk]
        lens = lengths[idx]
        width = int(lens[0]) if len(lens) else 0
        flat = np.frombuffer(b"".join(buffers[i] for i in idx), np.uint8)
        bytes_BxL = np.zeros((len(idx), width), np.uint8)
        bytes_BxL[np.arange(width) < lens[:, None]] = flat  # row-major fill = concatenation order
        bytes_LxB = np.ascontiguousarray(bytes_BxL.T)  # position-major: each step reads one row
        # active[j] = number of buffers longer than j (lens is sorted descending)
        active = np.searchsorted(-lens, -np.arange(width), side="left")
        crc = np.full(len(idx), 0xFFFFFFFF, np.uint32)
        for j in range(width):
            k = active[j]
            c = crc[:k]
            crc[:k] = np.take(_TABLE, c.astype(np.uint8) ^ bytes_LxB[j, :k]) ^ (c >> 8)
        out[idx] = crc ^ np.uint32(0xFFFFFFFF)
    return out


def mask_crc(crc: int | np.ndarray) -> int | np.ndarray:
    """TFRecord's masked CRC (so CRCs of data that contains CRCs stay well distributed)."""
    if isinstance(crc, np.ndarray):
        crc = crc.astype(np.uint64)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class RecordError(ValueError):
    """A malformed or corrupt TFRecord file or Example (the caller adds the path and the fix)."""


def read_records(path: str | Path, verify: bool = True) -> list[bytes]:
    """All records of one TFRecord file, with both CRCs checked when ``verify``."""
    blob = Path(path).read_bytes()
    records: list[bytes] = []
    headers, footer_crcs, header_crcs = [], [], []
    pos, n = 0, len(blob)
    while pos < n:
        if pos + 12 > n:
            raise RecordError(f"truncated record header at byte {pos} (record {len(records)})")
        header = blob[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[pos + 8 : pos + 12])
        end = pos + 12 + length
        if end + 4 > n:
            raise RecordError(
                f"truncated record {len(records)} at byte {pos}: length {length} "
                f"runs past the end of the file ({n} bytes)"
            )
        records.append(blob[pos + 12 : end])
        headers.append(header)
        header_crcs.append(header_crc)
        footer_crcs.append(struct.unpack("<I", blob[end : end + 4])[0])
        pos = end + 4
    if verify and records:
        for what, bufs, expected in (("length", headers, header_crcs), ("data", records, footer_crcs)):
            got = mask_crc(crc32c_many(bufs))
            bad = np.flatnonzero(got != np.asarray(expected, np.uint64))
            if len(bad):
                raise RecordError(
                    f"CRC mismatch in the {what} of record {int(bad[0])} "
                    f"({len(bad)} corrupt records): the file is damaged"
                )
    return records


def write_records(path: str | Path, records: Iterable[bytes]) -> None:
    with open(path, "wb") as f:
        for data in records:
            header = struct.pack("<Q", len(data))
            f.write(header + struct.pack("<I", mask_crc(crc32c(header))))
            f.write(data + struct.pack("<I", mask_crc(crc32c(data))))


# ----------------------------------------------------------------------------- protobuf wire format

FeatureValue = list[bytes] | list[int] | list[float]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise RecordError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise RecordError("varint longer than 10 bytes")


def _fields(buf: bytes):
    """Yield (field number, wire type, value) of one message; value is int or bytes."""
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise RecordError(f"unsupported protobuf wire type {wire}")
        if pos > n:
            raise RecordError("truncated protobuf field")
        yield number, wire, value


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _parse_feature(buf: bytes) -> FeatureValue:
    for kind, wire, payload in _fields(buf):
        if wire != 2:
            continue
        values: list = []
        for number, vwire, value in _fields(payload):
            if number != 1:
                continue
            if kind == 1:  # BytesList
                values.append(bytes(value))
            elif kind == 2:  # FloatList: packed (wire 2) or one fixed32 (wire 5)
                values.extend(np.frombuffer(value, "<f4").tolist())
            elif kind == 3:  # Int64List: packed (wire 2) or one varint (wire 0)
                if vwire == 0:
                    values.append(_signed64(value))
                else:
                    pos = 0
                    while pos < len(value):
                        v, pos = _varint(value, pos)
                        values.append(_signed64(v))
        return values
    return []


def parse_example(buf: bytes) -> dict[str, FeatureValue]:
    """Decode a serialized ``tf.train.Example`` into ``{name: list of values}``."""
    features: dict[str, FeatureValue] = {}
    for number, wire, payload in _fields(buf):
        if number != 1 or wire != 2:
            continue
        for enumber, ewire, entry in _fields(payload):
            if enumber != 1 or ewire != 2:
                continue
            key, value = None, b""
            for fnumber, _, fvalue in _fields(entry):
                if fnumber == 1:
                    key = bytes(fvalue).decode("utf-8")
                elif fnumber == 2:
                    value = fvalue
            if key is None:
                raise RecordError("feature map entry without a key")
            features[key] = _parse_feature(value)
    return features


def _encode_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def _delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def encode_example(features: Mapping[str, Sequence[bytes] | Sequence[int] | Sequence[float]]) -> bytes:
    """Serialize ``{name: values}`` as a ``tf.train.Example`` (bytes, int64 or float lists)."""
    entries = b""
    for key, column in features.items():
        values: list[Any] = list(column)  # one kind throughout, told apart below
        if all(isinstance(v, (bytes, bytearray)) for v in values):
            inner = b"".join(_delimited(1, bytes(v)) for v in values)
            feature = _delimited(1, inner)
        elif all(isinstance(v, (int, np.integer)) for v in values):
            feature = _delimited(3, _delimited(1, b"".join(_encode_varint(int(v)) for v in values)))
        else:
            feature = _delimited(2, _delimited(1, np.asarray(values, "<f4").tobytes()))
        entries += _delimited(1, _delimited(1, key.encode("utf-8")) + _delimited(2, feature))
    return _delimited(1, entries)
